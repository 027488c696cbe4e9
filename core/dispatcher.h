// core/dispatcher.h — the op registry and the three layers every op call passes through.
//
//   dispatch(op, inputs, attrs)
//     [Autocast]  amp/ casts inputs per op.amp_policy, then calls dispatch again with itself excluded
//     [Autograd]  autograd/ runs the op with itself excluded, then records a node on the tape
//     [Backend]   the kernel registered for the inputs' device type
//
// core/ defines the order and the slots; amp/ and autograd/ install their layer functions, so
// each can be read on its own. A layer is skipped when its handler is missing, when it is
// excluded on this thread (ExcludeLayerGuard), or, for Autocast, when no AutocastGuard enabled
// it for the inputs' device type. MIXTAPE_TRACE=dispatch prints one line per layer per call.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/attrs.h"
#include "core/autocast_state.h"
#include "core/device.h"
#include "core/op_sample.h"
#include "core/tensor.h"

namespace mixtape {

// How autocast treats an op (PyTorch's CastPolicy; docs/AMP.md, "The policies"). Each op's policy, the
// PyTorch list it comes from and mixtape's deliberate differences: docs/autocast-policy.md (a test
// keeps that table equal to the registry).
enum class AmpPolicy : uint8_t {
  None,             // run in the inputs' own dtypes (elementwise ops, views, pooling, batch norm, cat)
  LowerPrecision,   // cast floating inputs to the autocast dtype (matmul, conv, linear)
  FP32,             // cast 16-bit inputs up to f32 (exp, log, losses)
  FP32UnlessDtype,  // like FP32 unless the caller passed attr "dtype" (softmax, sum)
  Promote,          // PyTorch's prioritize: from the region's dtype, f32 wins (addcmul, scatter_add)
};
const char* amp_policy_name(AmpPolicy p);

enum class DispatchLayer : uint8_t { Autocast = 0, Autograd = 1, Backend = 2 };
const char* layer_name(DispatchLayer l);

struct OpSchema;
// Tells dispatch() to check the registry again (kernel_registry_problems) before its next call.
void mark_registry_changed();
struct OpCall {
  TensorList inputs;  // undefined entries are absent optional inputs (e.g. no bias)
  Attrs attrs;
  const OpSchema* op = nullptr;  // set by dispatch; kernels name it in errors
  const char* name() const;
};

struct BackwardContext;  // defined in autograd/
using KernelFn = TensorList (*)(const OpCall& call);
using BackwardFn = TensorList (*)(BackwardContext& ctx);
using LayerFn = TensorList (*)(const OpSchema& op, OpCall& call);

struct OpSchema {
  std::string name;
  AmpPolicy amp_policy = AmpPolicy::None;
  std::string cuda_autocast_ban;  // non-empty: refused under CUDA autocast, with this explanation
  bool differentiable = true;     // false: outputs never require grad (argmax, comparisons)
  bool inplace = false;           // writes into input 0: not autocast, refused where autograd needs it
  bool mixed_devices = false;     // inputs may live on different devices (copies between devices)
  bool backward_keeps_autocast = false;  // backward runs under the autocast settings of the forward call
  uint64_t saved_inputs = ~0ull;  // bit i set: input i is saved for backward
  uint64_t saved_outputs = 0;     // bit i set: output i is saved for backward
  uint64_t unread_output_grads = 0;  // bit i set: backward never reads output i's gradient
  BackwardFn backward = nullptr;
  KernelFn composite = nullptr;   // a body made of other ops; runs above autograd, needs no backward
  KernelFn kernels[kNumDeviceTypes] = {};
  KernelFn any_device = nullptr;  // device-independent kernel (views: metadata only)
  std::vector<std::string> arg_names;  // optional names of the inputs, for traces and errors
  std::string cpu_only_reason;         // non-empty: has no CUDA kernel, on purpose (why)
  bool pointwise = false;              // defined from a functor (ops/pointwise_op.h)
  std::vector<OpSample> samples;       // the calls its derived tests run (core/op_sample.h)

