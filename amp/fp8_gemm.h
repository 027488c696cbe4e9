// amp/fp8_gemm.h — the FP8 GEMM on the CPU: C = op(A) @ op(B) with FP8 operands, FP32
// accumulation and an FP32 result. Every E4M3/E5M2 value is a BF16 value, so the operands widen
// to BF16 without error and run on the BF16 GEMM (cpu::gemm's BF16 overload: AMX, vdpbf16ps, or
// widened to the FP32 GEMM; docs/CPU.md, "BF16 GEMM"); a per-tensor operand's dequantising
// factors are applied once, to the FP32 result: C = f32(acc * f32(a.scale_inv * b.scale_inv)).
// MX operands carry their block scales into the widened BF16 values (exact powers of two).
// Invariant: the result equals the BF16 GEMM of the widened operands, scaled once; with an
// exact FP32 accumulation it equals the f64 product of the decoded FP8 values, scaled, bit for bit.
#pragma once
#include "amp/fp8_scaling.h"

namespace mixtape::amp {

// op(X) = X^T when tX. a and b are 2-D FP8 operands (amp/fp8_scaling.h); `who` names the caller
// in errors. Returns a contiguous f32 (m, n) tensor. With `post` given the result is left
// unscaled and *post receives the factor, for a caller that applies it in its own pass over C
// (c * factor, skipped when the factor is 1, as here). The BF16 GEMM is the entry of cpu::gemm's
// list BF16 autocast's op runs (`op_pass`: "linear.fwd" for linear's forward, "matmul.fwd" for
// matmul and the backward GEMMs, as BF16 autocast's linear backward runs matmuls), traced under
// MIXTAPE_TRACE=kernel with " fp8" after the problem, and forced by MIXTAPE_CPU_KERNEL likewise.
Tensor fp8_gemm(const Fp8Operand& a, bool ta, const Fp8Operand& b, bool tb, const char* who, float* post = nullptr,
                const char* op_pass = "matmul.fwd");

// True where fp8_gemm's (m, n) result, under op_pass, has the same bits whichever layouts its
// operands come in (ta, tb, widened_transposed): the BF16 kernels (AMX, vdpbf16ps) and mixtape's
// SGEMM pack either layout into the same panels and sum in the panels' order; OpenBLAS, which runs
// widened operands where C has fewer than 16 rows or columns (or without AVX-512), promises no
// such thing. A caller that may lay its operands out either way asks here first.
bool fp8_gemm_layout_free(int64_t m, int64_t n, const char* op_pass = "matmul.fwd");

}  // namespace mixtape::amp
