// amp/fp8_scaling.h — per-tensor FP8 scales: amax and the scale it gives, and the quantized
// operand the FP8 GEMMs take (per-tensor scale or MX block scales).
// Invariant: every scale returned here is finite and in [2^-126, FLT_MAX], so the saturating
// cast (to_float8) accepts it and its reciprocal is finite.
#pragma once
#include <array>
#include <cstdint>

#include "amp/fp8_recipe.h"
#include "core/tensor.h"

namespace mixtape::amp {

// max |x| over a CPU f32/f16/bf16 tensor (0 for an empty one). NaNs are ignored, as fmaxf
// ignores them in Transformer Engine's amax kernels; an inf is kept (and keeps the old scale).
float amax_of(const Tensor& x);

// The scale that maps `amax` onto `fp8_max * 2^-margin` (TE's compute_scale_from_amax and its
// delayed-scaling update): s = (fp8_max * 2^-margin) / amax, both roundings in f32. When amax is
// 0, inf or NaN there is nothing to scale by and `fallback` is returned (TE: the previous scale
// for delayed scaling, 1 for current scaling). A quotient beyond f32 becomes FLT_MAX (TE's
// value_for_inf), one below 2^-126 becomes 2^-126. power_of_2 then clears the mantissa (rounds
// down to a power of two, TE's force_pow_2_scales), so no value moves past fp8_max.
float scale_from_amax(float amax, float fp8_max, float margin, bool power_of_2, float fallback);

// A tensor cast to FP8, as a GEMM operand. 2-D, contiguous, in the logical layout of the
// operand. Its real value is data * scale_inv (per-tensor) or data * 2^(e - 127) per block
// (MX: block_scales holds the E8M0 codes, one per block_size values along `axis`).
struct Fp8Operand {
  Tensor data;          // Float8_e4m3fn or Float8_e5m2, (rows, cols)
  float scale_inv = 1;  // per-tensor dequantising factor (1 for MX)
  float scale = 1;      // per-tensor: the scale the cast multiplied by (scale_inv is its f32 reciprocal)
  Tensor block_scales;  // UInt8 E8M0 codes (MX only): axis 1: (rows, nb), axis 0: (nb, cols)
  int64_t axis = -1;    // the dim the MX blocks run along (the GEMM's reduction dim); -1: per-tensor
  int64_t block_size = 0;
  // Optional: the (rows, cols) operand already widened to BF16, which the GEMM then takes as it
  // is. conv2d writes its im2col matrix this way, straight from the FP8 image (`data` is then
  // that image, not the matrix).
  Tensor widened;
  // `widened` holds the operand transposed, (cols, rows) contiguous: conv2d's im2col written as
  // the BF16 convolution kernels write it (amp/fp8_im2col.h). fp8_gemm reads it as such.
  bool widened_transposed = false;
};

// Per-tensor quantization of a 2-D f32 tensor with a given scale (saturating, round to nearest even).
// amax, when given, receives amax_of(x32), read in the same pass (delayed scaling records it).
Fp8Operand quantize_per_tensor(const Tensor& x32, DType fp8, float scale, float* amax = nullptr);

// The same cast of a CPU f32/bf16/f16 tensor of any shape (made contiguous), with `widened` set to
// its FP8 values in BF16 (the same sizes, not transposed), both written in one pass over x: the
// bits of quantize_per_tensor, and of widen_fp8 on them. For conv2d's kernel route (amp/fp8_ops.cpp).
// keep_data false: only `widened` is written (`data` stays undefined), for an operand that is not
// saved (the output gradient).
Fp8Operand quantize_per_tensor_widened(const Tensor& x, DType fp8, float scale, float* amax = nullptr,
                                       bool keep_data = true);
// quantize_per_tensor_widened(x, fp8, scale, amax, false) of an f32 or bf16 (N, C, ...) tensor,
// with *sums set to each channel's FP32 sum, read in the same pass (conv2d's bias gradient from
// its output gradient): the values of each (n, c) row go to 16 lanes, value l to lane l mod 16, row
// after row in n's order, and the lanes are then added in order; the same bits at every thread count.
Fp8Operand quantize_per_tensor_widened_channel_sums(const Tensor& x, DType fp8, float scale, float* amax,
                                                    Tensor* sums);
// An FP8 tensor of any shape, contiguous, each value widened exactly to BF16 (the same sizes).
Tensor widen_fp8(const Tensor& fp8);

// The operand widened to BF16, exactly: per-tensor, the FP8 values themselves (the scale is
// applied to the GEMM's f32 result); MX, each value times its block's power of two (mx_widen in
// amp/mx_block.h: exact but at BF16's subnormal and overflow edges).
// `widened` is returned as it is when set.
Tensor widen_to_bf16(const Fp8Operand& op);
// The BF16 pattern of each of the 256 FP8 codes of `fp8` (exact).
std::array<BFloat16, 256> fp8_to_bf16_table(DType fp8);
// The operand's real values in f32: data * scale_inv, or data * 2^(e-127) per block.
Tensor dequantize(const Fp8Operand& op);

}  // namespace mixtape::amp
