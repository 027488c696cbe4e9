// amp/mx_block.h — MXFP8 block scaling (OCP Microscaling Formats v1.0): a tensor's values in
// blocks of k consecutive values along one dim, each block one E8M0 scale (a power of two,
// 2^(code - 127), code 0xFF = NaN) and k FP8 elements.
// Invariant: a block's elements are fp8_saturating(v / 2^e) for the block's e, so dequantizing
// multiplies by 2^e exactly; no element of a block scaled with MxScaleRounding::Up saturates.
#pragma once
#include <cstdint>

#include "amp/fp8_recipe.h"
#include "amp/fp8_scaling.h"

namespace mixtape::amp {

// The E8M0 code of a block whose largest magnitude is `amax`, for FP8 elements of dtype `elem`:
//   Up:   e = the smallest integer with amax <= fp8_max * 2^e (computed exactly, from amax's
//         exponent and significand),
//   Spec: e = floor(log2 amax) - emax_elem (E4M3: 8, E5M2: 15; OCP MX v1.0, 6.3),
// clamped to E8M0's [-127, 127]; code = e + 127. amax 0 gives code 127 (scale 1); a non-finite
// amax gives 0xFF (NaN: the whole block dequantizes to NaN, as the spec says).
uint8_t mx_scale_code(float amax, DType elem, MxScaleRounding rounding);

// Quantizes a 2-D tensor (f32, f16 or bf16, CPU) in blocks of recipe.block_size along `axis`
// (0 or 1). A dim that block_size does not divide ends in a shorter block when recipe.pad_tail,
// and is refused, naming `who` and both numbers, otherwise.
Fp8Operand mx_quantize(const Tensor& x, int64_t axis, DType elem, const MXFP8BlockScaling& recipe, const char* who);

}  // namespace mixtape::amp
