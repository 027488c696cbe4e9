// ops/linear.h — the fully connected layer, y = x @ w^T + b (torch.nn.functional.linear).
// AMP: lower precision (f16/bf16 operands, f32 accumulation, one rounding of the output).
#pragma once
#include "core/tensor.h"

namespace mixtape {

// x: (*, in) with at least 1 dim; w: (out, in); b: (out) or undefined (no bias).
// Returns (*, out) in x's dtype (x, w and b must share one floating dtype; autocast casts them).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());

}  // namespace mixtape
