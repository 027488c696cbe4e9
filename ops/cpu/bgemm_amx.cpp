// ops/cpu/bgemm_amx.cpp — the AMX BF16 GEMM (see bgemm_amx.h for the algorithm and the numerics).
// Only the functions marked MT_TARGET_AMX contain AVX-512 or AMX instructions; the entry point is
// baseline x86-64 and checks the CPU (and Linux's permission) before calling them.
#include "ops/cpu/bgemm_amx.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "ops/cpu/aligned_buffer.h"
#include "ops/cpu/amx_tiles.h"
#include "ops/cpu/bf16_pairs_avx512.h"
#include "ops/cpu/bgemm_avx512bf16.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/gemm_args.h"
#include "ops/cpu/tile_threads.h"

#include "ops/cpu/isa.h"
MT_KERNELS_BEGIN

namespace mixtape::cpu {
namespace {

using amx::kStep;
using amx::kTile;
constexpr int64_t kMr = amx::kBlock;             // rows of a C block (two A tiles)
constexpr int64_t kNr = bf16_pairs::kPairPanel;  // columns of a C block (two B tiles): 32
constexpr int64_t kKc = kBgemmKc;                // depth slice: A panel 32 KiB, B panel 32 KiB
constexpr int64_t kMc = 128;                     // rows of an A block (128 KiB at kKc, in L2)
constexpr int64_t kNc = 512;                     // columns of a B block (512 KiB at kKc, in L2)
constexpr int64_t kParallelMacs = int64_t(1) << 21;
static_assert(kNr == amx::kBlock, "a B panel is two B tiles wide");
static_assert(kKc % kStep == 0, "a slice is whole depth steps");

#if MIXTAPE_X86_KERNELS

// Packs op(A) rows [i0, i0 + mc), depth [p0, p0 + kc) into panels of kMr rows: panel r, depth
// step s holds two row-major 16 x 32 tiles, element (ii, q) of the panel's step at
// dst + r kMr kcp + s kMr kStep + ii kStep + q (kcp = kc rounded up to kStep); zero past mc and kc.
MT_TARGET_AMX void pack_a(bool ta, const uint16_t* a, int64_t lda, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                   int64_t kcp, uint16_t* dst) {
  const int64_t panels = (mc + kMr - 1) / kMr, steps = kcp / kStep;
  if (!ta) {  // rows of op(A) are rows of A: one masked 32-element load per row and step
    for (int64_t r = 0; r < panels; ++r)
      for (int64_t ii = 0; ii < kMr; ++ii) {
        const int64_t i = r * kMr + ii;
        const uint16_t* src = a + (i0 + i) * lda + p0;
        uint16_t* d = dst + r * kMr * kcp + ii * kStep;
        for (int64_t s = 0; s < steps; ++s) {
          const __m512i v = i < mc ? _mm512_maskz_loadu_epi16(bf16_pairs::low_lanes(kc - s * kStep), src + s * kStep)
                                   : _mm512_setzero_si512();
          _mm512_store_si512(d + s * kMr * kStep, v);
        }
      }
    return;
  }
  // op(A)[i, p] = A[p, i]: interleave rows p, p + 1 of A into pair words for 16 columns i, then a
  // 16 x 16 32-bit transpose turns 16 pairs x 16 columns into 16 rows of op(A), 32 depths each.
  for (int64_t r = 0; r < panels; ++r)
    for (int64_t h = 0; h < kMr; h += kTile) {
      const int64_t cols = std::clamp<int64_t>(mc - r * kMr - h, 0, kTile);
      const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1);
      for (int64_t s = 0; s < steps; ++s) {
        __m512i v[16];
        for (int q = 0; q < 16; ++q) {
          const int64_t p = s * kStep + 2 * q;  // depth within the slice
          const uint16_t* src = a + (p0 + p) * lda + i0 + r * kMr + h;
          const __m256i lo = p < kc && cols ? _mm256_maskz_loadu_epi16(mask, src) : _mm256_setzero_si256();
          const __m256i hi = p + 1 < kc && cols ? _mm256_maskz_loadu_epi16(mask, src + lda) : _mm256_setzero_si256();
          v[q] = _mm512_or_si512(_mm512_cvtepu16_epi32(lo), _mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
        }
        bf16_pairs::transpose16x16_epi32(v);
        uint16_t* d = dst + r * kMr * kcp + s * kMr * kStep + h * kStep;
        for (int ii = 0; ii < 16; ++ii) _mm512_store_si512(d + ii * kStep, v[ii]);
      }
    }
}

// Packs the op(B) panel of columns [j0, j0 + cols), depth [p0, p0 + kc) in the shared pair layout
// (pair p2, column jj at dst + (p2 kNr + jj) 2), zero-padded to kcp / 2 pair rows.
MT_TARGET_AMX void pack_b(bool tb, const uint16_t* b, int64_t ldb, int64_t j0, int64_t cols, int64_t p0, int64_t kc,
                   int64_t kcp, uint16_t* dst) {
  bf16_pairs::pack_b_pairs(tb, b, ldb, j0, cols, p0, kc, dst);
  const int64_t kc2 = (kc + 1) / 2;
  std::memset(dst + kc2 * kNr * 2, 0, static_cast<size_t>((kcp / 2 - kc2) * kNr * 2) * sizeof(uint16_t));
}

// One block of the product with rows x cols valid elements, element (i, j) at c[i ldc + j]: a
// full block with beta == 0 straight from the tiles into C, else through a scratch block merged
// with the single-rounding fma(beta, c, t) of the determinism rule. With at most 16 valid rows
// only the top tiles run.
MT_TARGET_AMX void block(int64_t steps, const uint16_t* ap, const uint16_t* bp, float* c, int64_t ldc, int64_t rows,
                  int64_t cols, float beta) {
  alignas(64) float t[kMr * kNr];
  const bool top = rows <= amx::kTile;  // the lower half of the block is padding
  amx::block_product(steps, ap, bp, top);
  if (rows == kMr && cols == kNr && beta == 0.0f) return amx::store_block(c, ldc);
  amx::store_block(t, kNr, top);
  if (rows == kMr && cols == kNr) {
    const __m512 vb = _mm512_set1_ps(beta);
    for (int64_t i = 0; i < kMr; ++i)
      for (int64_t j = 0; j < kNr; j += 16) {
        float* dst = c + i * ldc + j;
        _mm512_storeu_ps(dst, _mm512_fmadd_ps(vb, _mm512_loadu_ps(dst), _mm512_load_ps(t + i * kNr + j)));
      }
    return;
  }
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      float& dst = c[i * ldc + j];
      dst = beta == 0.0f ? t[i * kNr + j] : std::fma(beta, dst, t[i * kNr + j]);
    }
}

// The blocked loops on the calling thread (m, n, k > 0).
MT_TARGET_AMX void bgemm_serial(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                         const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  thread_local AlignedBuffer<uint16_t> a_buf, b_buf;
  const int64_t kcp_max = (std::min(k, kKc) + kStep - 1) / kStep * kStep;
  uint16_t* ap = a_buf.get((std::min(m, kMc) + kMr - 1) / kMr * kMr * kcp_max);
  uint16_t* bp = b_buf.get((std::min(n, kNc) + kNr - 1) / kNr * kNr * kcp_max);
  const amx::TileScope tiles;
  for (int64_t jc = 0; jc < n; jc += kNc) {
    const int64_t nc = std::min(kNc, n - jc), b_panels = (nc + kNr - 1) / kNr;
    for (int64_t pc = 0; pc < k; pc += kKc) {
      const int64_t kc = std::min(kKc, k - pc), kcp = (kc + kStep - 1) / kStep * kStep, steps = kcp / kStep;
      const float slice_beta = pc == 0 ? beta : 1.0f;  // later slices add onto the first
      for (int64_t jr = 0; jr < b_panels; ++jr)
        pack_b(tb, b, ldb, jc + jr * kNr, std::min(kNr, nc - jr * kNr), pc, kc, kcp, bp + jr * kNr * kcp);
      for (int64_t ic = 0; ic < m; ic += kMc) {
        const int64_t mc = std::min(kMc, m - ic), a_panels = (mc + kMr - 1) / kMr;
        pack_a(ta, a, lda, ic, mc, pc, kc, kcp, ap);
        for (int64_t jr = 0; jr < b_panels; ++jr)
          for (int64_t ir = 0; ir < a_panels; ++ir)
            block(steps, ap + ir * kMr * kcp, bp + jr * kNr * kcp, c + (ic + ir * kMr) * ldc + jc + jr * kNr, ldc,
                  std::min(kMr, mc - ir * kMr), std::min(kNr, nc - jr * kNr), slice_beta);
      }
    }
  }
}

#endif  // MIXTAPE_X86_KERNELS

}  // namespace

