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

// Loads chunk ow (up to 16 windows, n of them valid) of rows r0, r1 and returns each window's
// best tap value and its code (0, 1: row 0 even/odd column; 2, 3: row 1).
struct Chunk {
  __m512 best;
  __m512i code;
};
MT_AVX512 inline Chunk window_max(const float* r0, const float* r1, int64_t ow, int64_t n) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __mmask16 lo = first_lanes(2 * n), hi = first_lanes(2 * n - 16 > 0 ? 2 * n - 16 : 0);
  const __m512 a0 = _mm512_maskz_loadu_ps(lo, r0 + 2 * ow), a1 = _mm512_maskz_loadu_ps(hi, r0 + 2 * ow + 16);
  const __m512 b0 = _mm512_maskz_loadu_ps(lo, r1 + 2 * ow), b1 = _mm512_maskz_loadu_ps(hi, r1 + 2 * ow + 16);
  // Taps 0/1 (row 0, even/odd columns) and 2/3 (row 1) of 16 windows.
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

MT_AVX512 void max_pool_row_2x2_avx512(const float* r0, const float* r1, int64_t OW, float* out, int64_t* idx,
                                       int64_t row0_index, int64_t W) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t ow = 0; ow < OW; ow += 16) {
    const int64_t n = std::min<int64_t>(16, OW - ow);  // windows in this chunk: 2n inputs per row
    const Chunk c = window_max(r0, r1, ow, n);
    const __mmask16 m = first_lanes(n);
    if (out) _mm512_mask_storeu_ps(out + ow, m, c.best);
    if (idx) {
      // row0_index + (code >> 1) W + 2 (ow + lane) + (code & 1), in 32 bits, stored as 64.
      const __m512i column = _mm512_add_epi32(_mm512_slli_epi32(_mm512_add_epi32(lane, _mm512_set1_epi32(int(ow))), 1),
                                              _mm512_and_epi32(c.code, _mm512_set1_epi32(1)));
      const __m512i row = _mm512_mullo_epi32(_mm512_srli_epi32(c.code, 1), _mm512_set1_epi32(int(W)));
      const __m512i at = _mm512_add_epi32(_mm512_add_epi32(_mm512_set1_epi32(int(row0_index)), row), column);
      _mm512_mask_storeu_epi64(idx + ow, __mmask8(m & 0xFF), _mm512_cvtepi32_epi64(_mm512_castsi512_si256(at)));
      _mm512_mask_storeu_epi64(idx + ow + 8, __mmask8(m >> 8), _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(at, 1)));
    }
  }
}

MT_AVX512 void max_pool_row_2x2_grad_avx512(const float* x0, const float* x1, int64_t OW, const float* g, float* gx0,
                                            float* gx1) {
  // Lane j of the interleaved rows takes window j / 2 (low half) or 8 + j / 2 (high half).
  const __m512i lo_half = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi_half = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t ow = 0; ow < OW; ow += 16) {
    const int64_t n = std::min<int64_t>(16, OW - ow);
    const Chunk c = window_max(x0, x1, ow, n);
    const __m512 gv = _mm512_add_ps(zero, _mm512_maskz_loadu_ps(first_lanes(n), g + ow));  // 0 + g
    __m512 tap[4];
    for (int k = 0; k < 4; ++k)
      tap[k] = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(c.code, _mm512_set1_epi32(k)), gv);
    // Interleave even/odd columns back: row 0 = tap0, tap1 alternating; row 1 = tap2, tap3.
    const __mmask16 lo = first_lanes(2 * n), hi = first_lanes(2 * n - 16 > 0 ? 2 * n - 16 : 0);
    _mm512_mask_storeu_ps(gx0 + 2 * ow, lo, _mm512_permutex2var_ps(tap[0], lo_half, tap[1]));
    _mm512_mask_storeu_ps(gx0 + 2 * ow + 16, hi, _mm512_permutex2var_ps(tap[0], hi_half, tap[1]));
    _mm512_mask_storeu_ps(gx1 + 2 * ow, lo, _mm512_permutex2var_ps(tap[2], lo_half, tap[3]));
    _mm512_mask_storeu_ps(gx1 + 2 * ow + 16, hi, _mm512_permutex2var_ps(tap[2], hi_half, tap[3]));
  }
}
#else
void max_pool_row_2x2_avx512(const float*, const float*, int64_t, float*, int64_t*, int64_t, int64_t) {}
void max_pool_row_2x2_grad_avx512(const float*, const float*, int64_t, const float*, float*, float*) {}
#endif

}  // namespace mixtape::cpu
