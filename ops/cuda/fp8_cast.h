// ops/cuda/fp8_cast.h — the FP8 recipes' scaled casts on CUDA tensors (ops/cast.h's to_float8 /
// from_float8 land here for a CUDA input), plus the device-side variant the recipes use on a GPU:
// the scale read from a device tensor and the amax folded into one, so nothing waits on the host.
// Invariant: same bits as the CPU functions for the same inputs and scale (ops/cuda/fp8_kernels.h).
#pragma once
#include "ops/cast.h"

namespace mixtape::cuda {

// to_float8 on a CUDA tensor x (f32/f16/bf16): y = fp8(f32(x) * scale, cast.saturation), where
// scale = scale_dev[0] when scale_dev is defined (an f32 tensor of one element on x's device,
// read by the kernel), else cast.scale. amax (optional, f32, one element, x's device) receives
// max(amax, max |x|) over the unscaled input with NaNs dropped: zero it first for this cast alone.
Tensor to_float8(const Tensor& x, DType dtype, Float8Cast cast, const Tensor& scale_dev = {},
                 const Tensor& amax = {});
// amax = max(amax, max |x|) on the device, NaNs dropped (to_float8's amax without the cast):
// x a CUDA f32/f16/bf16 tensor, amax an f32 tensor of one element on x's device.
void fold_amax(const Tensor& x, const Tensor& amax);
// from_float8 on a CUDA tensor: f32(x) * scale.
Tensor from_float8(const Tensor& x, float scale);

}  // namespace mixtape::cuda
