// ops/pooling.h — 2-D max, average and adaptive average pooling, with PyTorch's semantics
// (torch.nn.functional.max_pool2d / avg_pool2d / adaptive_avg_pool2d). AMP: none (they run in
// the input's dtype; 16-bit inputs are compared / summed in f32 and rounded once).
// Inputs are (N, C, H, W) or unbatched (C, H, W); the output has the same rank.
// kernel_size / stride / padding / dilation take one value (both dims) or two ({H, W}); an
// empty stride means stride = kernel_size.
#pragma once
#include <utility>

#include "core/tensor.h"

namespace mixtape {

// Max over each window. Padding counts as -inf (it is never the max); at most half the kernel.
// ceil_mode rounds the output size up, but a window must start inside the input or its left
// padding. NaN wins (and propagates); among equal maxima the first in row-major order wins.
Tensor max_pool2d(const Tensor& x, const IntList& kernel_size, const IntList& stride = {},
                  const IntList& padding = {0, 0}, const IntList& dilation = {1, 1}, bool ceil_mode = false);
// The same, plus the Int64 index of each max within its (H, W) plane (h * W + w), as PyTorch's
// return_indices=True.
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const IntList& kernel_size,
                                                  const IntList& stride = {}, const IntList& padding = {0, 0},
                                                  const IntList& dilation = {1, 1}, bool ceil_mode = false);
// The gradient of max_pool2d: zeros of input_size with grad[n, c, i] added at indices[n, c, i].
// grad and indices: (N, C, OH, OW) (or (C, OH, OW) with a 3-D input_size).
Tensor max_pool2d_backward(const Tensor& grad, const Tensor& indices, const IntList& input_size);

// Mean over each window. count_include_pad: the divisor counts padding cells (but never cells
// past the padding that ceil_mode adds); otherwise only the input cells in the window.
Tensor avg_pool2d(const Tensor& x, const IntList& kernel_size, const IntList& stride = {},
                  const IntList& padding = {0, 0}, bool ceil_mode = false, bool count_include_pad = true);
// The gradient of avg_pool2d: each grad value spread evenly (by the same divisor) over its window.
Tensor avg_pool2d_backward(const Tensor& grad, const IntList& input_size, const IntList& kernel_size,
                           const IntList& stride = {}, const IntList& padding = {0, 0}, bool ceil_mode = false,
                           bool count_include_pad = true);

// Mean over windows that tile the input into output_size cells: row window i is
// [floor(i H / OH), ceil((i + 1) H / OH)), columns alike (windows may overlap or have unequal sizes).
Tensor adaptive_avg_pool2d(const Tensor& x, const IntList& output_size);
// The gradient of adaptive_avg_pool2d: grad (N, C, OH, OW) spread back over each window.
Tensor adaptive_avg_pool2d_backward(const Tensor& grad, const IntList& input_size);

}  // namespace mixtape
