// ops/cpu/max_pool_2x2_avx512.cpp — see ops/cpu/max_pool_2x2_avx512.h. Only the MT_TARGET_AVX512*
// functions hold AVX-512 instructions; they run only after max_pool_2x2_avx512_available().
#include "ops/cpu/max_pool_2x2_avx512.h"

#include <algorithm>

#include "ops/cpu/cpu_features.h"

#include "ops/cpu/bf16_round_avx512.h"
#include "ops/cpu/isa.h"
#include "ops/max_pool_taps.h"
MT_KERNELS_BEGIN

namespace mixtape::cpu {

bool max_pool_2x2_avx512_available() { return isa_avx512(); }

#if MIXTAPE_X86_KERNELS
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
// A chunk's 16 codes (0..3, one a lane) as 4 bytes of 2-bit codes (ops/max_pool_taps.h: code j at
// bits 2 (j % 4) of byte j / 4) in the low dword: narrowed to bytes (as the byte codes were),
// then c0 + 4 c1 per word and w0 + 16 w1 per dword by the multiply-add ports, one byte shuffle.
// Lanes past the chunk's n hold code 0 (their inputs load as 0: no tap is taken).
MT_TARGET_AVX512 inline __m128i packed_codes(__m512i code) {
  const __m128i pairs = _mm_maddubs_epi16(_mm512_cvtepi32_epi8(code), _mm_set1_epi16(0x0401));
  const __m128i quads = _mm_madd_epi16(pairs, _mm_set1_epi32(0x00100001));
  return _mm_shuffle_epi8(quads, _mm_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1));
}
// The 2n inputs of a chunk's row (n <= 16 windows) as two vectors of 16 floats: inputs [0, 16) and
// [16, 32), zero past 2n. BF16 is widened exactly (its bits are a float's upper half).
struct RowPair {
  __m512 lo, hi;
};
MT_TARGET_AVX512 inline RowPair load_row(const float* r, const ChunkShape& cs) {
  return {_mm512_maskz_loadu_ps(cs.lo, r), _mm512_maskz_loadu_ps(cs.hi, r + 16)};
}
MT_TARGET_AVX512 inline RowPair load_row(const BFloat16* r, const ChunkShape& cs) {
  const __m512i v = _mm512_maskz_loadu_epi16(__mmask32(cs.lo) | (__mmask32(cs.hi) << 16), r);
  return {widen_bf16(_mm512_castsi512_si256(v)), widen_bf16(_mm512_extracti64x4_epi64(v, 1))};
}
// Stores the lanes of `m` of 16 floats at dst. BF16 keeps each float's upper half, exact for
// floats widened from BF16 (every value these kernels store: a tap, or 0 + a BF16 gradient), and
// sets a NaN's quiet bit as the rounding conversion (float_to_bfloat16_bits) does, so a
// signalling NaN comes out quiet on every path.
MT_TARGET_AVX512 inline void store_lanes(float* dst, __mmask16 m, __m512 v) { _mm512_mask_storeu_ps(dst, m, v); }
MT_TARGET_AVX512 inline void store_lanes(BFloat16* dst, __mmask16 m, __m512 v) {
  __m512i hi = _mm512_srli_epi32(_mm512_castps_si512(v), 16);
  hi = _mm512_mask_or_epi32(hi, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), hi, _mm512_set1_epi32(0x0040));
  _mm256_mask_storeu_epi16(dst, m, _mm512_cvtepi32_epi16(hi));
}