  // Builder-style setters used by op definitions.
  OpSchema& policy(AmpPolicy p) { amp_policy = p; return *this; }
  OpSchema& ban_under_cuda_autocast(std::string why) { cuda_autocast_ban = std::move(why); return *this; }
  OpSchema& not_differentiable() { differentiable = false; return *this; }
  OpSchema& in_place() { inplace = true; differentiable = false; return *this; }
  OpSchema& allow_mixed_devices() { mixed_devices = true; return *this; }
  // torch.amp.custom_bwd for ops you add: backward normally runs with autocast off (in the dtypes
  // forward chose); with this, it runs under the autocast settings this op's forward ran with.
  // As in PyTorch, those depend on the policy: an op with a casting policy (custom_fwd with
  // cast_inputs) ran with autocast off for its device type, so its backward does too (keeping the
  // region's dtype); an op with policy None (custom_fwd without cast_inputs) ran under the region's
  // settings, and so does its backward.
  OpSchema& backward_under_forward_autocast() { backward_keeps_autocast = true; return *this; }
  OpSchema& save(std::initializer_list<int> inputs, std::initializer_list<int> outputs = {});
  OpSchema& grad(BackwardFn fn) { backward = fn; return *this; }
  // Outputs whose gradient the backward never reads (batch norm's statistics): autograd passes an
  // undefined tensor for them where no gradient arrived, instead of materialising zeros (a fill
  // kernel per output and call on a GPU).
  OpSchema& backward_ignores_output_grads(std::initializer_list<int> outputs);
  OpSchema& composite_of_ops(KernelFn fn) { composite = fn; return *this; }
  OpSchema& kernel(DeviceType d, KernelFn fn) { kernels[static_cast<int>(d)] = fn; mark_registry_changed(); return *this; }
  OpSchema& kernel_any_device(KernelFn fn) { any_device = fn; return *this; }
  OpSchema& args(std::initializer_list<const char*> names) { arg_names.assign(names.begin(), names.end()); return *this; }
  // An op with a CPU kernel and no CUDA kernel must say so, with the reason: in a CUDA build an
  // op that does not is a start-up error (kernel_registry_problems below).
  OpSchema& cpu_only(std::string why) { cpu_only_reason = std::move(why); mark_registry_changed(); return *this; }
  // A sample call for the derived tests: `args` made by the test, then dispatch(this op, args,
  // attrs), or `fn(args)` when given (to go through the public function, or to test a pattern).
  OpSchema& sample(const std::string& case_name, std::vector<SampleArg> args, Attrs attrs = {},
                   SampleChecks checks = {}) {
    samples.push_back({name + "/" + case_name, std::move(args), std::move(attrs), nullptr, checks});
    return *this;
  }
  OpSchema& sample(const std::string& case_name, std::vector<SampleArg> args, SampleFn fn, SampleChecks checks = {}) {
    samples.push_back({name + "/" + case_name, std::move(args), {}, std::move(fn), checks});
    return *this;
  }

  // "weight" when named by args(), else "input 1".
  std::string arg_name(size_t i) const {
    return i < arg_names.size() ? arg_names[i] : "input " + std::to_string(i);
  }

  bool has_kernel(DeviceType d) const { return composite || any_device || kernels[static_cast<int>(d)]; }
};
inline const char* OpCall::name() const { return op ? op->name.c_str() : "op"; }

// Returns the registry entry for `name`, creating it on first use (op files and kernel files
// may initialise in any order). Entries live for the whole program.
OpSchema& define_op(const char* name);
const OpSchema* find_op(const std::string& name);
std::vector<const OpSchema*> all_ops();  // sorted by name
// One-line kernel registration from a backend's file (e.g. ops/cuda/*.cu).
bool register_kernel(const char* op, DeviceType device, KernelFn fn);

// What is wrong with the registry for the devices mixtape was built for, one line per op: in a
// CUDA build, an op with a CPU kernel but no CUDA kernel that is not declared cpu_only(), a
// CUDA kernel under a name no CPU kernel has (a typo in register_kernel), a cpu_only() op with a
// CUDA kernel. Empty in a CPU-only build. dispatch() checks it before the first call after the
// registry changed, and refuses every call while it is not empty: forgetting a CUDA kernel fails
// at start-up, on every machine, not on a GPU later.
std::vector<std::string> kernel_registry_problems();

TensorList dispatch(const OpSchema& op, TensorList inputs, Attrs attrs = {});
Tensor dispatch1(const OpSchema& op, TensorList inputs, Attrs attrs = {});
// Runs the kernel for the call's device type (the Backend layer; the layers above have run).
TensorList run_kernel(const OpSchema& op, OpCall& call);
// The Backend layer for a call the Autograd layer has taken (Autocast and composites come
// before it, so nothing else is left): the trace line and the kernel, without passing the
// inputs through dispatch() again — a copy of the call is most of a tiny op's cost.
TensorList dispatch_backend(const OpSchema& op, OpCall& call);

// ---- layer plumbing (used by amp/ and autograd/) ----
void set_layer_handler(DispatchLayer layer, LayerFn fn);

// Called with each op and device type whose kernel run_kernel runs (null: none, the default).
// For tests that derive coverage from what ran (tests/cuda_ops/test_sample_parity.cpp); process-wide.
using KernelObserver = void (*)(const OpSchema& op, DeviceType device);
void set_kernel_observer(KernelObserver fn);

// RAII: skip `layer` on this thread until the guard ends.
class ExcludeLayerGuard {
 public:
  explicit ExcludeLayerGuard(DispatchLayer layer);
  ~ExcludeLayerGuard();
  ExcludeLayerGuard(const ExcludeLayerGuard&) = delete;
  ExcludeLayerGuard& operator=(const ExcludeLayerGuard&) = delete;

 private:
  uint32_t prev_;
};
bool layer_excluded(DispatchLayer layer);

// Whether the Autocast layer is switched on for a device type on this thread: shorthand for
// autocast_state()[type].enabled (amp's AutocastGuard sets it; the dispatcher only reads it).
bool autocast_included(DeviceType type);
void set_autocast_included(DeviceType type, bool on);

// The device type a call runs on: that of its first defined, non-wrapped-number input.
DeviceType device_type_of(const TensorList& inputs);
inline DeviceType call_device_type(const OpCall& call) { return device_type_of(call.inputs); }

}  // namespace mixtape
