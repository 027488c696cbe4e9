// ops/cpu/loops.cpp — broadcasting strides for the elementwise loops.
#include "ops/cpu/loops.h"

namespace mixtape::cpu {

IntList broadcast_byte_strides(const Tensor& t, const IntList& shape) {
  IntList out(shape.size(), 0);
  size_t off = shape.size() - static_cast<size_t>(t.dim());
  int64_t es = static_cast<int64_t>(t.element_size());
  for (size_t d = 0; d < static_cast<size_t>(t.dim()); ++d)
    out[off + d] = t.sizes()[d] == 1 && shape[off + d] != 1 ? 0 : t.strides()[d] * es;
  return out;
}

}  // namespace mixtape::cpu
