// ops/cpu/max_pool_2x2_avx512.cpp — see ops/cpu/max_pool_2x2_avx512.h. Only the MT_AVX512
// function holds AVX-512 instructions; it runs only after max_pool_2x2_avx512_available().
#include "ops/cpu/max_pool_2x2_avx512.h"

#include <algorithm>

#include "ops/cpu/sgemm_avx512.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MIXTAPE_HAVE_AVX512_POOL 1
#define MT_AVX512 __attribute__((target("avx512f")))
// GCC 12's permute/blend intrinsics start from _mm512_undefined_*(); see ops/cpu/sgemm_avx512.cpp.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#else
#define MIXTAPE_HAVE_AVX512_POOL 0
#endif

namespace mixtape::cpu {

bool max_pool_2x2_avx512_available() { return MIXTAPE_HAVE_AVX512_POOL && sgemm_avx512_available(); }

#if MIXTAPE_HAVE_AVX512_POOL
namespace {
inline __mmask16 first_lanes(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u); }
}  // namespace

// Chunk ow of a plane's 2x2 windows: up to 16 windows, n of them valid, 2n inputs per row. The
// masks and permutations depend on the chunk only, so the plane loops keep them across rows.
struct ChunkShape {
  __mmask16 lo, hi, m;  // inputs [0, 16) and [16, 32) of a row; windows
};
inline ChunkShape chunk_shape(int64_t n) {
  return {first_lanes(2 * n), first_lanes(2 * n - 16 > 0 ? 2 * n - 16 : 0), first_lanes(n)};
}
struct Chunk {
  __m512 best;   // each window's max tap
  __m512i code;  // its tap: 0, 1 (row 0, even/odd column), 2, 3 (row 1)
};
// The windows of chunk columns [2 ow, 2 ow + 2n) of input rows r0, r1.
MT_AVX512 inline Chunk window_max(const float* r0, const float* r1, const ChunkShape& cs, __m512i even, __m512i odd) {
  const __m512 a0 = _mm512_maskz_loadu_ps(cs.lo, r0), a1 = _mm512_maskz_loadu_ps(cs.hi, r0 + 16);
  const __m512 b0 = _mm512_maskz_loadu_ps(cs.lo, r1), b1 = _mm512_maskz_loadu_ps(cs.hi, r1 + 16);
  const __m512 taps[4] = {_mm512_permutex2var_ps(a0, even, a1), _mm512_permutex2var_ps(a0, odd, a1),
                          _mm512_permutex2var_ps(b0, even, b1), _mm512_permutex2var_ps(b0, odd, b1)};
  Chunk c{taps[0], _mm512_setzero_si512()};
  for (int k = 1; k < 4; ++k) {
    const __mmask16 take = _mm512_cmp_ps_mask(taps[k], c.best, _CMP_GT_OQ) |
                           _mm512_cmp_ps_mask(taps[k], taps[k], _CMP_UNORD_Q);  // greater, or NaN
    c.best = _mm512_mask_blend_ps(take, c.best, taps[k]);
    c.code = _mm512_mask_blend_epi32(take, c.code, _mm512_set1_epi32(k));
  }
  return c;
}

MT_AVX512 void max_pool_plane_2x2_avx512(const float* in, int64_t OH, int64_t OW, int64_t W, float* out,
                                         int64_t* idx) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t ow = 0; ow < OW; ow += 16) {
    const ChunkShape cs = chunk_shape(std::min<int64_t>(16, OW - ow));
    // 2 (ow + lane): the window's first input column; the tap adds (code >> 1) W + (code & 1).
    const __m512i col0 = _mm512_slli_epi32(_mm512_add_epi32(lane, _mm512_set1_epi32(int(ow))), 1);
    for (int64_t oh = 0; oh < OH; ++oh) {
      const float* r0 = in + 2 * oh * W + 2 * ow;
      const Chunk c = window_max(r0, r0 + W, cs, even, odd);
      if (out) _mm512_mask_storeu_ps(out + oh * OW + ow, cs.m, c.best);
      if (idx) {  // flat index in the plane, in 32 bits (the plane is < 2^31), stored as 64
        const __m512i at = _mm512_add_epi32(
            _mm512_add_epi32(_mm512_set1_epi32(int(2 * oh * W)), _mm512_mullo_epi32(_mm512_srli_epi32(c.code, 1),
                                                                                    _mm512_set1_epi32(int(W)))),
            _mm512_add_epi32(col0, _mm512_and_epi32(c.code, _mm512_set1_epi32(1))));
        int64_t* irow = idx + oh * OW + ow;
        _mm512_mask_storeu_epi64(irow, __mmask8(cs.m & 0xFF), _mm512_cvtepi32_epi64(_mm512_castsi512_si256(at)));
        _mm512_mask_storeu_epi64(irow + 8, __mmask8(cs.m >> 8), _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(at, 1)));
      }
    }
  }
}

MT_AVX512 void max_pool_plane_2x2_grad_avx512(const float* in, int64_t OH, int64_t OW, int64_t W, const float* g,
                                              float* gx) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  // Lane j of an interleaved row takes window j / 2 (low half) or 8 + j / 2 (high half).
  const __m512i lo_half = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi_half = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t ow = 0; ow < OW; ow += 16) {
    const ChunkShape cs = chunk_shape(std::min<int64_t>(16, OW - ow));
    for (int64_t oh = 0; oh < OH; ++oh) {
      const int64_t at = 2 * oh * W + 2 * ow;
      const Chunk c = window_max(in + at, in + at + W, cs, even, odd);
      const __m512 gv = _mm512_add_ps(zero, _mm512_maskz_loadu_ps(cs.m, g + oh * OW + ow));  // 0 + g
      __m512 tap[4];
      for (int k = 0; k < 4; ++k)
        tap[k] = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(c.code, _mm512_set1_epi32(k)), gv);
      // Interleave even/odd columns back: row 0 = tap 0, tap 1 alternating; row 1 = tap 2, tap 3.
      _mm512_mask_storeu_ps(gx + at, cs.lo, _mm512_permutex2var_ps(tap[0], lo_half, tap[1]));
      _mm512_mask_storeu_ps(gx + at + 16, cs.hi, _mm512_permutex2var_ps(tap[0], hi_half, tap[1]));
      _mm512_mask_storeu_ps(gx + at + W, cs.lo, _mm512_permutex2var_ps(tap[2], lo_half, tap[3]));
      _mm512_mask_storeu_ps(gx + at + W + 16, cs.hi, _mm512_permutex2var_ps(tap[2], hi_half, tap[3]));
    }
  }
}
#else
void max_pool_plane_2x2_avx512(const float*, int64_t, int64_t, int64_t, float*, int64_t*) {}
void max_pool_plane_2x2_grad_avx512(const float*, int64_t, int64_t, int64_t, const float*, float*) {}
#endif

}  // namespace mixtape::cpu
