// ops/shape_ops.h — joining tensors (cat, stack), selecting along a dim (index_select) and the
// index of the largest value (argmax).
#pragma once
#include <optional>

#include "core/tensor.h"

namespace mixtape {

// Concatenates along dim; every tensor has the same number of dims and the same sizes except
// along dim (a 1-D empty tensor, shape [0], is skipped, as in PyTorch). The result has the
// promoted dtype of all inputs (PyTorch's rules); under autocast: promote. Empty list: error.
Tensor cat(const TensorList& tensors, int64_t dim = 0);
// Joins equal-shaped tensors along a new dim (dim in [-(d+1), d]): unsqueeze(dim) + cat.
Tensor stack(const TensorList& tensors, int64_t dim = 0);

// Int64 index of the (first) largest value along dim; over all elements (flattened) when dim is
// absent. NaN counts as the largest (its first occurrence wins), as in PyTorch. keepdim keeps the
// reduced dim(s) as size 1. Not differentiable.
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);

// x: (..., n, ...) with n at dim; index: 1-D (k) Int64 (a 0-d index counts as (1)), every value
// in [0, n). Result: x's shape with n replaced by k, out[..., j, ...] = x[..., index[j], ...].
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// The gradient of index_select: zeros(sizes) with g[..., j, ...] added at [..., index[j], ...]
// (repeated indices accumulate, in f32 for 16-bit g, rounded once).
Tensor index_select_backward(const Tensor& g, const IntList& sizes, int64_t dim, const Tensor& index);

}  // namespace mixtape
