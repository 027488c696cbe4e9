// ops/cpu/bgemm_avx512bf16.cpp — the AVX512_BF16 GEMM (see bgemm_avx512bf16.h for the algorithm,
// the determinism rule and the numerics). Only the functions marked MT_TARGET_AVX512BF16 contain AVX-512
// instructions; the entry point is baseline x86-64 and checks the CPU before calling them, so the
// library still runs (and this path throws) on any x86-64.
#include "ops/cpu/bgemm_avx512bf16.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <utility>

#include "core/error.h"
#include "ops/cpu/aligned_buffer.h"
#include "ops/cpu/bf16_pairs_avx512.h"
#include "ops/cpu/gemm_args.h"
#include "ops/cpu/tile_threads.h"
#include "ops/cpu/cpu_features.h"

#include "ops/cpu/isa.h"
MT_KERNELS_BEGIN

namespace mixtape::cpu {
namespace {

constexpr int64_t kMr = 8;          // rows of a micro-tile (A panel width)
constexpr int64_t kNr = bf16_pairs::kPairPanel;  // columns of a micro-tile: two zmm of FP32 accumulators
constexpr int64_t kKc = kBgemmKc;   // depth slice, in BF16 elements: A panel 8 KiB, B panel 32 KiB (L1)
constexpr int64_t kMc = 128;        // rows of an A block (128 KiB at kKc, in L2)
constexpr int64_t kNc = 512;        // columns of a B block (512 KiB at kKc, in L2)
// Below this many multiply-adds a GEMM runs on one thread: a team costs more than it saves.
constexpr int64_t kParallelMacs = int64_t(1) << 21;
static_assert(kKc % 32 == 0, "the packers move 16 depth pairs at a time; a slice is whole groups of them");


#if MIXTAPE_X86_KERNELS

// Packs op(A) rows [i0, i0 + mc), depth [p0, p0 + kc) into panels of kMr rows: panel r, pair p2,
// row ii holds the 32-bit word (op(A)[i0 + r kMr + ii, p0 + 2 p2], op(A)[.., p0 + 2 p2 + 1]) at
// dst + r kMr kc2 2 + (p2 kMr + ii) 2, zero past row mc and past depth kc.
MT_TARGET_AVX512BF16 void pack_a(bool ta, const uint16_t* a, int64_t lda, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                    uint16_t* dst) {
  const int64_t kc2 = (kc + 1) / 2, panel = kMr * kc2 * 2, panels = (mc + kMr - 1) / kMr;
  if (!ta) {
    // Rows of op(A) are rows of A: each pair is one 32-bit word already, so 16 rows (two panels)
    // x 16 pairs at a time are one 32-bit transpose; lane halves go to the two panels.
    for (int64_t r = 0; r < panels; r += 2) {
      const int64_t rows = std::min<int64_t>(16, mc - r * kMr);
      const uint16_t* base = a + (i0 + r * kMr) * lda + p0;
      uint16_t* d0 = dst + r * panel;
      uint16_t* d1 = d0 + panel;
      const bool second = rows > kMr;
      __m512i v[16];
      for (int64_t p = 0; p < kc; p += 32) {
        const int64_t pairs = bf16_pairs::load_pairs_transposed(base, lda, rows, p, kc, v);
        for (int64_t q = 0; q < pairs; ++q) {
          const int64_t at = (p / 2 + q) * kMr * 2;
          _mm256_store_si256(reinterpret_cast<__m256i*>(d0 + at), _mm512_castsi512_si256(v[q]));
          if (second) _mm256_store_si256(reinterpret_cast<__m256i*>(d1 + at), _mm512_extracti64x4_epi64(v[q], 1));
        }
      }
    }
    return;
  }
  // op(A)[i, p] = A[p, i]: depths p and p + 1 are two rows of A; interleave 8 columns of each.
  for (int64_t r = 0; r < panels; ++r) {
    const int64_t rows = std::min(kMr, mc - r * kMr);
    const __mmask8 mask = static_cast<__mmask8>((1u << rows) - 1);
    uint16_t* d = dst + r * panel;
    for (int64_t p2 = 0; p2 < kc2; ++p2) {
      const uint16_t* src = a + (p0 + 2 * p2) * lda + i0 + r * kMr;
      const __m128i lo = _mm_maskz_loadu_epi16(mask, src);
      const __m128i hi = 2 * p2 + 1 < kc ? _mm_maskz_loadu_epi16(mask, src + lda) : _mm_setzero_si128();
      _mm_store_si128(reinterpret_cast<__m128i*>(d + p2 * kMr * 2), _mm_unpacklo_epi16(lo, hi));
      _mm_store_si128(reinterpret_cast<__m128i*>(d + p2 * kMr * 2 + 8), _mm_unpackhi_epi16(lo, hi));
    }
  }
}

// The micro-kernel: the 8 x 32 tile T = sum over the kc2 pairs of Ap and Bp in order (one
// vdpbf16ps chain per accumulator, from +0); then c[i, j] = T (beta == 0) or fma(beta, c, T),
// for the full tile with row stride ldc.
MT_TARGET_AVX512BF16 void micro_kernel(int64_t kc2, const uint16_t* __restrict ap, const uint16_t* __restrict bp, float* c,
                          int64_t ldc, float beta) {
  __m512 acc[kMr][2];
#pragma GCC unroll 8
  for (int i = 0; i < kMr; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t p2 = 0; p2 < kc2; ++p2) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512(bp), b1 = (__m512bh)_mm512_load_si512(bp + 32);
#pragma GCC unroll 8
    for (int i = 0; i < kMr; ++i) {
      int32_t pair;
      std::memcpy(&pair, ap + 2 * i, sizeof pair);
      const __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], b0, a);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], b1, a);
    }
    ap += kMr * 2;
    bp += kNr * 2;
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

