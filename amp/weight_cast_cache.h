// amp/weight_cast_cache.h — the lower-precision copies of model weights made in the current
// autocast region, one cache per thread. Invariant: an entry is never returned for another tensor
// (a weak reference guards a recycled address). The rules: docs/AMP.md, "The weight-cast cache".
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <utility>

#include "core/autocast_state.h"
#include "core/tensor.h"

namespace mixtape::amp {

// Why `src` may not be cached as a cast to `target` in a region with settings `st` (nullptr:
// it may). Only f32 leaves that require grad and are not views are cached, and only their casts
// to the region's lower-precision dtype: activations change every call, and an f32 up-cast
// would save nothing.
const char* why_not_cacheable(const Tensor& src, DType target, const AutocastDeviceState& st);

class WeightCastCache {
 public:
  // The cast of `src` to `dtype` made earlier in this region, or an undefined tensor.
  Tensor find(const Tensor& src, DType dtype);
  void insert(const Tensor& src, DType dtype, Tensor cast);
  size_t size() const { return entries_.size(); }
  void clear() { entries_.clear(); }

 private:
  struct Entry {
    // Keeps the key's address from being reused by another tensor while the entry lives: a
    // new tensor at a recycled address must never hit a stale cast.
    std::weak_ptr<TensorImpl> source;
    Tensor cast;
  };
  std::map<std::pair<const TensorImpl*, DType>, Entry> entries_;
};

WeightCastCache& thread_weight_cast_cache();

}  // namespace mixtape::amp
