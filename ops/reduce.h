// ops/reduce.h — reductions. 16-bit inputs accumulate in f32, f32 in f64; the result is
// rounded once to the output dtype.
#pragma once
#include <optional>
#include <utility>

#include "core/tensor.h"

namespace mixtape {

// Sum over all elements, or over `dims` (keepdim keeps them as size 1). `dtype` selects the
// accumulation/output type (AMP: FP32 unless a dtype is given). Integers sum to Int64.
Tensor sum(const Tensor& x, std::optional<DType> dtype = std::nullopt);
Tensor sum(const Tensor& x, const IntList& dims, bool keepdim = false, std::optional<DType> dtype = std::nullopt);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const IntList& dims, bool keepdim = false);
// Largest value along dim and its (first) index. Gradient flows to that index (PyTorch's
// convention for max.dim); NaN propagates.
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
// Largest value over dims; gradient is split evenly among tied maxima (PyTorch's amax).
Tensor amax(const Tensor& x, const IntList& dims, bool keepdim = false);
Tensor amax(const Tensor& x, int64_t dim, bool keepdim = false);
// Sums a broadcast gradient back to `shape` (the reverse of expand); identity if equal.
Tensor sum_to(const Tensor& g, const IntList& shape);

}  // namespace mixtape
