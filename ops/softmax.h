// ops/softmax.h — softmax and log-softmax along one dim, and their gradient ops.
//
// x: any shape, floating (an integer x needs `dtype`). With `dtype` given, x is first converted
// to it and the output has that dtype (PyTorch's softmax(x, dim, dtype)); otherwise the output
// has x's dtype. Under autocast both are fp32-unless-dtype: a 16-bit x is computed in f32
// unless the caller passed `dtype`. Rows are stabilised by subtracting their max; the max, the
// sum of exponentials and the gradient sums accumulate in f32 (f64 for f64), and 16-bit
// outputs are rounded once.
#pragma once
#include <optional>

#include "core/tensor.h"

namespace mixtape {

// y = exp(x - max) / sum(exp(x - max)) along dim; same shape as x.
Tensor softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);
// y = x - max - log(sum(exp(x - max))) along dim; same shape as x.
Tensor log_softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);

// The gradient ops (public so they are differentiable themselves and can be gradchecked).
// g, y: same shape; y is the forward output.
Tensor softmax_backward(const Tensor& g, const Tensor& y, int64_t dim);      // y * (g - sum(g * y))
Tensor log_softmax_backward(const Tensor& g, const Tensor& y, int64_t dim);  // g - exp(y) * sum(g)

}  // namespace mixtape
