// amp/weight_cast_cache.cpp — see amp/weight_cast_cache.h.
#include "amp/weight_cast_cache.h"

namespace mixtape::amp {

const char* why_not_cacheable(const Tensor& src, DType target, const AutocastDeviceState& st) {
  if (!st.cache_enabled) return "cache disabled";
  if (target != st.dtype) return "not a lower-precision cast";
  if (src.dtype() != DType::Float32) return "source not f32";
  if (!src.requires_grad()) return "requires_grad=false";
  if (!src.is_leaf()) return "non-leaf";
  if (src.is_view()) return "view";
  return nullptr;
}

Tensor WeightCastCache::find(const Tensor& src, DType dtype) {
  auto it = entries_.find({src.impl(), dtype});
  if (it == entries_.end()) return {};
  if (it->second.source.lock() != src.impl_ptr()) {  // the original died; the address was reused
    entries_.erase(it);
    return {};
  }
  return it->second.cast;
}

void WeightCastCache::insert(const Tensor& src, DType dtype, Tensor cast) {
  entries_[{src.impl(), dtype}] = Entry{src.impl_ptr(), std::move(cast)};
}

WeightCastCache& thread_weight_cast_cache() {
  thread_local WeightCastCache cache;
  return cache;
}

}  // namespace mixtape::amp
