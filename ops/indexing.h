// ops/indexing.h — gathering and scattering along a dim by an Int64 index tensor.
#pragma once
#include "core/tensor.h"

namespace mixtape {

// out[i][j] = x[i][index[i][j]] (dim = 1); index has x's rank, out has index's shape.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// zeros(sizes) with out[i][index[i][j]] += src[i][j] (dim = 1): the adjoint of gather.
Tensor scatter_add_into_zeros(const Tensor& src, int64_t dim, const Tensor& index, const IntList& sizes);

}  // namespace mixtape
