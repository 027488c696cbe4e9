// amp/autocast.h — autocasting: inside an AutocastGuard, ops run in the dtype their AMP policy
// asks for, with no change to the model code (torch.amp.autocast; docs/AMP.md, "Autocast").
//
//   {
//     amp::AutocastGuard autocast(DeviceType::CPU, DType::Float16);
//     Tensor logits = model.forward(x);          // conv/linear/matmul run in f16
//     Tensor loss = cross_entropy(logits, y);    // losses, softmax, sums run in f32
//   }                                            // weight casts cached in the region are dropped
//   loss.backward();                             // outside: backward ops use forward's dtypes
//
// How it works (amp/autocast_layer.cpp): every op call passes the dispatcher's Autocast layer
// first (core/dispatcher.h). When this thread enabled autocast for the call's device type, the
// layer looks up the op's policy (declared in its definition: define_op(..).policy(..)), casts
// the eligible inputs with the ordinary, differentiable to_dtype op — so autograd records the
// casts and the lower-precision op saves its 16-bit inputs for backward — and calls the op again
// with the Autocast layer excluded and, as PyTorch's policy wrappers do, autocast off for that
// device type (is_autocast_enabled reads false inside the op). Nothing inside it is autocast twice.
//
//   policy            what happens to each eligible input
//   lower_precision   cast to the region's dtype (f16 / bf16)            matmul, linear, conv2d
//   fp32              cast to f32                                        exp, log, pow, losses, layer_norm
//   fp32_unless_dtype like fp32, unless the caller passed a dtype        softmax, log_softmax, sum
//   promote           PyTorch's prioritize (below)                       addcmul, scatter_add
//   none              nothing (runs in the inputs' own dtypes)           relu, add, cat, pooling, batch_norm
// docs/autocast-policy.md lists every op with its policy, the PyTorch list it comes from and
// mixtape's deliberate differences (one list for both device types: PyTorch's CUDA one);
// amp::print_policy_table() prints the registry.
//
// Promote starts from the region's dtype and takes the eligible inputs in order: f32 once seen
// wins; the region's dtype stays; the other 16-bit dtype before any f32 (bf16 in an f16 region)
// is an error naming the op, the region and the inputs' dtypes, as PyTorch refuses it.
// A policy-none op that is a composite runs its pieces through autocast one by one (PyTorch's
// fallthrough); a kernel's own op calls are never autocast.
//
// Eligible input: defined, floating, not Float64, on the region's device type, not a wrapped
// number. In-place ops are never autocast. A binary_cross_entropy call under CUDA autocast is
// refused (its backward is not safe in f16); CPU autocast runs it in f32, as PyTorch does.
//
// Ops you add (torch.amp.custom_fwd / custom_bwd): a casting policy is custom_fwd(cast_inputs=..)
// — inputs cast, the op run with autocast off; policy none is custom_fwd without cast_inputs.
// OpSchema::backward_under_forward_autocast() is custom_bwd: the backward runs under the settings
// the forward ran with, so autocast off after a casting policy, the region's after none.
//
// The weight-cast cache: the lower-precision copy of an f32 leaf that requires grad (a model
// parameter) and is not a view is made once per region and reused by every op in it (one cast
// node on the tape; the gradients of all uses meet there and are cast back to f32 once). The
// cache belongs to the thread and is cleared when the thread's outermost AutocastGuard exits —
// once per forward pass, so the next pass casts the updated weights. Cached casts are made with
// grad mode on, so a cast first made under NoGradGuard still carries the graph when a later
// grad-enabled use in the same region hits it (docs/amp-behaviours.md behaviour 11, pytorch#158232).
// Known blind spot, as PyTorch: an in-place change to a weight inside one region is not seen by
// later uses in that region.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>

#include "core/autocast_state.h"
#include "core/device.h"
#include "core/dtype.h"

namespace mixtape {
struct OpSchema;
}

namespace mixtape::amp {

// RAII region (torch.autocast). dtype defaults to the device type's current autocast dtype (CPU:
// BFloat16, CUDA: Float16); only Float16 and BFloat16 are accepted. enabled=false turns autocast
// off inside (e.g. around a numerically sensitive block) and on again when it closes.
// cache_enabled defaults to the current setting (on). Nestable; thread-local (a thread you start
// does not inherit the region: open a guard in it); the previous settings come back on exit,
// also when an exception leaves the region.
class AutocastGuard {
 public:
  explicit AutocastGuard(DeviceType device_type, std::optional<DType> dtype = std::nullopt, bool enabled = true,
                         std::optional<bool> cache_enabled = std::nullopt);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  AutocastState prev_;
};

// torch.autocast spelling: amp::autocast guard(DeviceType::CPU, DType::Float16);
using autocast = AutocastGuard;

bool is_autocast_enabled(DeviceType device_type);
DType get_autocast_dtype(DeviceType device_type);
bool is_autocast_cache_enabled(DeviceType device_type);
// How many AutocastGuards (enabled or not) are open on this thread.
int autocast_nesting();

// ---- the weight-cast cache and instrumentation (tests, teaching) ----
size_t autocast_cache_size();  // entries in this thread's cache
void clear_autocast_cache();   // torch.clear_autocast_cache()
// Casts autocast performed on this thread since the last reset (cache hits do not count).
int64_t autocast_cast_count();
void reset_autocast_cast_count();

// The error an op declared banned under CUDA autocast raises there; no-op for other ops/devices.
// (Exposed so the rule can be tested without a GPU.)
void check_autocast_ban(const OpSchema& op, DeviceType device_type);

// Installs the Autocast layer in the dispatcher (AutocastGuard does this; idempotent).
void install_autocast_layer();

}  // namespace mixtape::amp
