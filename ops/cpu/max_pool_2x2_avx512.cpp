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

MT_AVX512 void max_pool_row_2x2_avx512(const float* r0, const float* r1, int64_t OW, float* out, int64_t* idx,
                                       int64_t row0_index, int64_t W) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t ow = 0; ow < OW; ow += 16) {
    const int64_t n = std::min<int64_t>(16, OW - ow);  // windows in this chunk: 2n inputs per row
    const __mmask16 lo = first_lanes(2 * n), hi = first_lanes(2 * n - 16 > 0 ? 2 * n - 16 : 0);
    const __m512 a0 = _mm512_maskz_loadu_ps(lo, r0 + 2 * ow), a1 = _mm512_maskz_loadu_ps(hi, r0 + 2 * ow + 16);
    const __m512 b0 = _mm512_maskz_loadu_ps(lo, r1 + 2 * ow), b1 = _mm512_maskz_loadu_ps(hi, r1 + 2 * ow + 16);
    // Taps 0/1 (row 0, even/odd columns) and 2/3 (row 1) of 16 windows.
    const __m512 taps[4] = {_mm512_permutex2var_ps(a0, even, a1), _mm512_permutex2var_ps(a0, odd, a1),
                            _mm512_permutex2var_ps(b0, even, b1), _mm512_permutex2var_ps(b0, odd, b1)};
    __m512 best = taps[0];
    __m512i code = _mm512_setzero_si512();
    for (int k = 1; k < 4; ++k) {
      const __mmask16 take = _mm512_cmp_ps_mask(taps[k], best, _CMP_GT_OQ) |
                             _mm512_cmp_ps_mask(taps[k], taps[k], _CMP_UNORD_Q);  // greater, or NaN
      best = _mm512_mask_blend_ps(take, best, taps[k]);
      code = _mm512_mask_blend_epi32(take, code, _mm512_set1_epi32(k));
    }
    const __mmask16 m = first_lanes(n);
    if (out) _mm512_mask_storeu_ps(out + ow, m, best);
    if (idx) {
      // row0_index + (code >> 1) W + 2 (ow + lane) + (code & 1), in 32 bits, stored as 64.
      const __m512i column = _mm512_add_epi32(_mm512_slli_epi32(_mm512_add_epi32(lane, _mm512_set1_epi32(int(ow))), 1),
                                              _mm512_and_epi32(code, _mm512_set1_epi32(1)));
      const __m512i row = _mm512_mullo_epi32(_mm512_srli_epi32(code, 1), _mm512_set1_epi32(int(W)));
      const __m512i at = _mm512_add_epi32(_mm512_add_epi32(_mm512_set1_epi32(int(row0_index)), row), column);
      _mm512_mask_storeu_epi64(idx + ow, __mmask8(m & 0xFF), _mm512_cvtepi32_epi64(_mm512_castsi512_si256(at)));
      _mm512_mask_storeu_epi64(idx + ow + 8, __mmask8(m >> 8), _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(at, 1)));
    }
  }
}
#else
void max_pool_row_2x2_avx512(const float*, const float*, int64_t, float*, int64_t*, int64_t, int64_t) {}
#endif

}  // namespace mixtape::cpu
