// amp/grad_scaler.cpp — amp::GradScaler (the algorithm: docs/AMP.md, "GradScaler: the algorithm";
// the arithmetic is in amp_functors.h, run by the ops of scaler_kernels.h).
#include "amp/grad_scaler.h"

#include <cmath>
#include <sstream>

#include "amp/amp_functors.h"
#include "amp/scaler_kernels.h"
#include "autograd/grad_mode.h"
#include "core/numerics_check.h"
#include "core/trace.h"
#include "ops/cast.h"
#include "ops/creation.h"
#include "ops/pointwise.h"
#include "ops/shape_ops.h"

namespace mixtape::amp {
namespace {

constexpr const char* kFix =
    "This may indicate your script did not use scaler.scale(loss or outputs) earlier in the iteration.";

float host_float(const Tensor& t) { return to_device(t, Device::CPU()).item<float>(); }

void check_growth_factor(double f, const char* who) {
  MT_CHECK(f > 1.0 && std::isfinite(f), who, ": The growth factor must be > 1.0 (and finite), got ", f);
}
void check_backoff_factor(double f, const char* who) {
  MT_CHECK(f < 1.0 && f > 0.0, who, ": The backoff factor must be < 1.0 (and > 0), got ", f);
}
void check_growth_interval(int64_t n, const char* who) {
  MT_CHECK(n >= 1 && n <= INT32_MAX, who, ": the growth interval must be >= 1 (and fit the i32 tracker), got ", n);
}

// The one rule for a scale, wherever it comes from (constructor, update(new_scale), a loaded
// state; backoff keeps to it in fn::update_scale): a finite float32 >= 2^-126, the smallest
// normal float. Below it 1/S overflows float on the way to 0, and at 0 every step is skipped.
void check_scale(double s, const char* who, const char* what) {
  const float f = static_cast<float>(s);
  MT_CHECK(std::isfinite(f) && f >= fn::kMinScale, who, ": ", what, " must be a positive, finite, normal float32 "
           "value (>= 2^-126 = 1.17549435e-38, the smallest normal float; below it 1/scale overflows and a scale "
           "of 0 skips every step), got ", s);
}

std::string describe_scale(double s) {
  std::ostringstream os;
  os << s;
  const double l = std::log2(s);
  if (s > 0 && l == std::floor(l)) os << " (2^" << static_cast<int64_t>(l) << ")";
  return os.str();
}

}  // namespace

const char* opt_state_name(OptState s) {
  switch (s) {
    case OptState::READY: return "READY";
    case OptState::UNSCALED: return "UNSCALED";
    case OptState::STEPPED: return "STEPPED";
  }
  return "?";
}

GradScaler::GradScaler(GradScalerOptions o)
    : enabled_(o.enabled),
      init_scale_(o.init_scale),
      growth_factor_(o.growth_factor),
      backoff_factor_(o.backoff_factor),
      growth_interval_(o.growth_interval),
      min_scale_(o.min_scale),
      sync_free_(o.sync_free) {
  const char* who = "GradScaler";
  check_growth_factor(o.growth_factor, who);
  check_backoff_factor(o.backoff_factor, who);
  check_growth_interval(o.growth_interval, who);
  check_scale(o.init_scale, who, "init_scale");
  if (min_scale_)
    MT_CHECK(std::isfinite(*min_scale_) && *min_scale_ > 0.0, who, ": min_scale must be positive and finite, got ",
             *min_scale_);
}

// ---- state ----

void GradScaler::check_scale_initialized(const char* funcname) const {
  MT_CHECK(scale_.defined(), "GradScaler.", funcname, ": Attempted ", funcname,
           " but _scale is None (the scale is created by the first scaler.scale() call).  ", kFix);
}

void GradScaler::lazy_init(Device device) {
  const double s = static_cast<float>(init_scale_);
  scale_ = full({}, s, TensorOptions(DType::Float32).with_device(device));
  growth_tracker_ = full({}, init_growth_tracker_, TensorOptions(DType::Int32).with_device(device));
  scale_host_ = static_cast<float>(s);
  growth_tracker_host_ = static_cast<int32_t>(init_growth_tracker_);
  if (sync_free_) {
    skipped_t_ = full({}, skipped_steps_, TensorOptions(DType::Int64).with_device(device));
    consecutive_t_ = full({}, consecutive_skips_, TensorOptions(DType::Int64).with_device(device));
  }
}

GradScaler::PerOptimizer& GradScaler::state_of(const optim::Optimizer& optimizer) {
  for (PerOptimizer& s : per_optimizer_)
    if (s.optimizer == &optimizer) return s;
  per_optimizer_.push_back(PerOptimizer{&optimizer});
  return per_optimizer_.back();
}

OptState GradScaler::stage(const optim::Optimizer& optimizer) const {
  for (const PerOptimizer& s : per_optimizer_)
    if (s.optimizer == &optimizer) return s.stage;
  return OptState::READY;
}

double GradScaler::get_scale() const {
  if (!enabled_) return 1.0;
  return scale_.defined() ? static_cast<double>(scale_host_) : init_scale_;
}

int64_t GradScaler::get_growth_tracker() const {
  if (!enabled_) return 0;
  return growth_tracker_.defined() ? growth_tracker_host_ : init_growth_tracker_;
}

void GradScaler::set_growth_factor(double f) {
  check_growth_factor(f, "GradScaler.set_growth_factor");
  growth_factor_ = f;
}
void GradScaler::set_backoff_factor(double f) {
  check_backoff_factor(f, "GradScaler.set_backoff_factor");
  backoff_factor_ = f;
}
void GradScaler::set_growth_interval(int64_t n) {
  check_growth_interval(n, "GradScaler.set_growth_interval");
  growth_interval_ = n;
}

// ---- scale ----

Tensor GradScaler::scale(const Tensor& outputs) {
  if (!enabled_) return outputs;
  MT_CHECK(outputs.defined(), "GradScaler.scale: outputs must be a Tensor or a list of Tensors, got an undefined "
           "tensor");
  if (!scale_.defined()) lazy_init(outputs.device());
  // From here to update(), overflows are this scaler's to find and skip (the NaN locator's rule).
  numerics::set_scaled_loss_in_flight(true);
  return mul(outputs, to_device(scale_, outputs.device()));  // an op: autograd records it
}

std::vector<Tensor> GradScaler::scale(const std::vector<Tensor>& outputs) {
  if (!enabled_) return outputs;
  std::vector<Tensor> out;
  out.reserve(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    MT_CHECK(outputs[i].defined(), "GradScaler.scale: outputs must be a Tensor or a list of Tensors; outputs[", i,
             "] is an undefined tensor");
    out.push_back(scale(outputs[i]));
  }
  return out;
}

// ---- unscale ----

// Sorts the optimizer's gradients by device and by what happens to them, validates all of them,
// then runs one fused check-and-unscale dispatch per device. `explicit_unscale`: called by
// unscale_ (every gradient must end unscaled) rather than by step() (16-bit gradients of
// parameters with masters may stay scaled: the optimizer applies inv as it widens them).
void GradScaler::unscale_grads(optim::Optimizer& opt, PerOptimizer& st, bool explicit_unscale) {
  autograd::NoGradGuard no_grad;
  // The inverse scale (docs/AMP.md#the-inverse-scale), computed where the scale lives: no host
  // round trip on a GPU.
  const Tensor inv = to_dtype(rdiv(to_dtype(scale_, DType::Float64), 1.0), DType::Float32);
  struct Bucket {
    Device device;
    std::vector<Tensor> unscale;     // unscaled in place: f32/f64 grads, and BF16 ones (PyTorch)
    std::vector<Tensor> check_only;  // 16-bit grads of params with masters, on step() alone
  };
  std::vector<Bucket> buckets;
  auto bucket = [&](Device d) -> Bucket& {
    for (Bucket& b : buckets)
      if (b.device == d) return b;
    buckets.push_back(Bucket{d, {}, {}});
    return buckets.back();
  };
  size_t index = 0;
  for (const optim::ParamGroup& group : opt.param_groups()) {
    for (const Tensor& p : group.params) {
      const Tensor g = p.grad();
      const size_t i = index++;
      if (!g.defined()) continue;
      const bool master = opt.has_master(p);
      if (is_reduced_float(g.dtype()) && master && !explicit_unscale) {
        bucket(g.device()).check_only.push_back(g);
        continue;
      }
      if (g.dtype() == DType::Float16) {
        // PyTorch's allow_fp16=False: FP16 is the one dtype whose true gradient underflows.
        const std::string remedy =
            master ? "For unscale_ (e.g. to clip) keep grad_dtype Float32, which the optimizer sets for 16-bit "
                     "parameters (p.set_grad_dtype(DType::Float32) before the backward); or skip unscale_ and let "
                     "scaler.step(opt) unscale at the copy into the FP32 master."
                   : "Expected a " + std::string(dtype_name(p.dtype())) + " gradient (or give the optimizer the "
                     "16-bit parameter, which then keeps an FP32 master and FP32 gradients).";
        MT_ERROR("GradScaler.unscale_: Attempting to unscale FP16 gradients. Parameter ", i,
                 p.name().empty() ? "" : " '" + p.name() + "'", " (", p.describe(), ") of ", opt.name(),
                 " has a Float16 .grad", master ? " (its grad_dtype was set to Float16, or it was set directly)"
                                                : " but no FP32 master",
                 "; unscaling in place would round the true gradient into FP16, where it underflows. ", remedy);
      }
      bucket(g.device()).unscale.push_back(g);
    }
  }
  st.found_inf_per_device.clear();
  for (Bucket& b : buckets) {
    Tensor found_inf = zeros({}, TensorOptions(DType::Float32).with_device(b.device));
    std::vector<Tensor> grads = b.unscale;
    const size_t unscale_count = grads.size();
    grads.insert(grads.end(), b.check_only.begin(), b.check_only.end());
    if (!grads.empty()) non_finite_check_and_unscale_(grads, found_inf, to_device(inv, b.device), unscale_count);
    st.found_inf_per_device.push_back(found_inf);
  }
  // What step() still has to apply to the gradients left scaled: the check-only ones. The same
  // float as `inv`, from the host copy of S (docs/AMP.md#the-inverse-scale).
  st.inv_scale = explicit_unscale ? 1.0f : static_cast<float>(1.0 / static_cast<double>(scale_host_));
  st.explicit_unscale = explicit_unscale;
  // sync_free: the host copy of S is not current; the device's inverse is the same float.
  st.inv_scale_device = explicit_unscale ? Tensor() : inv;
  // The gradients are unscaled in place now: from here on nothing may unscale them again, even
  // if the reduction below (a collective that can time out) throws.
  st.stage = OptState::UNSCALED;
  st.reduction_pending = static_cast<bool>(found_inf_reducer_);
  found_inf_ = Tensor();  // not a verdict until the reduction (if any) has run
  reduce_found_inf(st);
  if (!st.reduction_pending) settle_found_inf(st);
}

// found_inf(): one flag on the scale's device. One device's flag is the tensor itself (no launch);
// several are summed in device order, as step() and update() combine them.
void GradScaler::settle_found_inf(const PerOptimizer& st) {
  const std::vector<Tensor>& flags = st.found_inf_per_device;
  if (flags.empty()) {
    found_inf_ = Tensor();
    return;
  }
  if (flags.size() == 1 && flags.front().device() == scale_.device()) {
    found_inf_ = flags.front();
    return;
  }
  autograd::NoGradGuard no_grad;
  Tensor total = zeros({}, TensorOptions(DType::Float32).with_device(scale_.device()));
  for (const Tensor& f : flags) total.add_(to_device(f, scale_.device()));
  found_inf_ = total;
}

// Replaces this process's flags by the reducer's verdict. The flag handed to the reducer is built
// afresh from the local flags on every try, so a retry after a failed call (which may have left
// anything in it) reduces this process's own verdict again; the flags stay local until it succeeds.
// A reducer removed (set_found_inf_reducer({})) while its reduction was pending leaves the local
// flags as the verdict: that is what a scaler without a reducer decides.
void GradScaler::reduce_found_inf(PerOptimizer& st) {
  if (!st.reduction_pending) return;
  if (!found_inf_reducer_) {
    st.reduction_pending = false;
    settle_found_inf(st);
    return;
  }
  // One flag for all devices, combined across processes: every process then decides alike.
  autograd::NoGradGuard no_grad;
  Tensor combined = zeros({}, TensorOptions(DType::Float32).with_device(scale_.device()));
  for (const Tensor& f : st.found_inf_per_device) combined.add_(to_device(f, scale_.device()));
  found_inf_reducer_(combined);
  st.found_inf_per_device = {combined};
  st.reduction_pending = false;
  settle_found_inf(st);
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!enabled_) return;
  check_scale_initialized("unscale_");
  PerOptimizer& st = state_of(optimizer);
  if (st.stage == OptState::UNSCALED && st.reduction_pending) {
    // A retry after the reducer failed: the gradients are already unscaled. Not after a failed
    // step(), which left 16-bit gradients scaled for the optimizer to unscale as it widens them.
    MT_CHECK(st.explicit_unscale, "GradScaler.unscale_(", optimizer.name(), "): the found_inf reducer failed "
             "during step(), which had already unscaled the gradients; retry step() (it re-runs only the reduction)");
    reduce_found_inf(st);
    return;
  }
  MT_CHECK(st.stage != OptState::UNSCALED, "GradScaler.unscale_(", optimizer.name(), "): unscale_() has already been "
           "called on this optimizer since the last update(). Call it once per iteration, after the last backward "
           "and before step() (with gradient accumulation: only on the micro-batch that steps).");
  MT_CHECK(st.stage != OptState::STEPPED, "GradScaler.unscale_(", optimizer.name(), "): unscale_() is being called "
           "after step(). Unscale before step(), and call update() to end the iteration.");
  unscale_grads(optimizer, st, /*explicit_unscale=*/true);
}

