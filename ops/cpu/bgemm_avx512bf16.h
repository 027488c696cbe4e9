// ops/cpu/bgemm_avx512bf16.h — mixtape's native BF16 GEMM for CPUs with AVX512_BF16: BF16
// operands, FP32 accumulation and result, on the vdpbf16ps instruction (32 BF16 pair products
// into 16 FP32 lanes per instruction: twice the FP32 FMA's multiply-adds per cycle).
// Whether BF16 GEMMs take this kernel, the AMX one or the emulated path (widen to FP32, FP32 GEMM)
// is bf16_gemm_kernel() (ops/cpu/cpu_features.h, MIXTAPE_CPU_BF16): this one where the CPU has
// AVX512_BF16 but no AMX, or when asked for.
//
// Algorithm (the BLIS layering of ops/cpu/sgemm_avx512.h): C is computed in blocks of kNc columns;
// the depth k in slices of kBgemmKc; for each slice op(B) is packed into column panels of 32 and
// op(A) into row panels of 8, both in VNNI pair order (the two BF16 of depths p, p + 1, p even,
// side by side in one 32-bit word), zero-padded past odd k and at the tile edges; an 8 x 32
// micro-kernel (16 zmm FP32 accumulators) runs one vdpbf16ps per row, 16 columns and depth pair,
// with op(A)'s pair broadcast. Edge tiles go through a scratch tile. A thin C that fills the
// tiles over 25% better transposed (conv1's weight gradient, 32 x 9) is computed as
// C^T = op(B)^T op(A)^T and stored transposed; the sums are the same. Threads as in sgemm_avx512: with more than one
// OpenMP thread, outside a parallel region and enough work, each thread computes its own range of
// C's columns (or rows) in whole tiles with the serial loops.
//
// Determinism rule: element (i, j) is, bit for bit, whatever the thread count:
//   for each depth slice [s, s + kBgemmKc) in order, t = +0, then for each pair (p, p + 1) of the
//   slice in order (p even; a missing p + 1 past k counts as the product +0 x +0):
//       t = R(t + a[i,p+1] b[p+1,j]);  t = R(t + a[i,p] b[p,j])      (the odd depth first)
//   where R is one vdpbf16ps step (below); then c = t on the first slice when beta == 0 (C is
//   never read: NaN there does not leak), else c = fma(beta_s, c, t) (an FP32 FMA obeying MXCSR,
//   IEEE by default), beta_s = beta on the first slice and 1 after.
//
// Numerics of one vdpbf16ps step R (Intel SDM, VDPBF16PS: "round to nearest even ... Output
// denormals are always flushed to zero and input denormals are always treated as zero. MXCSR is
// not consulted nor updated"; each of the two products is accumulated by its own FP32 FMA, the
// odd element first; tests/ops/test_bgemm.cpp pins all of this on the machine it runs on):
//   - R(t + a b) = fma(a, b, t): the exact t + a b (a BF16 product has 16 significant bits) rounded
//     once, to nearest even, whatever MXCSR says; infinities and NaNs as in IEEE arithmetic;
//   - subnormal inputs (BF16 with a zero exponent field: |x| < 2^-126) count as +-0;
//   - a result below 2^-126 in magnitude becomes a zero of its sign: no gradual underflow.
// The emulated path (BF16 widened exactly to FP32, then cpu::gemm: ops/cpu/sgemm_avx512.h, or
// OpenBLAS) on the same inputs: products also exact, but another order (sgemm_avx512: one
// product per FMA, p = 0, 1, 2, ... instead of 1, 0, 3, 2, ..., slices of 256), and IEEE
// subnormals: subnormal BF16 inputs keep their value and tiny sums underflow gradually. So the
// two paths agree to within the FP32 summation error bound (k eps sum |a b|), are identical on
// inputs whose products and partial sums are exact (small integers), and differ wherever a
// product or a sum falls below 2^-126 (emulated: the subnormal value; native: 0).
#pragma once
#include <cstdint>

#include "core/bfloat16.h"

namespace mixtape::cpu {

// The depth slice of the determinism rule (even, so a pair never straddles two slices).
constexpr int64_t kBgemmKc = 512;

// True when this CPU (and OS) can run bgemm_avx512bf16: can_run_bf16_native(cpu_features()).
bool bgemm_avx512bf16_available();

// Row-major C (m, n) = op(A) (m, k) @ op(B) (k, n) + beta C, as cblas_sgemm with alpha = 1, with
// A and B in BF16 and C in FP32. op(A) = A (m, k) with row stride lda, or A^T when ta (A stored
// (k, m)); op(B) likewise. beta == 0 never reads C. Throws mixtape::Error (and runs nothing) on
// a CPU where bgemm_avx512bf16_available() is false.
void bgemm_avx512bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t lda,
                      const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace mixtape::cpu
