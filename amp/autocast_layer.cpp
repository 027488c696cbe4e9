// amp/autocast_layer.cpp — the Autocast dispatch layer: decides, per op call, which inputs to
// cast to which dtype (the rules: docs/AMP.md, "Autocast"; each op's policy and its PyTorch
// source: docs/autocast-policy.md), casts them, and calls the op again below itself — with autocast
// off for the call's device type when the op has a policy, as PyTorch's policy wrappers run it.
// MIXTAPE_TRACE=amp prints one line per decision, e.g.
//   autocast linear lower_precision(Float16): input f32->f16, weight f32->f16 (cache hit), bias f32->f16 (cached)
#include <mutex>
#include <sstream>

#include "amp/autocast.h"
#include "amp/fp8_autocast.h"
#include "amp/weight_cast_cache.h"
#include "autograd/grad_mode.h"
#include "core/dispatcher.h"
#include "core/error.h"
#include "core/numerics_check.h"
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

// The dtypes of every defined tensor input, for errors: "self Float16, tensor1 BFloat16".
std::string input_dtypes(const OpSchema& op, const OpCall& call) {
  std::ostringstream os;
  bool first = true;
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    if (!call.inputs[i].defined()) continue;
    os << (first ? "" : ", ") << op.arg_name(i) << ' ' << dtype_name(call.inputs[i].dtype());
    first = false;
  }
  return os.str();
}

// Promote, PyTorch's rule (prioritize / promote_type in ATen's autocast_mode.h): start from the
// region's lower-precision dtype and fold in the eligible inputs in argument order. Float64
// inputs are not eligible (they take no part and are not cast). Once a Float32 input has been
// seen the answer is Float32; the region's dtype with the region's dtype stays the region's
// dtype; anything else (the other 16-bit dtype, met before any Float32) has no answer, and
// PyTorch raises "Unexpected floating ScalarType in at::autocast::prioritize".
DType promote_target(const OpSchema& op, const OpCall& call, DeviceType dev, DType region) {
  DType current = region;
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const Tensor& t = call.inputs[i];
    if (!eligible(t, dev)) continue;
    if (current == DType::Float32 || t.dtype() == DType::Float32) {
      current = DType::Float32;
      continue;
    }
    MT_CHECK(t.dtype() == region, op.name, ": autocast's promote policy cannot combine ", op.arg_name(i), " (",
             dtype_name(t.dtype()), ") with the ", dtype_name(region), " region it runs in (inputs: ",
             input_dtypes(op, call), "). Promotion starts from the region's dtype and takes the inputs in order; "
             "before a Float32 input only ", dtype_name(region), " can join it (Float64 inputs are ignored). "
             "PyTorch refuses this too (\"Unexpected floating ScalarType in at::autocast::prioritize\"). Cast ",
             op.arg_name(i), " to ", dtype_name(region), " or Float32 first, or open the region with dtype=",
             dtype_name(t.dtype()));
  }
  return current;
}

// Runs the op below the Autocast layer with autocast off for its device type, as PyTorch's policy
// wrappers do (they exclude the device's autocast key, which is what is_autocast_enabled reads)
// and as custom_fwd(cast_inputs=...) does. Two things follow: the op's kernel sees
// is_autocast_enabled(dev) == false, and the tape node recorded below remembers autocast off, so
// an op declared backward_under_forward_autocast() (custom_bwd) runs its backward with autocast
// off and the region's dtype -- PyTorch's custom_bwd after custom_fwd(cast_inputs=...).
// `target`: the dtype the floating inputs were cast to (null: none), for the NaN locator's report.
TensorList dispatch_with_autocast_off(const OpSchema& op, OpCall& call, DeviceType dev, const DType* target) {
  AutocastState inside = autocast_state();
  const numerics::AutocastScope decided(&op, inside[dev].dtype, target != nullptr, target ? *target : DType::Float32);
  inside[dev].enabled = false;
  AutocastStateGuard off(inside);
  return dispatch(op, std::move(call.inputs), std::move(call.attrs));
}

TensorList autocast_layer(const OpSchema& op, OpCall& call) {
  const DeviceType dev = call_device_type(call);
  check_autocast_ban(op, dev);
  // Inside amp::Fp8Autocast, linear, 2-D matmul and conv2d run as FP8 GEMMs (amp/fp8_ops.cpp).
  if (std::optional<TensorList> fp8 = detail::fp8_dispatch(op, call)) return std::move(*fp8);
  if (op.amp_policy == AmpPolicy::None) {
    // PyTorch's fallthrough: the settings stay as they are. A composite's pieces then pass this
    // layer one by one (as the pieces of a composite ATen op do below a fallthrough, and as the
    // body of custom_fwd without cast_inputs runs under the current autocast state)...
    if (op.composite) return op.composite(call);
    // ...but a kernel's own op calls are never autocast (mixtape's rule: a kernel computes
    // exactly what it was written to, whatever region its caller opened).
    ExcludeLayerGuard no_autocast(DispatchLayer::Autocast);
    return dispatch(op, std::move(call.inputs), std::move(call.attrs));
  }
  // A copy: dispatch_with_autocast_off changes the thread's settings.
  const AutocastDeviceState st = autocast_state()[dev];
  ExcludeLayerGuard no_autocast(DispatchLayer::Autocast);  // casts and the op itself are not autocast again

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
      {
        const DType f32 = DType::Float32;
        return dispatch_with_autocast_off(op, call, dev, call.attrs.get_dtype("dtype") == f32 ? &f32 : nullptr);
      }
    case AmpPolicy::Promote: target = promote_target(op, call, dev, st.dtype); break;
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
  return dispatch_with_autocast_off(op, call, dev, any ? &*target : nullptr);
}

}  // namespace

void install_autocast_layer() {
  static std::once_flag once;
  std::call_once(once, [] { set_layer_handler(DispatchLayer::Autocast, autocast_layer); });
}

}  // namespace mixtape::amp