// ---- step ----

bool GradScaler::step(optim::Optimizer& optimizer) {
  if (!enabled_) {
    optimizer.step();
    return true;
  }
  check_scale_initialized("step");
  PerOptimizer& st = state_of(optimizer);
  MT_CHECK(st.stage != OptState::STEPPED, "GradScaler.step(", optimizer.name(), "): step() has already been called "
           "since the last update(). Call update() once at the end of every iteration.");
  MT_CHECK(!sync_free_ || optimizer.capturable(), "GradScaler.step(", optimizer.name(), "): a sync_free scaler needs a "
           "capturable optimizer, whose kernels skip on the device (call optimizer.set_capturable(true))");
  // unscale_grads marks the stage UNSCALED as soon as its unscale kernels have run, before what
  // may throw after them (the reducer, the host read below: a deferred device check), so a step()
  // retried after those never unscales twice; it re-runs a reduction that failed, and only that.
  if (st.stage == OptState::READY) {
    unscale_grads(optimizer, st, /*explicit_unscale=*/false);
  } else {
    reduce_found_inf(st);
    settle_found_inf(st);  // this optimizer's verdict, though another's unscale_() came after its own
  }
  MT_CHECK(!st.found_inf_per_device.empty(), "GradScaler.step(", optimizer.name(), "): No inf checks were recorded "
           "for this optimizer. (None of its parameters has a gradient: did backward() reach them?)");
  if (sync_free_) {
    // The optimizer's kernels read the flag and the inverse scale on the device and skip there.
    optimizer.set_device_skip_for_next_step(found_inf_, st.inv_scale_device);
    optimizer.step();
    st.stage = OptState::STEPPED;
    return true;
  }
  float found = 0.0f;
  for (const Tensor& f : st.found_inf_per_device) found += host_float(f);  // the one host sync
  st.found_on_host = found;
  const bool stepped = found == 0.0f;
  if (stepped) {
    // 16-bit grads left scaled (check-only) are multiplied by inv at the copy into FP32.
    optimizer.set_inv_scale_for_next_step(st.inv_scale);
    optimizer.step();
  }
  st.stage = OptState::STEPPED;
  if (trace_enabled(TraceKind::Amp)) {
    std::ostringstream os;
    os << "[amp] GradScaler.step(" << optimizer.name() << "): scale " << get_scale()
       << (stepped ? ", all gradients finite -> step" : ", inf/NaN in the gradients -> step skipped");
    trace_line(TraceKind::Amp, os.str());
  }
  return stepped;
}

