// ops/views.h — ops that return a new view of the same storage (no copy), and reshape, which
// copies only when a view is impossible. Writes through a view are seen by the base tensor.
#pragma once
#include "core/tensor.h"

namespace mixtape {

Tensor view(const Tensor& x, const IntList& sizes);     // one size may be -1; x must be contiguous
Tensor reshape(const Tensor& x, const IntList& sizes);  // view if possible, else a contiguous copy
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor permute(const Tensor& x, const IntList& dims);
Tensor expand(const Tensor& x, const IntList& sizes);   // -1 keeps a size; new dims on the left
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);  // clamps like Python
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);                // no clamping
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
// The gradient of slice: zeros of `sizes` with g written into the sliced region.
Tensor slice_backward(const Tensor& g, const IntList& sizes, int64_t dim, int64_t start, int64_t end, int64_t step);

}  // namespace mixtape
