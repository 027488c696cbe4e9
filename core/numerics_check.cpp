// core/numerics_check.cpp — see core/numerics_check.h.
#include "core/numerics_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>

#include "core/autocast_state.h"
#include "core/dispatcher.h"

namespace mixtape::numerics {

namespace detail {
namespace {
bool env_mode(OnFinding& mode) {
  const char* env = std::getenv("MIXTAPE_CHECK_NUMERICS");
  if (!env || !*env || std::strcmp(env, "0") == 0) return false;
  mode = std::strcmp(env, "report") == 0 ? OnFinding::Report : OnFinding::Throw;
  return true;
}
OnFinding g_env_mode = OnFinding::Throw;
}  // namespace
std::atomic<bool> enabled_flag{env_mode(g_env_mode)};
}  // namespace detail

namespace {
std::atomic<OnFinding> g_mode{detail::g_env_mode};
std::atomic<bool> g_scaled_loss{false};
std::atomic<int64_t> g_left_to_scaler{0};
std::atomic<int64_t> g_kernel_calls{0};
std::mutex g_mu;
std::vector<Finding> g_findings;  // at most one: the first

thread_local BackwardScope* t_backward = nullptr;
thread_local AutocastScope* t_autocast = nullptr;
thread_local bool t_inside_check = false;  // the check's own host copies are not checked

// Any element whose bits under `mask` are all ones: an inf or NaN exponent (e4m3fn: its NaN).
template <typename U>
bool any_all_ones(const void* data, int64_t n, U mask) {
  const U* p = static_cast<const U*>(data);
  U hit = 0;
  for (int64_t i = 0; i < n; ++i) hit |= static_cast<U>((p[i] & mask) == mask);
  return hit != 0;
}

bool scan_contiguous_cpu(const Tensor& t, bool& finite) {
  const void* p = t.data_ptr();
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::Float32: finite = !any_all_ones<uint32_t>(p, n, 0x7F800000u); return true;
    case DType::Float64: finite = !any_all_ones<uint64_t>(p, n, 0x7FF0000000000000ull); return true;
    case DType::Float16: finite = !any_all_ones<uint16_t>(p, n, 0x7C00u); return true;
    case DType::BFloat16: finite = !any_all_ones<uint16_t>(p, n, 0x7F80u); return true;
    case DType::Float8_e4m3fn: finite = !any_all_ones<uint8_t>(p, n, 0x7Fu); return true;
    case DType::Float8_e5m2: finite = !any_all_ones<uint8_t>(p, n, 0x7Cu); return true;
    default: return false;
  }
}

struct Inside {
  Inside() { t_inside_check = true; }
  ~Inside() { t_inside_check = false; }
};

// amax over the finite values, and the counts of infs and NaNs (reading a host copy).
struct Summary {
  double amax = 0;
  int64_t infs = 0, nans = 0;
};
Summary summarize(const Tensor& t) {
  Inside inside;
  Summary s;
  for (double v : t.to_vector<double>()) {
    if (std::isnan(v))
      ++s.nans;
    else if (std::isinf(v))
      ++s.infs;
    else
      s.amax = std::max(s.amax, std::fabs(v));
  }
  return s;
}

bool checked(const Tensor& t) {
  // Wrapped scalars too (w * inf), and FP8, which is_floating_point() leaves out.
  return t.defined() && (t.is_floating_point() || is_float8(t.dtype())) && t.numel() > 0;
}

// An attribute that is itself inf or NaN (fill_ with -inf for a mask): the op writes it on purpose.
bool nonfinite_attr(const OpCall& call) {
  for (const auto& [name, v] : call.attrs.items())
    if (const double* d = std::get_if<double>(&v); d && !std::isfinite(*d)) return true;
  return false;
}

std::string autocast_decision(const OpSchema& op, const OpCall& call) {
  std::ostringstream os;
  for (const AutocastScope* s = t_autocast; s; s = s->parent) {
    if (s->op != &op) continue;
    os << "policy " << amp_policy_name(op.amp_policy) << " in a " << dtype_name(s->region) << " region: ";
    if (s->has_target)
      os << "floating inputs cast to " << dtype_name(s->target);
    else
      os << "no cast (dtype given, or input ineligible or already f32)";
    return os.str();
  }
  const AutocastDeviceState& st = autocast_state()[call_device_type(call)];
  if (st.enabled)
    os << "a " << dtype_name(st.dtype) << " region is open; policy " << amp_policy_name(op.amp_policy)
       << ": the op runs in its inputs' dtypes (not cast)";
  else if (t_backward)
    os << "off (backward runs in the dtypes its forward chose)";
  else
    os << "off (no autocast region)";
  return os.str();
}

void report(const OpSchema& op, const OpCall& call, const TensorList& outputs, int64_t call_nr) {
  const bool backward = t_backward != nullptr;
  std::ostringstream os;
  os << "check_numerics: " << op.name << (backward ? " (backward)" : " (forward)")
     << " produced inf or NaN from finite inputs\n";
  os << "  tape: ";
  const BackwardScope* node = t_backward;
  while (node && !node->node) node = node->parent;
  if (node)
    os << "inside the backward of tape entry " << node->describe(node->node) << '\n';
  else if (backward)
    os << "in the backward engine (summing gradients that meet at one tensor)\n";
  else
    os << "forward call (kernel call #" << call_nr << " since checking began)\n";
  os << "  autocast: " << autocast_decision(op, call) << '\n';
  os << "  inputs:";
  bool any = false;
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const Tensor& t = call.inputs[i];
    if (!t.defined()) continue;
    os << (any ? "," : "") << ' ' << op.arg_name(i) << ' ' << t.describe();
    if (checked(t)) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.6g", summarize(t).amax);
      os << " amax " << buf;
    }
    any = true;
  }
  if (!any) os << " none";
  os << "\n  outputs:";
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& t = outputs[i];
    if (!t.defined()) continue;
    os << (i ? "," : "") << " output " << i << ' ' << t.describe();
    if (checked(t)) {
      const Summary s = summarize(t);
      os << " (" << s.infs << " inf, " << s.nans << " NaN of " << t.numel() << ")";
    }
  }
  Finding f{op.name, backward, os.str()};
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_findings.empty()) return;  // only the first
    g_findings.push_back(f);
  }
  if (g_mode.load(std::memory_order_relaxed) == OnFinding::Throw) throw NumericsError(f.op, f.backward, f.message);
  std::fprintf(stderr, "%s\n", f.message.c_str());
}
}  // namespace