// ---- update ----

std::string GradScaler::skipped_steps_diagnosis() const {
  std::ostringstream os;
  os << consecutive_skips_ << " consecutive skipped steps (inf/NaN gradients each time), loss scale now "
     << describe_scale(get_scale()) << ". When backing off the scale after each one does not help, the inf/NaN "
     "gradients do not come from overflow of scaled gradients: they come from the forward pass or the loss itself "
     "(an inf/NaN in the data, an activation or loss beyond FP16's 65504, log(0), 0/0), and lowering the scale "
     "further cannot fix that (NVIDIA/apex#715). Check the loss and activations for non-finite values before "
     "backward(); keep overflow-prone ops in FP32.";
  return os.str();
}

void GradScaler::finish_update(float scale_before, bool skipped, bool hit_floor) {
  numerics::set_scaled_loss_in_flight(false);
  per_optimizer_.clear();
  history_.push_back(ScaleRecord{static_cast<int64_t>(history_.size()), static_cast<double>(scale_before), skipped});
  if (skipped) {
    ++skipped_steps_;
    ++consecutive_skips_;
  } else {
    consecutive_skips_ = 0;
  }
  const double now = get_scale();
  if (trace_enabled(TraceKind::Amp)) {
    std::ostringstream os;
    os << "[amp] GradScaler.update: scale " << scale_before << " -> " << now << " (growth tracker "
       << get_growth_tracker() << "/" << growth_interval_ << (skipped ? ", iteration skipped)" : ")");
    trace_line(TraceKind::Amp, os.str());
  }
  if (skipped && min_scale_ && now < *min_scale_)
    MT_ERROR("GradScaler.update: the loss scale fell below min_scale ", describe_scale(*min_scale_), " after ",
             skipped_steps_diagnosis());
  // Without min_scale the floor is the collapse: PyTorch's scale would go on through the
  // subnormals to 0, skipping every step in silence.
  if (hit_floor)
    MT_ERROR("GradScaler.update: the loss scale collapsed: a backoff reached the floor 2^-126 (the smallest normal "
             "float; a scale never goes below it) after ", skipped_steps_diagnosis());
}

