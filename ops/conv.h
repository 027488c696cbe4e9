// ops/conv.h — 2-D convolution (PyTorch's conv2d: a cross-correlation) and the two ops its
// backward is made of. AMP: lower precision (f16/bf16 operands, f32 accumulation, one rounding).
// stride / padding / dilation take one value (both dims) or two ({H, W}).
#pragma once
#include "core/tensor.h"

namespace mixtape {

// input: (N, C, H, W) or unbatched (C, H, W); weight: (O, C/groups, kH, kW); bias: (O) or
// undefined. Returns (N, O, OH, OW) (or (O, OH, OW)) with
//   OH = floor((H + 2 padding[0] - dilation[0] (kH - 1) - 1) / stride[0]) + 1, OW likewise.
// Zero padding. input, weight and bias share one floating dtype (autocast casts them).
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), const IntList& stride = {1, 1},
              const IntList& padding = {0, 0}, const IntList& dilation = {1, 1}, int64_t groups = 1);

// The gradient of conv2d with respect to its input: grad (N, O, OH, OW) -> (N, C, H, W) =
// input_size (a transposed convolution; input_size resolves the rows/cols a strided forward
// never read). Differentiable in grad and weight.
Tensor conv2d_input_grad(const Tensor& grad, const Tensor& weight, const IntList& input_size,
                         const IntList& stride = {1, 1}, const IntList& padding = {0, 0},
                         const IntList& dilation = {1, 1}, int64_t groups = 1);

// The gradient of conv2d with respect to its weight: input (N, C, H, W), grad (N, O, OH, OW)
// -> (O, C/groups, kH, kW) = weight_size, summed over the batch. Differentiable in both.
Tensor conv2d_weight_grad(const Tensor& input, const Tensor& grad, const IntList& weight_size,
                          const IntList& stride = {1, 1}, const IntList& padding = {0, 0},
                          const IntList& dilation = {1, 1}, int64_t groups = 1);

}  // namespace mixtape
