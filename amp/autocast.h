// amp/autocast.h — autocasting (torch.amp.autocast): the AutocastGuard region, the thread's
// autocast queries, and the weight-cast cache's controls. The layer that casts is
// amp/autocast_layer.cpp; the cache is amp/weight_cast_cache.h.
//
//   {
//     amp::AutocastGuard autocast(DeviceType::CPU, DType::Float16);
//     Tensor loss = cross_entropy(model.forward(x), y);  // conv/linear in f16, the loss in f32
//   }                                                    // the region's weight casts are dropped
//   loss.backward();                                     // in the dtypes forward chose
//
// Invariant: inside an enabled region each out-of-place op call passes the Autocast layer once:
// its eligible inputs are cast as its policy says, by the ordinary differentiable to_dtype op, and
// a kernel's own op calls are never autocast (a policy-none composite's pieces are op calls of
// their own, autocast one by one). The rules (policies, eligibility, the cache, custom
// ops): docs/AMP.md, "Autocast"; every op's policy and its PyTorch source:
// docs/autocast-policy.md; the behaviours and their tests: docs/amp-behaviours.md 1-14.
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