void GradScaler::update() {
  if (!enabled_) return;
  check_scale_initialized("update");
  for (PerOptimizer& st : per_optimizer_) reduce_found_inf(st);  // every process backs off alike
  std::vector<Tensor> found;
  for (const PerOptimizer& st : per_optimizer_)
    for (const Tensor& f : st.found_inf_per_device) found.push_back(f);
  MT_CHECK(!found.empty(), "GradScaler.update: No inf checks were recorded prior to update. (Call step(optimizer) "
           "for each optimizer of the iteration before update().)");
  autograd::NoGradGuard no_grad;
  Tensor combined = zeros({}, TensorOptions(DType::Float32).with_device(scale_.device()));
  for (const Tensor& f : found) combined.add_(to_device(f, scale_.device()));
  if (sync_free_) {
    update_scale_(scale_, growth_tracker_, combined, growth_factor_, backoff_factor_, growth_interval_);
    count_on_device(combined);
    per_optimizer_.clear();
    return;
  }
  // The combined flag on the host: from what step() read, else (unscale_ without step) read now.
  float combined_host = 0.0f;
  bool known = true;
  for (const PerOptimizer& st : per_optimizer_) {
    if (!st.found_on_host) known = false;
    combined_host += st.found_on_host.value_or(0.0f);
  }
  if (!known) combined_host = host_float(combined);
  const float before = scale_host_;
  update_scale_(scale_, growth_tracker_, combined, growth_factor_, backoff_factor_, growth_interval_);
  fn::update_scale(scale_host_, growth_tracker_host_, combined_host, growth_factor_, backoff_factor_,
                   static_cast<int32_t>(growth_interval_));
  const bool skipped = combined_host != 0.0f;
  // The backoff the kernel clamped to the floor (fn::update_scale's product, before the clamp).
  const bool hit_floor = skipped && !(static_cast<float>(static_cast<double>(before) * backoff_factor_) >= fn::kMinScale);
  finish_update(before, skipped, hit_floor);
}