bool all_finite(const Tensor& t) {
  if (!checked(t)) return true;
  bool finite = true;
  if (t.device().is_cpu() && t.is_contiguous() && scan_contiguous_cpu(t, finite)) return finite;
  const Summary s = summarize(t);  // strided or on a device: through a host copy
  return s.infs == 0 && s.nans == 0;
}

void set_enabled(bool on, OnFinding mode) {
  g_mode.store(mode, std::memory_order_relaxed);
  if (on) reset();
  detail::enabled_flag.store(on, std::memory_order_relaxed);
}
OnFinding mode() { return g_mode.load(std::memory_order_relaxed); }

std::vector<Finding> findings() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_findings;
}
void reset() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_findings.clear();
  g_scaled_loss.store(false, std::memory_order_relaxed);
  g_left_to_scaler.store(0, std::memory_order_relaxed);
  g_kernel_calls.store(0, std::memory_order_relaxed);
}
int64_t overflows_left_to_scaler() { return g_left_to_scaler.load(std::memory_order_relaxed); }

CheckNumerics::CheckNumerics(OnFinding m) : was_enabled_(enabled()), was_mode_(mode()) { set_enabled(true, m); }
CheckNumerics::~CheckNumerics() {
  g_mode.store(was_mode_, std::memory_order_relaxed);
  detail::enabled_flag.store(was_enabled_, std::memory_order_relaxed);
}

BackwardScope::BackwardScope(const void* n, std::string (*d)(const void*)) : node(n), describe(d), parent(t_backward) {
  t_backward = this;
}
BackwardScope::~BackwardScope() { t_backward = parent; }

AutocastScope::AutocastScope(const OpSchema* o, DType r, bool has, DType tgt)
    : op(o), region(r), target(tgt), has_target(has), parent(t_autocast) {
  t_autocast = this;
}
AutocastScope::~AutocastScope() { t_autocast = parent; }

void set_scaled_loss_in_flight(bool on) { g_scaled_loss.store(on, std::memory_order_relaxed); }

PreKernel before_kernel(const OpSchema& op, const OpCall& call) {
  PreKernel pre;
  if (t_inside_check) return pre;
  pre.active = true;
  if (op.inplace && !call.inputs.empty()) pre.inplace_input_finite = all_finite(call.inputs[0]);
  return pre;
}

void after_kernel(const OpSchema& op, const OpCall& call, const TensorList& outputs, const PreKernel& pre) {
  const int64_t call_nr = g_kernel_calls.fetch_add(1, std::memory_order_relaxed) + 1;
  // Views (device-independent kernels) share their input's values: checked where those were made.
  if (op.any_device || !pre.inplace_input_finite) return;
  bool finite = true;
  for (const Tensor& t : outputs) finite = finite && all_finite(t);
  if (finite) return;
  // Not first: an input already held the inf or NaN (reported where it was made, if an op made it).
  for (size_t i = op.inplace ? 1 : 0; i < call.inputs.size(); ++i)
    if (!all_finite(call.inputs[i])) return;
  if (nonfinite_attr(call)) return;
  if (g_scaled_loss.load(std::memory_order_relaxed)) {
    bool nan = false;
    for (const Tensor& t : outputs)
      if (checked(t)) nan = nan || summarize(t).nans > 0;
    if (!nan) {  // an overflow the GradScaler will find and skip
      g_left_to_scaler.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  report(op, call, outputs, call_nr);
}

}  // namespace mixtape::numerics
