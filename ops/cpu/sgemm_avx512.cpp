// ops/cpu/sgemm_avx512.cpp — the AVX-512F SGEMM (see ops/cpu/sgemm_avx512.h for why and how).
// Only the functions marked MT_TARGET_AVX512_FMA contain AVX-512 instructions; they run only after
// sgemm_avx512_available() said yes, so the library stays baseline x86-64 elsewhere.
#include "ops/cpu/sgemm_avx512.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <new>

#include "ops/cpu/aligned_buffer.h"
#include "ops/cpu/tile_threads.h"

#include "ops/cpu/transpose_avx512.h"
#include "ops/cpu/isa.h"
MT_KERNELS_BEGIN

namespace mixtape::cpu {
namespace {

constexpr int64_t kMr = 8;    // rows of a micro-tile (A panel width)
constexpr int64_t kNr = 32;   // columns of a micro-tile: two zmm registers
constexpr int64_t kKc = 256;  // depth slice: an A panel (8 KiB) and a B panel (32 KiB) fit in L1
constexpr int64_t kMc = 128;  // rows of an A block (128 KiB, in L2)
constexpr int64_t kNc = 512;  // columns of a B block (512 KiB at kKc, in L2)
// Below this many multiply-adds a GEMM runs on one thread: a team costs more than it saves.
constexpr int64_t kParallelMacs = int64_t(1) << 21;


// op(A)[i, p] for i < m, p < k, with op(A) = A (m, k) or A^T (A stored (k, m)).
inline const float* a_at(bool ta, const float* a, int64_t lda, int64_t i, int64_t p) {
  return ta ? a + p * lda + i : a + i * lda + p;
}
inline const float* b_at(bool tb, const float* b, int64_t ldb, int64_t p, int64_t j) {
  return tb ? b + j * ldb + p : b + p * ldb + j;
}

// The packers run only on the AVX-512 path, so they are compiled for it (the copies vectorize).
// Panel r of op(A) rows [i0, i0 + mc), depth [p0, p0 + kc): dst[p * kMr + ii] = op(A)[i0 + r kMr + ii,
// p0 + p], zero past row mc.
MT_TARGET_AVX512_FMA void pack_a_panel(bool ta, const float* a, int64_t lda, int64_t i0, int64_t rows, int64_t p0, int64_t kc,
                  float* dst) {
  if (ta) {  // op(A)[i, p] = A[p, i]: rows of the panel are contiguous in A
    for (int64_t p = 0; p < kc; ++p) {
      const float* src = a_at(true, a, lda, i0, p0 + p);
      float* d = dst + p * kMr;
      int64_t ii = 0;
      for (; ii < rows; ++ii) d[ii] = src[ii];
      for (; ii < kMr; ++ii) d[ii] = 0.0f;
    }
  } else {
    for (int64_t ii = 0; ii < kMr; ++ii) {
      if (ii < rows) {
        const float* src = a_at(false, a, lda, i0 + ii, p0);
        for (int64_t p = 0; p < kc; ++p) dst[p * kMr + ii] = src[p];
      } else {
        for (int64_t p = 0; p < kc; ++p) dst[p * kMr + ii] = 0.0f;
      }
    }
  }
}


// Panel of op(B) columns [j0, j0 + cols), depth [p0, p0 + kc): dst[p * kNr + jj], zero past cols.
// dst is 64-byte aligned (panels are whole multiples of kNr floats from an aligned buffer).
MT_TARGET_AVX512_FMA void pack_b_panel(bool tb, const float* b, int64_t ldb, int64_t j0, int64_t cols, int64_t p0, int64_t kc,
                            float* dst) {
  if (!tb) {  // rows of op(B) are contiguous in B
    for (int64_t p = 0; p < kc; ++p) {
      const float* src = b_at(false, b, ldb, p0 + p, j0);
      float* d = dst + p * kNr;
      int64_t jj = 0;
      for (; jj < cols; ++jj) d[jj] = src[jj];
      for (; jj < kNr; ++jj) d[jj] = 0.0f;
    }
    return;
  }
  // op(B)[p, j] = B[j, p]: column jj of the panel is contiguous in B. Transposed 16 x 16 blocks
  // at a time (conv2d's weight gradient packs its whole im2col matrix this way), the rest singly.
  int64_t p = 0;
#if MIXTAPE_X86_KERNELS
  for (; p + 16 <= kc; p += 16)
    for (int64_t j16 = 0; j16 < kNr; j16 += 16) {
      __m512 r[16];
      for (int q = 0; q < 16; ++q)
        r[q] = j16 + q < cols ? _mm512_loadu_ps(b_at(true, b, ldb, p0 + p, j0 + j16 + q)) : _mm512_setzero_ps();
      transpose16x16(r);
      for (int q = 0; q < 16; ++q) _mm512_store_ps(dst + (p + q) * kNr + j16, r[q]);
    }
#endif
  for (; p < kc; ++p)
    for (int64_t jj = 0; jj < kNr; ++jj) dst[p * kNr + jj] = jj < cols ? *b_at(true, b, ldb, p0 + p, j0 + jj) : 0.0f;
}

#if MIXTAPE_X86_KERNELS
// The micro-kernel: the 8 x 32 tile T = Ap (kc, 8)^T Bp (kc, 32), summed over p in order; then
// c[i, j] = T (beta == 0) or fma(beta, c, T), for the full tile with row stride ldc.
MT_TARGET_AVX512_FMA void micro_kernel(int64_t kc, const float* __restrict ap, const float* __restrict bp, float* c,
                            int64_t ldc, float beta) {
  __m512 acc[kMr][2];
#pragma GCC unroll 8
  for (int i = 0; i < kMr; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_load_ps(bp), b1 = _mm512_load_ps(bp + 16);
#pragma GCC unroll 8
    for (int i = 0; i < kMr; ++i) {
      const __m512 a = _mm512_set1_ps(ap[i]);
      acc[i][0] = _mm512_fmadd_ps(a, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(a, b1, acc[i][1]);
    }
    ap += kMr;
    bp += kNr;
  }
  if (beta == 0.0f) {
#pragma GCC unroll 8
    for (int i = 0; i < kMr; ++i) {
      _mm512_storeu_ps(c + i * ldc, acc[i][0]);
      _mm512_storeu_ps(c + i * ldc + 16, acc[i][1]);
    }
  } else {
    const __m512 vb = _mm512_set1_ps(beta);
#pragma GCC unroll 8
    for (int i = 0; i < kMr; ++i) {
      float* row = c + i * ldc;
      _mm512_storeu_ps(row, _mm512_fmadd_ps(vb, _mm512_loadu_ps(row), acc[i][0]));
      _mm512_storeu_ps(row + 16, _mm512_fmadd_ps(vb, _mm512_loadu_ps(row + 16), acc[i][1]));
    }
  }
}
#endif

// One micro-tile of C at (i, j) with rows x cols valid elements: straight into C when full,
// else through a scratch tile, merged with the same fma(beta, c, t) the full tile uses.
void tile(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, int64_t rows, int64_t cols,
          float beta) {
#if MIXTAPE_X86_KERNELS
  if (rows == kMr && cols == kNr) return micro_kernel(kc, ap, bp, c, ldc, beta);
  alignas(64) float t[kMr * kNr];
  micro_kernel(kc, ap, bp, t, kNr, 0.0f);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      float& dst = c[i * ldc + j];
      dst = beta == 0.0f ? t[i * kNr + j] : std::fma(beta, dst, t[i * kNr + j]);
    }
#else
  (void)kc, (void)ap, (void)bp, (void)c, (void)ldc, (void)rows, (void)cols, (void)beta;
#endif
}

// The blocked loops on the calling thread (k > 0, m > 0, n > 0).
void sgemm_serial(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                  int64_t ldb, float beta, float* c, int64_t ldc) {
  thread_local AlignedBuffer<float> a_buf, b_buf;
  const int64_t kc_max = std::min(k, kKc);
  float* ap = a_buf.get((std::min(m, kMc) + kMr - 1) / kMr * kMr * kc_max);
  float* bp = b_buf.get((std::min(n, kNc) + kNr - 1) / kNr * kNr * kc_max);
  for (int64_t jc = 0; jc < n; jc += kNc) {
    const int64_t nc = std::min(kNc, n - jc), b_panels = (nc + kNr - 1) / kNr;
    for (int64_t pc = 0; pc < k; pc += kKc) {
      const int64_t kc = std::min(kKc, k - pc);
      const float slice_beta = pc == 0 ? beta : 1.0f;  // later slices add onto the first
      for (int64_t jr = 0; jr < b_panels; ++jr)
        pack_b_panel(tb, b, ldb, jc + jr * kNr, std::min(kNr, nc - jr * kNr), pc, kc, bp + jr * kNr * kc);
      for (int64_t ic = 0; ic < m; ic += kMc) {
        const int64_t mc = std::min(kMc, m - ic), a_panels = (mc + kMr - 1) / kMr;
        for (int64_t ir = 0; ir < a_panels; ++ir)
          pack_a_panel(ta, a, lda, ic + ir * kMr, std::min(kMr, mc - ir * kMr), pc, kc, ap + ir * kMr * kc);
        for (int64_t jr = 0; jr < b_panels; ++jr)  // a B panel stays in L1 while the A panels stream
          for (int64_t ir = 0; ir < a_panels; ++ir)
            tile(kc, ap + ir * kMr * kc, bp + jr * kNr * kc, c + (ic + ir * kMr) * ldc + jc + jr * kNr, ldc,
                 std::min(kMr, mc - ir * kMr), std::min(kNr, nc - jr * kNr), slice_beta);
      }
    }
  }
}

}  // namespace

bool sgemm_avx512_available() { return isa_avx512(); }

void sgemm_avx512(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                  int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // C = beta C, and beta == 0 reads nothing
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  // Threads take C's columns (or rows, when C is taller than wide) in whole tiles:
  // ops/cpu/tile_threads.h.
  const int nt = omp_in_parallel() || m * n * k < kParallelMacs ? 1 : omp_get_max_threads();
  for_gemm_ranges(nt, ta, tb, m, n, a, lda, b, ldb, c, ldc, 1, kMr, kNr,
                  [&](int64_t mm, int64_t nn, const float* aa, const float* bb, float* cc) {
                    sgemm_serial(ta, tb, mm, nn, k, aa, lda, bb, ldb, beta, cc, ldc);
                  });
}

}  // namespace mixtape::cpu

MT_KERNELS_END