void GradScaler::update(double new_scale) {
  if (!enabled_) return;
  check_scale_initialized("update");
  check_scale(new_scale, "GradScaler.update", "new_scale");
  const float s = static_cast<float>(new_scale);
  MT_CHECK(!min_scale_ || s >= *min_scale_, "GradScaler.update: new_scale ", new_scale, " is below min_scale ",
           *min_scale_);
  for (PerOptimizer& st : per_optimizer_) reduce_found_inf(st);  // the recorded skip is every process's
  if (sync_free_) {
    autograd::NoGradGuard no_grad;
    Tensor combined = zeros({}, TensorOptions(DType::Float32).with_device(scale_.device()));
    for (const PerOptimizer& st : per_optimizer_)
      for (const Tensor& f : st.found_inf_per_device) combined.add_(to_device(f, scale_.device()));
    scale_.fill_(static_cast<double>(s));
    count_on_device(combined);
    per_optimizer_.clear();
    return;
  }
  bool skipped = false;
  for (const PerOptimizer& st : per_optimizer_) {
    if (st.found_on_host) {  // step() has read it
      skipped = skipped || *st.found_on_host != 0.0f;
      continue;
    }
    for (const Tensor& f : st.found_inf_per_device) skipped = skipped || host_float(f) != 0.0f;
  }
  const float before = scale_host_;
  autograd::NoGradGuard no_grad;
  scale_.fill_(static_cast<double>(s));
  scale_host_ = s;
  finish_update(before, skipped, /*hit_floor=*/false);
}

