// ops/cpu/sgemm_avx512.h — mixtape's own single-precision GEMM for CPUs with AVX-512F.
//
// Why it exists: the OpenBLAS that Debian 12 ships (0.3.21) runs its AVX2 (Haswell) kernels on
// AMD Zen 4/5, and machines where its AVX-512 kernels are known to misbehave pin it there with
// OPENBLAS_CORETYPE; AVX-512 doubles the FMA peak of such a core (measured on the development
// machine: 272 vs 143 GFLOP/s per thread). cpu::gemm (ops/cpu/blas.h) sends float GEMMs here
// where isa_avx512() (ops/cpu/isa.h), unless MIXTAPE_GEMM=blas.
//
// Algorithm (the BLIS / GotoBLAS layering): C (m, n) is computed in blocks of kNc columns; the
// depth k in slices of kKc; for each slice, op(B) is packed into column panels of kNr and op(A)
// into row panels of kMr (zero-padded at the edges), and an 8 x 32 register-blocked micro-kernel
// (16 zmm accumulators, embedded-broadcast FMAs) multiplies one A panel by one B panel over the
// slice. Partial edge tiles are computed into a scratch tile and copied out. Each element is
// summed in a fixed order (p ascending within a slice, slices in order), so results are the
// same on every run and at every thread count; they differ from OpenBLAS's in the last bits
// (another order, and FMA's single rounding).
// Threads: with more than one OpenMP thread, outside a parallel region, and enough work, each
// thread computes its own range of C's columns (or rows) with the same loops, so the bits do not
// depend on the thread count; inside a parallel region (conv2d's loop over the batch) it runs on
// the calling thread.
// cpu::gemm sends it only matrices with at least 16 rows and 16 columns: thinner ones would leave
// most of every 8 x 32 tile empty (conv1's weight gradient, 32 x 9, ran at 23 GFLOP/s against
// OpenBLAS's 56), and BLAS's kernels handle them better.
#pragma once
#include <cstdint>

namespace mixtape::cpu {

// True when this CPU (and OS) can run the AVX-512F kernel.
bool sgemm_avx512_available();

// Row-major C (m, n) = op(A) (m, k) @ op(B) (k, n) + beta C, as cblas_sgemm with alpha = 1.
// beta == 0 never reads C (so C may hold anything, NaN included).
void sgemm_avx512(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                  int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace mixtape::cpu
