// ops/cpu/bgemm_amx.h — mixtape's BF16 GEMM on Intel AMX (Sapphire Rapids and later): BF16
// operands, FP32 accumulation and result, on the tile instruction tdpbf16ps, which multiplies a
// 16 x 32 BF16 tile by a 32 x 16 one into a 16 x 16 FP32 tile (8,192 multiply-adds per
// instruction, against 32 for one vdpbf16ps). Whether BF16 GEMMs take this path is
// bf16_gemm_kernel() (ops/cpu/cpu_features.h, MIXTAPE_CPU_BF16): the default where the CPU has it.
//
// Algorithm (the layering of ops/cpu/bgemm_avx512bf16.h, with tiles for registers): C in blocks of
// kNc columns; the depth in slices of kBgemmKc; op(B) packed into 32-column panels of depth pairs
// (the shared pair layout, ops/cpu/bf16_pairs_avx512.h: one 16-column half is a B tile, 16 pair
// rows deep), op(A) into 32-row panels, each depth step of 32 stored as two row-major 16 x 32 A
// tiles; both zero-padded to whole tiles (rows, columns, and the depth up to a multiple of 32). A
// 32 x 32 block of C is 2 x 2 accumulator tiles (tmm0-3), fed per depth step by two A tiles
// (tmm4-5) and two B tiles (tmm6-7) — or, when its rows 16-31 are padding (m - i0 <= 16), only
// the top two (the same sums: each tile is its own chain). Threads take whole 32-wide column (or
// row) ranges, as in ops/cpu/tile_threads.h.
//
// Determinism rule: element (i, j) is, bit for bit, whatever the thread count:
//   for each depth slice [s, s + kBgemmKc) in order, t = +0, then for each step of 32 depths of
//   the slice in order (zero-padded past k: +0 x +0 products):
//       e = +0; for the 16 even depths p of the step in order: e = R(e + a[i,p] b[p,j])
//       o = +0; for the 16 odd depths p of the step in order:  o = R(o + a[i,p] b[p,j])
//       t = R(t + R(e + o))
//   then c = t on the first slice when beta == 0 (C is never read), else c = fma(beta_s, c, t),
//   beta_s = beta on the first slice and 1 after.
// R is the rounding of ops/cpu/bgemm_avx512bf16.h: to nearest even whatever MXCSR says, subnormal
// inputs read as zero, subnormal results flushed to a zero of their sign. That is what the SDM
// says of tdpbf16ps; the order of the sum it leaves open, and the one above was measured on a
// Sapphire Rapids CPU (tests/ops/test_bgemm.cpp runs this model against the kernel on every
// blocking edge, bit for bit, and pins cases where the order shows). It differs from the
// vdpbf16ps kernel's sequential pair order, so the two native kernels agree to within FP32
// summation error, not bit for bit; AMX's two chains per step of 32 sum at least as accurately.
#pragma once
#include <cstdint>

#include "core/bfloat16.h"

namespace mixtape::cpu {

// True when this CPU (and OS) can run bgemm_amx: can_run_bf16_amx(cpu_features_with_amx()).
bool bgemm_amx_available();

// Row-major C (m, n) = op(A) (m, k) @ op(B) (k, n) + beta C: the contract of bgemm_avx512bf16
// (same arguments, same checks). Throws mixtape::Error (and runs nothing) on a CPU where
// bgemm_amx_available() is false.
void bgemm_amx(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t lda, const BFloat16* b,
               int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace mixtape::cpu
