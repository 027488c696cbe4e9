// amp/checkpoint_region.cpp — the autocast region autograd::checkpoint recomputes a segment in.
// autograd/ sits below amp/ and cannot open an AutocastGuard itself, so this file installs the
// region (autograd::set_recompute_region) when the amp library loads.
//
// The region is a real one, as torch.utils.checkpoint re-enters torch.autocast with the
// forward's settings: one AutocastGuard per device type with the forward's enabled, dtype and
// cache_enabled, so the weight-cast cache is on and a weight used twice in the segment is cast
// once, as in the plain graph's forward. The forward's Fp8Autocast region (or none) is replayed
// too, as Transformer Engine's checkpoint re-enters fp8_autocast in its recompute phase: the
// casts use the scales the forward used and record no amax, and no history rolls
// (amp/fp8_autocast.h, Fp8RecomputeRegion). Invariant: the recompute has a cache of its own. The
// thread's cache (not empty when backward() runs inside an open region) is set aside for the
// recompute and put back unchanged afterwards; the recompute's own casts are dropped when it
// ends, since the graph that uses them is backpropagated right away.
#include <functional>

#include "amp/autocast.h"
#include "amp/fp8_autocast.h"
#include "amp/weight_cast_cache.h"
#include "autograd/checkpoint.h"

namespace mixtape::amp {
namespace {

// Moves this thread's weight-cast cache aside for the object's lifetime (also on exceptions).
class CacheSetAside {
 public:
  CacheSetAside() : outer_(std::move(thread_weight_cast_cache())) { thread_weight_cast_cache().clear(); }
  ~CacheSetAside() { thread_weight_cast_cache() = std::move(outer_); }
  CacheSetAside(const CacheSetAside&) = delete;
  CacheSetAside& operator=(const CacheSetAside&) = delete;

 private:
  WeightCastCache outer_;
};

AutocastGuard guard_as_in(const AutocastState& forward, DeviceType t) {
  const AutocastDeviceState& d = forward[t];
  return AutocastGuard(t, d.dtype, d.enabled, d.cache_enabled);
}

autograd::RegionCapture capture() { return detail::capture_fp8_region(); }

void recompute_in_region(const AutocastState& forward, const autograd::RegionCapture& captured,
                         const std::function<void()>& body) {
  static_assert(kNumDeviceTypes == 2, "one guard per device type");
  CacheSetAside aside;  // destroyed last: the guards below close (and clear the cache) first
  AutocastGuard cpu = guard_as_in(forward, DeviceType::CPU);
  AutocastGuard cuda = guard_as_in(forward, DeviceType::CUDA);
  detail::Fp8RecomputeRegion fp8(std::static_pointer_cast<const detail::Fp8RegionSettings>(captured));
  body();
}

const autograd::RecomputeRegion kRegion{&capture, &recompute_in_region};
[[maybe_unused]] const bool installed = (autograd::set_recompute_region(&kRegion), true);

}  // namespace
}  // namespace mixtape::amp