// The windows of chunk columns [2 ow, 2 ow + 2n) of input rows r0, r1.
template <typename E>
MT_TARGET_AVX512 inline Chunk window_max(const E* r0, const E* r1, const ChunkShape& cs, __m512i even, __m512i odd) {
  const RowPair a = load_row(r0, cs), b = load_row(r1, cs);
  const __m512 a0 = a.lo, a1 = a.hi, b0 = b.lo, b1 = b.hi;
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

namespace {
template <typename E>
MT_TARGET_AVX512 void pool_plane(const E* in, int64_t OH, int64_t OW, int64_t W, E* out, int64_t* idx,
                                 uint8_t* taps) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const int64_t row_bytes = packed_tap_bytes(OW);
  for (int64_t ow = 0; ow < OW; ow += 16) {
    const int64_t n = std::min<int64_t>(16, OW - ow);
    const ChunkShape cs = chunk_shape(n);
    const __mmask16 bytes = first_lanes(packed_tap_bytes(n));  // the chunk's code bytes: 4, fewer at the end
    // 2 (ow + lane): the window's first input column; the tap adds (code >> 1) W + (code & 1).
    const __m512i col0 = _mm512_slli_epi32(_mm512_add_epi32(lane, _mm512_set1_epi32(int(ow))), 1);
    for (int64_t oh = 0; oh < OH; ++oh) {
      const E* r0 = in + 2 * oh * W + 2 * ow;
      const Chunk c = window_max(r0, r0 + W, cs, even, odd);
      if (out) store_lanes(out + oh * OW + ow, cs.m, c.best);
      if (taps) _mm_mask_storeu_epi8(taps + oh * row_bytes + ow / 4, bytes, packed_codes(c.code));
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

template <typename E>
MT_TARGET_AVX512 void tap_grad_plane(const uint8_t* taps, int64_t OH, int64_t OW, int64_t W, const E* g, E* gx) {
  // Lane j of an interleaved row takes window j / 2 (low half) or 8 + j / 2 (high half).
  const __m512i lo_half = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi_half = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  // Window j's code: bits 2j of the chunk's 4 code bytes read as one little-endian dword.
  const __m512i code_shift = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i three = _mm512_set1_epi32(3);
  const __m512 zero = _mm512_setzero_ps();
  const int64_t row_bytes = packed_tap_bytes(OW);
  for (int64_t ow = 0; ow < OW; ow += 16) {
    const int64_t n = std::min<int64_t>(16, OW - ow);
    const ChunkShape cs = chunk_shape(n);
    const __mmask16 bytes = first_lanes(packed_tap_bytes(n));
    for (int64_t oh = 0; oh < OH; ++oh) {
      const int64_t at = 2 * oh * W + 2 * ow;
      const int packed = _mm_cvtsi128_si32(_mm_maskz_loadu_epi8(bytes, taps + oh * row_bytes + ow / 4));
      const __m512i code = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(packed), code_shift), three);
      const RowPair gr = load_row(g + oh * OW + ow, ChunkShape{cs.m, 0, cs.m});  // n gradients, one a window
      const __m512 gv = _mm512_add_ps(zero, gr.lo);  // 0 + g
      __m512 tap[4];
      for (int k = 0; k < 4; ++k) tap[k] = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(code, _mm512_set1_epi32(k)), gv);
      // Interleave even/odd columns back: row 0 = tap 0, tap 1 alternating; row 1 = tap 2, tap 3.
      store_lanes(gx + at, cs.lo, _mm512_permutex2var_ps(tap[0], lo_half, tap[1]));
      store_lanes(gx + at + 16, cs.hi, _mm512_permutex2var_ps(tap[0], hi_half, tap[1]));
      store_lanes(gx + at + W, cs.lo, _mm512_permutex2var_ps(tap[2], lo_half, tap[3]));
      store_lanes(gx + at + W + 16, cs.hi, _mm512_permutex2var_ps(tap[2], hi_half, tap[3]));
    }
  }
}
}  // namespace
#endif  // MIXTAPE_X86_KERNELS

void max_pool_plane_2x2_avx512(const float* in, int64_t OH, int64_t OW, int64_t W, float* out, int64_t* idx,
                               uint8_t* taps) {
  MT_X86_ONLY(pool_plane(in, OH, OW, W, out, idx, taps));
}
void max_pool_plane_2x2_tap_grad_avx512(const uint8_t* taps, int64_t OH, int64_t OW, int64_t W, const float* g,
                                        float* gx) {
  MT_X86_ONLY(tap_grad_plane(taps, OH, OW, W, g, gx));
}
void max_pool_plane_2x2_avx512(const BFloat16* in, int64_t OH, int64_t OW, int64_t W, BFloat16* out, int64_t* idx,
                               uint8_t* taps) {
  MT_X86_ONLY(pool_plane(in, OH, OW, W, out, idx, taps));
}
void max_pool_plane_2x2_tap_grad_avx512(const uint8_t* taps, int64_t OH, int64_t OW, int64_t W, const BFloat16* g,
                                        BFloat16* gx) {
  MT_X86_ONLY(tap_grad_plane(taps, OH, OW, W, g, gx));
}

}  // namespace mixtape::cpu

MT_KERNELS_END