void GradScaler::update(const Tensor& new_scale) {
  if (!enabled_) return;
  MT_CHECK(new_scale.defined() && new_scale.dtype() == DType::Float32 && new_scale.numel() == 1 &&
               !new_scale.requires_grad(),
           "GradScaler.update: new_scale should be a float or a 1-element Float32 tensor with requires_grad=false, "
           "got ", new_scale.defined() ? new_scale.describe() : "an undefined tensor",
           new_scale.defined() && new_scale.requires_grad() ? " requiring grad" : "");
  update(static_cast<double>(host_float(new_scale)));  // copied: later changes to new_scale do not matter
}

// ---- sync_free: counts on the device, read by poll() ----

// skipped += [found != 0]; consecutive = [found != 0] * (consecutive + 1): launches, no host read.
void GradScaler::count_on_device(const Tensor& found) {
  const Tensor zero = zeros({}, TensorOptions(DType::Float32).with_device(found.device()));
  const Tensor skipped = rsub(to_dtype(eq(found, zero), DType::Int64), 1);  // NaN != 0: skipped
  skipped_t_.add_(skipped);
  Tensor next = mul(add(consecutive_t_, 1), skipped);
  copy_(consecutive_t_, next);
  ++updates_;
}

ScalerPoll GradScaler::poll() {
  MT_CHECK(sync_free_, "GradScaler.poll: only a sync_free scaler defers what it knows to poll(); this one knows it "
           "after every update() (get_scale(), skipped_steps())");
  if (enabled_ && scale_.defined()) {
    autograd::NoGradGuard no_grad;
    // One copy to the host for all four (f64 holds each exactly).
    const Tensor all = to_device(stack({to_dtype(scale_, DType::Float64), to_dtype(growth_tracker_, DType::Float64),
                                        to_dtype(skipped_t_, DType::Float64), to_dtype(consecutive_t_, DType::Float64)}),
                                 Device::CPU());
    const double* v = all.data_ptr<double>();
    scale_host_ = static_cast<float>(v[0]);
    growth_tracker_host_ = static_cast<int32_t>(v[1]);
    skipped_steps_ = static_cast<int64_t>(v[2]);
    consecutive_skips_ = static_cast<int64_t>(v[3]);
  }
  const ScalerPoll r{updates_, get_scale(), get_growth_tracker(), skipped_steps_, consecutive_skips_};
  if (consecutive_skips_ > 0 && min_scale_ && get_scale() < *min_scale_)
    MT_ERROR("GradScaler.poll: the loss scale fell below min_scale ", describe_scale(*min_scale_), " after ",
             skipped_steps_diagnosis());
  // The floor reached by a backoff (the device clamps there): the default mode's collapse.
  if (consecutive_skips_ > 0 && scale_host_ <= fn::kMinScale)
    MT_ERROR("GradScaler.poll: the loss scale collapsed: a backoff reached the floor 2^-126 (the smallest normal "
             "float; a scale never goes below it) after ", skipped_steps_diagnosis());
  return r;
}