// One micro-tile of the product with rows x cols valid elements, element (i, j) at c[i rs + j cs]:
// straight into C when full and row-major (cs == 1), else through a scratch tile, merged with the
// same single-rounding fma(beta, c, t) the full tile uses.
MT_TARGET_AVX512BF16 void tile(int64_t kc2, const uint16_t* ap, const uint16_t* bp, float* c, int64_t rs, int64_t cs,
                  int64_t rows, int64_t cols, float beta) {
  if (rows == kMr && cols == kNr && cs == 1) return micro_kernel(kc2, ap, bp, c, rs, beta);
  alignas(64) float t[kMr * kNr];
  micro_kernel(kc2, ap, bp, t, kNr, 0.0f);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      float& dst = c[i * rs + j * cs];
      dst = beta == 0.0f ? t[i * kNr + j] : std::fma(beta, dst, t[i * kNr + j]);
    }
}

// The blocked loops on the calling thread (m, n, k > 0); element (i, j) of the product goes to
// c[i rs + j cs].
MT_TARGET_AVX512BF16 void bgemm_serial(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                          const uint16_t* b, int64_t ldb, float beta, float* c, int64_t rs, int64_t cs) {
  thread_local AlignedBuffer<uint16_t> a_buf, b_buf;
  const int64_t kc2_max = (std::min(k, kKc) + 1) / 2;
  uint16_t* ap = a_buf.get((std::min(m, kMc) + kMr - 1) / kMr * kMr * kc2_max * 2);
  uint16_t* bp = b_buf.get((std::min(n, kNc) + kNr - 1) / kNr * kNr * kc2_max * 2);
  for (int64_t jc = 0; jc < n; jc += kNc) {
    const int64_t nc = std::min(kNc, n - jc), b_panels = (nc + kNr - 1) / kNr;
    for (int64_t pc = 0; pc < k; pc += kKc) {
      const int64_t kc = std::min(kKc, k - pc), kc2 = (kc + 1) / 2;
      const float slice_beta = pc == 0 ? beta : 1.0f;  // later slices add onto the first
      for (int64_t jr = 0; jr < b_panels; ++jr)
        bf16_pairs::pack_b_pairs(tb, b, ldb, jc + jr * kNr, std::min(kNr, nc - jr * kNr), pc, kc, bp + jr * kNr * kc2 * 2);
      for (int64_t ic = 0; ic < m; ic += kMc) {
        const int64_t mc = std::min(kMc, m - ic), a_panels = (mc + kMr - 1) / kMr;
        pack_a(ta, a, lda, ic, mc, pc, kc, ap);
        for (int64_t jr = 0; jr < b_panels; ++jr)  // a B panel stays in L1 while the A panels stream
          for (int64_t ir = 0; ir < a_panels; ++ir)
            tile(kc2, ap + ir * kMr * kc2 * 2, bp + jr * kNr * kc2 * 2,
                 c + (ic + ir * kMr) * rs + (jc + jr * kNr) * cs, rs, cs, std::min(kMr, mc - ir * kMr),
                 std::min(kNr, nc - jr * kNr), slice_beta);
      }
    }
  }
}

