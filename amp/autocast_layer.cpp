// amp/autocast_layer.cpp — the Autocast dispatch layer: decides, per op call, which inputs to
// cast to which dtype (see amp/autocast.h for the rules), casts them, and calls the op again
// below itself. MIXTAPE_TRACE=amp prints one line per decision, e.g.
//   autocast linear lower_precision(Float16): input f32->f16, weight f32->f16 (cache hit), bias f32->f16 (cached)
#include <mutex>
#include <sstream>

#include "amp/autocast.h"
#include "amp/weight_cast_cache.h"
#include "autograd/grad_mode.h"
#include "core/dispatcher.h"
#include "core/error.h"
#include "core/trace.h"
#include "ops/cast.h"

namespace mixtape::amp {

namespace detail {
void count_autocast_cast();  // amp/autocast.cpp
}

namespace {

bool eligible(const Tensor& t, DeviceType dev) {
  return t.defined() && !t.is_wrapped_number() && t.is_floating_point() && t.dtype() != DType::Float64 &&
         t.device().type() == dev;
}

// Collects the trace line's parts only when tracing is on (the common case pays nothing).
class Decision {
 public:
  explicit Decision(const OpSchema& op) : on_(trace_enabled(TraceKind::Amp)) {
    if (on_) os_ << "autocast " << op.name << ' ' << amp_policy_name(op.amp_policy);
  }
  bool on() const { return on_; }
  std::ostringstream& target(DType dt) {
    os_ << '(' << dtype_name(dt) << "):";
    return os_;
  }
  void arg(const std::string& name, const std::string& what) {
    if (!on_) return;
    os_ << (first_ ? " " : ", ") << name << ' ' << what;
    first_ = false;
  }
  void note(const std::string& s) {
    if (on_) os_ << ' ' << s;
  }
  void emit() {
    if (on_) trace_line(TraceKind::Amp, os_.str());
  }

 private:
  bool on_;
  bool first_ = true;
  std::ostringstream os_;
};

std::string short_dtype(DType d) { return std::string(dtype_short(d)); }

// Casts an eligible input to `target`, through the weight-cast cache when the rules allow.
Tensor cast_input(const Tensor& t, DType target, const AutocastDeviceState& st, const std::string& name,
                  Decision& d) {
  if (t.dtype() == target) {
    d.arg(name, short_dtype(target) + " (kept)");
    return t;
  }
  const std::string change = short_dtype(t.dtype()) + "->" + short_dtype(target);
  const char* not_cacheable = autocast_nesting() > 0 ? why_not_cacheable(t, target, st) : "no open region";
  WeightCastCache& cache = thread_weight_cast_cache();
  if (!not_cacheable) {
    if (Tensor hit = cache.find(t, target); hit.defined()) {
      d.arg(name, change + " (cache hit)");
      return hit;
    }
    // Grad mode on: a cast made under NoGradGuard and reused by a later grad-enabled op in the
    // same region must still lead back to the weight (pytorch#158232).
    autograd::EnableGradGuard grad_on;
    Tensor c = to_dtype(t, target);
    detail::count_autocast_cast();
    cache.insert(t, target, c);
    d.arg(name, change + " (cached)");
    return c;
  }
  detail::count_autocast_cast();
  d.arg(name, d.on() && st.cache_enabled && target == st.dtype ? change + " (not cached: " + not_cacheable + ")"
                                                                : change);
  return to_dtype(t, target);
}

// Promote: f32 if any eligible input is f32, else the one 16-bit dtype they share (f64 never
// takes part). f16 mixed with bf16 and no f32 has no common 16-bit type: an error naming both.
DType promote_target(const OpSchema& op, const OpCall& call, DeviceType dev) {
  bool has_f32 = false;
  std::optional<DType> lower;
  size_t lower_i = 0;
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const Tensor& t = call.inputs[i];
    if (!eligible(t, dev)) continue;
    if (t.dtype() == DType::Float32) {
      has_f32 = true;
    } else if (!lower) {
      lower = t.dtype();
      lower_i = i;
    } else if (*lower != t.dtype() && !has_f32) {
      bool f32_later = false;
      for (size_t j = i + 1; j < call.inputs.size(); ++j)
        f32_later = f32_later || (eligible(call.inputs[j], dev) && call.inputs[j].dtype() == DType::Float32);
      MT_CHECK(f32_later, op.name, ": autocast cannot promote ", dtype_name(*lower), " (", op.arg_name(lower_i),
               ") and ", dtype_name(t.dtype()), " (", op.arg_name(i),
               ") to a common 16-bit dtype: neither holds the other's values. Cast one of them first (to Float32 "
               "to keep both exactly)");
    }
  }
  return has_f32 || !lower ? DType::Float32 : *lower;
}

TensorList autocast_layer(const OpSchema& op, OpCall& call) {
  const DeviceType dev = call_device_type(call);
  const AutocastDeviceState& st = autocast_state()[dev];
  ExcludeLayerGuard no_autocast(DispatchLayer::Autocast);  // casts and the op itself are not autocast again
  check_autocast_ban(op, dev);
  if (op.amp_policy == AmpPolicy::None) return dispatch(op, std::move(call.inputs), std::move(call.attrs));

  Decision d(op);
  std::optional<DType> target;
  switch (op.amp_policy) {
    case AmpPolicy::LowerPrecision: target = st.dtype; break;
    case AmpPolicy::FP32: target = DType::Float32; break;
    case AmpPolicy::FP32UnlessDtype:
      // The caller's dtype wins; otherwise the op computes in f32 when its first input is
      // eligible (the op converts internally: no separate cast node).
      if (call.attrs.get_dtype("dtype")) {
        d.note("(dtype given: unchanged)");
      } else if (eligible(call.inputs[0], dev) && call.inputs[0].dtype() != DType::Float32) {
        if (d.on()) d.target(DType::Float32) << ' ' << op.arg_name(0) << ' ' << short_dtype(call.inputs[0].dtype())
                                             << "->f32 (dtype=Float32)";
        call.attrs.set("dtype", DType::Float32);
      } else {
        d.note("(skipped: ineligible or already f32)");
      }
      d.emit();
      return dispatch(op, std::move(call.inputs), std::move(call.attrs));
    case AmpPolicy::Promote: target = promote_target(op, call, dev); break;
    case AmpPolicy::None: break;
  }
  if (d.on()) d.target(*target);
  bool any = false;
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    Tensor& t = call.inputs[i];
    if (!eligible(t, dev)) {
      if (d.on() && t.defined() && !t.is_wrapped_number())
        d.arg(op.arg_name(i), short_dtype(t.dtype()) + " (skipped: ineligible)");
      continue;
    }
    any = true;
    t = cast_input(t, *target, st, op.arg_name(i), d);
  }
  if (!any) d.note("(no eligible input)");
  d.emit();
  return dispatch(op, std::move(call.inputs), std::move(call.attrs));
}

}  // namespace

void install_autocast_layer() {
  static std::once_flag once;
  std::call_once(once, [] { set_layer_handler(DispatchLayer::Autocast, autocast_layer); });
}

}  // namespace mixtape::amp