// ---- state_dict ----

StateDict GradScaler::state_dict() const {
  if (!enabled_) return {};
  StateDict sd;
  if (sync_free_ && scale_.defined()) {  // the device holds the current values (a host read, as any save)
    sd["scale"] = clone(to_device(scale_, Device::CPU()));
    sd["growth_factor"] = full({}, growth_factor_, TensorOptions(DType::Float64));
    sd["backoff_factor"] = full({}, backoff_factor_, TensorOptions(DType::Float64));
    sd["growth_interval"] = full({}, growth_interval_, TensorOptions(DType::Int64));
    sd["_growth_tracker"] = clone(to_device(growth_tracker_, Device::CPU()));
    return sd;
  }
  sd["scale"] = full({}, get_scale(), TensorOptions(DType::Float32));
  sd["growth_factor"] = full({}, growth_factor_, TensorOptions(DType::Float64));
  sd["backoff_factor"] = full({}, backoff_factor_, TensorOptions(DType::Float64));
  sd["growth_interval"] = full({}, growth_interval_, TensorOptions(DType::Int64));
  sd["_growth_tracker"] = full({}, get_growth_tracker(), TensorOptions(DType::Int32));
  return sd;
}

void GradScaler::load_state_dict(const StateDict& sd) {
  if (!enabled_) return;
  const char* who = "GradScaler.load_state_dict";
  MT_CHECK(!sd.empty(), who, ": The source state dict is empty, possibly because it was saved from a disabled "
           "instance of GradScaler.");
  auto get = [&](const char* key, DType dtype) -> Tensor {
    auto it = sd.find(key);
    MT_CHECK(it != sd.end(), who, ": missing key '", key, "' (a GradScaler state dict has scale, growth_factor, "
             "backoff_factor, growth_interval, _growth_tracker)");
    const Tensor& t = it->second;
    MT_CHECK(t.defined(), who, ": key '", key, "' holds an undefined tensor");
    MT_CHECK(t.dtype() == dtype && t.numel() == 1, who, ": key '", key, "' must be a 1-element ", dtype_name(dtype),
             " tensor, got ", t.describe());
    return to_device(t, Device::CPU());
  };
  for (auto& [k, t] : sd)
    MT_CHECK(k == "scale" || k == "growth_factor" || k == "backoff_factor" || k == "growth_interval" ||
                 k == "_growth_tracker",
             who, ": unexpected key '", k, "' (a GradScaler state dict has scale, growth_factor, backoff_factor, "
             "growth_interval, _growth_tracker)");
  // Validate everything first: nothing changes on error.
  const float scale = get("scale", DType::Float32).item<float>();
  const double growth = get("growth_factor", DType::Float64).item<double>();
  const double backoff = get("backoff_factor", DType::Float64).item<double>();
  const int64_t interval = get("growth_interval", DType::Int64).item<int64_t>();
  const int32_t tracker = get("_growth_tracker", DType::Int32).item<int32_t>();
  check_scale(scale, who, "key 'scale'");
  try {
    check_growth_factor(growth, "key 'growth_factor'");
    check_backoff_factor(backoff, "key 'backoff_factor'");
    check_growth_interval(interval, "key 'growth_interval'");
  } catch (const Error& e) {
    MT_ERROR(who, ": ", e.what());
  }
  // Not bounded by growth_interval: set_growth_interval may lower the interval below a running
  // tracker, and such a scaler's own state_dict must load (it grows on the next clean step).
  MT_CHECK(tracker >= 0, who, ": key '_growth_tracker' must be >= 0, got ", tracker);

  autograd::NoGradGuard no_grad;
  init_scale_ = scale;
  growth_factor_ = growth;
  backoff_factor_ = backoff;
  growth_interval_ = interval;
  init_growth_tracker_ = tracker;
  if (scale_.defined()) scale_.fill_(static_cast<double>(scale));
  if (growth_tracker_.defined()) growth_tracker_.fill_(static_cast<int64_t>(tracker));
  scale_host_ = scale;
  growth_tracker_host_ = tracker;
}

}  // namespace mixtape::amp
