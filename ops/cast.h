// ops/cast.h — changing dtype or device. Casts are ordinary differentiable ops: the gradient of
// to(f16) is cast back to the source dtype (this is how an f32 weight used by an f16 op under
// autocast ends up with an f32 .grad).
#pragma once
#include "core/convert.h"
#include "core/tensor.h"

namespace mixtape {

Tensor to_dtype(const Tensor& x, DType dtype);     // returns x itself if already dtype
Tensor to_device(const Tensor& x, Device device);  // returns x itself if already there
Tensor clone(const Tensor& x);                     // a contiguous copy, differentiable
Tensor contiguous(const Tensor& x);                // x if already contiguous, else clone

// The scaled FP8 casts of the FP8 recipes (docs/FP8.md), on the CPU. Neither is recorded by
// autograd: x must not require grad (the recipes wrap them in their own backward).
//   to_float8(x: f32/f16/bf16 [*], dtype: Float8_e4m3fn | Float8_e5m2, cast) -> dtype [*]
//     y = fp8(f32(x) * cast.scale), rounded to nearest even, saturated as cast.saturation says
//     (the recipes pass Fp8Saturation::Finite). cast.scale must be finite and > 0.
//   from_float8(x: FP8 [*], scale) -> f32 [*]: y = f32(x) * scale, exact for power-of-two scales.
// A CUDA tensor runs the CUDA backend's kernels (ops/cuda/fp8_cast.h, same bits).
Tensor to_float8(const Tensor& x, DType dtype, Float8Cast cast = {1.0f, Fp8Saturation::Finite});
Tensor from_float8(const Tensor& x, float scale = 1.0f);

namespace detail {
// How to_float8 / from_float8 reach the CUDA backend without this layer depending on it: the
// backend registers its two functions at load time (ops/cuda/fp8_cast_ops.cpp); null without it.
struct Float8CudaCasts {
  Tensor (*to)(const Tensor& x, DType dtype, Float8Cast cast) = nullptr;
  Tensor (*from)(const Tensor& x, float scale) = nullptr;
};
bool register_float8_cuda_casts(Float8CudaCasts casts);
}  // namespace detail

}  // namespace mixtape