// The fraction of the micro-tiles' lanes an (m, n) product fills.
double tile_fill(int64_t m, int64_t n) {
  return double(m) / double((m + kMr - 1) / kMr * kMr) * double(n) / double((n + kNr - 1) / kNr * kNr);
}

#endif  // MIXTAPE_X86_KERNELS

}  // namespace

bool bgemm_avx512bf16_available() { return isa_avx512bf16(); }

void bgemm_avx512bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const BFloat16* a_bf, int64_t lda,
                      const BFloat16* b_bf, int64_t ldb, float beta, float* c, int64_t ldc) {
  MT_CHECK(bgemm_avx512bf16_available(), "bgemm_avx512bf16: this CPU lacks ", bf16_native_missing(cpu_features()),
           " (check bf16_native_gemm() first)");
  if (gemm_args_trivial("bgemm_avx512bf16", ta, tb, m, n, k, lda, ldb, beta, c, ldc)) return;
#if MIXTAPE_X86_KERNELS
  // BFloat16 is a standard-layout wrapper of its uint16_t bits (core/bfloat16.h asserts it).
  const uint16_t* a = &a_bf->bits;
  const uint16_t* b = &b_bf->bits;
  int64_t rs = ldc, cs = 1;  // where element (i, j) of the computed product goes: c[i rs + j cs]
  if (tile_fill(n, m) > 1.25 * tile_fill(m, n)) {
    // A thin C (conv1's weight gradient is 32 x 9) fills 8 x 32 tiles better as C^T = op(B)^T
    // op(A)^T, stored transposed. Each element is the same sum in the same order (the products of
    // a pair commute exactly), so the bits do not depend on this choice. Only for a clear gain:
    // transposed tiles are stored element by element (conv1's forward, 32 x 784, fills 98% of
    // its tiles as it is and ran 3x slower transposed).
    std::swap(m, n), std::swap(a, b), std::swap(lda, ldb), std::swap(rs, cs);
    const bool t = ta;
    ta = !tb, tb = !t;
  }
  // Threads take C's columns (or rows, when C is taller than wide) in whole tiles:
  // ops/cpu/tile_threads.h.
  const int nt = omp_in_parallel() || m * n * k < kParallelMacs ? 1 : omp_get_max_threads();
  for_gemm_ranges(nt, ta, tb, m, n, a, lda, b, ldb, c, rs, cs, kMr, kNr,
                  [&](int64_t mm, int64_t nn, const uint16_t* aa, const uint16_t* bb, float* cc) {
                    bgemm_serial(ta, tb, mm, nn, k, aa, lda, bb, ldb, beta, cc, rs, cs);
                  });
#endif
}

}  // namespace mixtape::cpu

MT_KERNELS_END
