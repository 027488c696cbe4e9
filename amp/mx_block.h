// amp/mx_block.h — MXFP8 block scaling (OCP Microscaling Formats v1.0): a tensor's values in
// blocks of k consecutive values along one dim, each block one E8M0 scale (a power of two,
// 2^(code - 127), code 0xFF = NaN) and k FP8 elements.
// Invariant: a block's elements are fp8_saturating(v / 2^e) for the block's e, so dequantizing
// multiplies by 2^e exactly; no element of a block scaled with MxScaleRounding::Up saturates.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/bfloat16.h"

#include "amp/fp8_recipe.h"
#include "amp/fp8_scaling.h"
#include "amp/mx_scale_rule.h"

namespace mixtape::amp {

// The E8M0 code of a block whose largest magnitude is `amax`, for FP8 elements of dtype `elem`:
//   Up:   e = the smallest integer with amax <= fp8_max * 2^e (computed exactly, from amax's
//         exponent and significand),
//   Spec: e = floor(log2 amax) - emax_elem (E4M3: 8, E5M2: 15; OCP MX v1.0, 6.3),
// clamped to E8M0's [-127, 127]; code = e + 127. amax 0 gives code 127 (scale 1); a non-finite
// amax gives 0xFF (NaN: the whole block dequantizes to NaN, as the spec says). The rule itself is
// amp/mx_scale_rule.h's mx_code_of, which the device's block casts share.
uint8_t mx_scale_code(float amax, DType elem, MxScaleRounding rounding);

// Refuses, naming `who` and the numbers, a dim of x that recipe.block_size does not divide when
// !recipe.pad_tail (the CPU's and the device's block casts both ask here).
void check_mx_blocks(const Tensor& x, int64_t dim, const MXFP8BlockScaling& recipe, const char* who);

// Quantizes a 2-D tensor (f32, f16 or bf16, CPU) in blocks of recipe.block_size along `axis`
// (0 or 1). A dim that block_size does not divide ends in a shorter block when recipe.pad_tail,
// and is refused, naming `who` and both numbers, otherwise. `widened` is set too
// (mx_quantize_widened), so the GEMM reads it as it is.
Fp8Operand mx_quantize(const Tensor& x, int64_t axis, DType elem, const MXFP8BlockScaling& recipe, const char* who);

// The BF16 widening of one MX element: `value`, the element's decoded FP8 value, times `pow2`,
// its block's scale 2^e (an exact f32, NaN for code 0xFF). The f32 product is exact (an element
// has at most 4 significant bits and is >= 2^-16 in magnitude, the scale >= 2^-127); rounding it
// to BF16 is exact too except at the two edges of BF16's range, handled here:
//   - below 2^-126 BF16 is subnormal (quantum 2^-133): the product rounds to nearest even there,
//     and one under 2^-134 in magnitude flushes to zero (only E5M2's smallest elements under the
//     smallest scales reach this);
//   - at or above 2^128 (f32 overflows: an element rounded up to 2^(8 or 15) under a scale near
//     2^127) the result saturates to +-BF16's largest finite value, as the scaled casts do: a
//     finite input never widens to an infinity.
// NaN (a NaN element or scale) gives BF16's quiet NaN 0x7FC0.
// (amp/mx_scale_rule.h's mx_widen_bits, shared with the device.)
inline BFloat16 mx_widen(float value, float pow2) { return BFloat16::from_bits(mx_widen_bits(value, pow2)); }

// Quantizes a CPU tensor of any shape (f32, bf16 or f16) in blocks of recipe.block_size along
// dim `dim`: the tensor seen as (outer, len, inner), each block is k consecutive indices along
// len at one (outer, inner) position. Writes, in one pass over x: `widened`, each element's
// BF16 widening with its block scale applied (mx_widen: the operand of the BF16 kernels, alpha 1),
// x's sizes; `data`, the FP8 elements (x's sizes; only when keep_data); `block_scales`, the E8M0
// codes, (outer, nb, inner). axis = dim. The short-tail rule and its refusal are mx_quantize's.
// conv2d's MX route blocks the image along its channels (dim 1) this way (amp/fp8_ops.cpp).
Fp8Operand mx_quantize_widened(const Tensor& x, int64_t dim, DType elem, const MXFP8BlockScaling& recipe,
                               const char* who, bool keep_data = true);

}  // namespace mixtape::amp
