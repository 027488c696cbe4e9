// amp/cuda/mx_block_cuda.h — MXFP8's block casts on CUDA tensors: amp::mx_quantize_widened
// (amp/mx_block.h) run on the device, and the widening of a saved MX operand. CUDA builds only.
// Invariant: the same codes, FP8 elements and BF16 widenings as the CPU's mx_quantize_widened for
// the same input, dim and recipe (one rule, amp/mx_scale_rule.h); nothing is read on the host.
#pragma once
#include "amp/fp8_scaling.h"

namespace mixtape::amp::cuda {

// x: a CUDA tensor (f32, bf16 or f16) of any shape, blocked along `dim` as the CPU blocks it (x
// seen as (outer, len, inner); a dim the block size does not divide ends in a shorter block, or
// with !recipe.pad_tail is refused naming `who`). Returns an Fp8Operand on x's device: `widened`
// (BF16, x's sizes) when `widen`, `data` (FP8, x's sizes) when `keep_data`, `block_scales`
// (UInt8 E8M0 codes, (outer, nb, inner)) always, axis = dim, block_size = k.
Fp8Operand mx_quantize_cuda(const Tensor& x, int64_t dim, DType elem, const MXFP8BlockScaling& recipe,
                            const char* who, bool keep_data = true, bool widen = true);
// The BF16 widening (data's sizes) of an operand made by mx_quantize_cuda with keep_data: each
// FP8 element times its block's 2^e (mx_widen's bits).
Tensor mx_widen_cuda(const Fp8Operand& op);

}  // namespace mixtape::amp::cuda
