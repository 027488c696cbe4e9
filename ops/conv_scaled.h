// ops/conv_scaled.h — conv2d's three passes for Fp8Autocast on the CPU (amp/fp8_ops.cpp): BF16
// operands that hold FP8 values (exact), run on the kernel lists BF16 autocast's conv2d runs
// (ops/conv.cpp: the same entry for the same shape and steering, traced with " fp8" after the
// problem), with the dequantising factor `alpha` applied once to each FP32 sum.
// Invariant: each result is the BF16 conv's FP32 sum s for that element (the same kernel, the same
// order), then f32(s * alpha) (skipped when alpha is 1), then + bias, then one rounding to BF16
// (at alpha 1 the generic im2col_gemm entry sums onto the bias, as BF16 autocast's conv2d does);
// the weight gradient is the FP32 sums themselves (its caller scales the small tensor).
#pragma once
#include "core/tensor.h"
#include "ops/conv_args.h"

namespace mixtape {

// x (N, C, H, W), w (O, C, kH, kW) BF16 contiguous, bias Float32 (O) or undefined; groups 1.
// Returns BF16 (N, O, OH, OW).
Tensor conv2d_bf16_scaled(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvGeom& g, float alpha);
// gy (N, O, OH, OW), w (O, C, kH, kW) BF16 -> BF16 (N, C, H, W).
Tensor conv2d_input_grad_bf16_scaled(const Tensor& gy, const Tensor& w, const ConvGeom& g, float alpha);
// x (N, C, H, W), gy (N, O, OH, OW) BF16 -> Float32 (O, C, kH, kW), the unscaled sums over the batch.
Tensor conv2d_weight_grad_bf16_sums(const Tensor& x, const Tensor& gy, const ConvGeom& g);

}  // namespace mixtape
