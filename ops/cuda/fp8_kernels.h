// ops/cuda/fp8_kernels.h — the launchers of the FP8 conversion kernels (ops/cuda/fp8_convert.cu):
// plain copies to and from FP8 with ops/cast.cpp's rules, fills, and the scaled saturating casts of
// the FP8 recipes with their amax. Every kernel converts element by element with core/float8.h's
// scalar functions, so a CUDA result has the CPU's bits (c10's round-to-nearest-even, e4m3fn
// |x| > 464 -> NaN, e5m2 |x| >= 61440 -> inf, Fp8Saturation::Finite clamps to +-max).
// C++17-clean, no Tensor (kernel_api.h's boundary); the .cpp side checks the error, naming the op.
#pragma once
#include "ops/cuda/kernel_api.h"

namespace mixtape::cuda {

// out (dtype dst) = convert(in (dtype src)) where dst or src is an FP8 dtype (ops/cast.cpp's
// convert_value: to FP8 through float, from FP8 through its exact float value).
cudaError_t launch_copy_float8(DType dst, DType src, const Operands& ops, cudaStream_t s);
// Every element of operand 0 (an FP8 dtype) = fp8(float(value)).
cudaError_t launch_fill_float8(DType dt, const Operands& ops, double value, cudaStream_t s);

// The recipes' scaled cast of n contiguous elements (x: f32, f16 or bf16; y: FP8 dtype `dst`):
//   y[i] = fp8(f32(x[i]) * scale, saturation), scale = *scale_dev when scale_dev is not null
//   (a recipe's scale living on the device: read by the kernel, no host sync), else scale_host.
// amax_dev (may be null): *amax_dev = max(*amax_dev, max_i |x[i]|) over the UNSCALED input with
// NaNs dropped (amp::amax_of's rule), so the caller zeroes it first for this call's amax alone.
// y == nullptr writes nothing and only folds the amax (then amax_dev must not be null).
cudaError_t launch_to_float8(DType dst, DType src, const void* x, void* y, int64_t n, float scale_host,
                             const float* scale_dev, Fp8Saturation saturation, float* amax_dev, cudaStream_t s);
// y[i] = f32(x[i]) * scale (x: n contiguous FP8 values of dtype src), exact for power-of-two scales.
cudaError_t launch_from_float8(DType src, const void* x, float* y, int64_t n, float scale, cudaStream_t s);

}  // namespace mixtape::cuda