bool bgemm_amx_available() { return isa_amx(); }

void bgemm_amx(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const BFloat16* a_bf, int64_t lda,
               const BFloat16* b_bf, int64_t ldb, float beta, float* c, int64_t ldc) {
  MT_CHECK(bgemm_amx_available(), "bgemm_amx: this CPU lacks ", bf16_amx_missing(cpu_features_with_amx()),
           " (check bf16_gemm_kernel() first)");
  if (gemm_args_trivial("bgemm_amx", ta, tb, m, n, k, lda, ldb, beta, c, ldc)) return;
#if MIXTAPE_X86_KERNELS
  const uint16_t* a = &a_bf->bits;
  const uint16_t* b = &b_bf->bits;
  const int nt = omp_in_parallel() || m * n * k < kParallelMacs ? 1 : omp_get_max_threads();
  for_gemm_ranges(nt, ta, tb, m, n, a, lda, b, ldb, c, ldc, 1, kMr, kNr,
                  [&](int64_t mm, int64_t nn, const uint16_t* aa, const uint16_t* bb, float* cc) {
                    bgemm_serial(ta, tb, mm, nn, k, aa, lda, bb, ldb, beta, cc, ldc);
                  });
#endif
}


}  // namespace mixtape::cpu

MT_KERNELS_END
