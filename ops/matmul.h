// ops/matmul.h — matrix products. AMP: lower precision (f16/bf16 inputs, f32 accumulation,
// one rounding of the output — tensor-core semantics on every device).
#pragma once
#include "core/tensor.h"

namespace mixtape {

// torch.matmul: 1-D x 1-D is a dot product; 1-D operands get a dim added and removed;
// >= 2-D operands are batches of matrices whose batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);   // (n, k) @ (k, m) only
Tensor bmm(const Tensor& a, const Tensor& b);  // (B, n, k) @ (B, k, m) only

}  // namespace mixtape
