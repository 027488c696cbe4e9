// amp/mx_block_avx512.cpp — see amp/mx_block_avx512.h. Only MT_TARGET_AVX512 functions hold
// AVX-512 instructions; they run only after isa_avx512().
#include "amp/mx_block_avx512.h"

#include <algorithm>
#include <bit>
#include <type_traits>

#include "amp/fp8_cast_avx512.h"
#include "amp/mx_scale_rule.h"
#include "core/error.h"

MT_KERNELS_BEGIN

namespace mixtape::amp {

namespace {

#if MIXTAPE_X86_KERNELS
// 32 BF16 values of a block with an exact scale (inv = 2^-e, pow2 = 2^e), cast and widened: one
// 512-bit load seen as 16 lanes of two BF16 values each; the even elements' floats are the lanes
// shifted up 16 bits, the odd ones' the lanes with their low halves cleared. So nothing is widened
// on load or narrowed on store: the two halves' widenings are merged back into one 512-bit store,
// in order, and their codes into one 32-byte store.
template <bool kCodes>
MT_TARGET_AVX512 inline void bf16_cast32(const fp8_avx512::Consts& cc, const uint16_t* src, __m512 inv, __m512 pow2,
                                         uint8_t* dst, uint16_t* wide) {
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m512i v = _mm512_loadu_si512(src);
  __m512i qe = _mm512_setzero_si512(), qo = _mm512_setzero_si512();
  const __m512i re = fp8_avx512::cast16<kCodes>(cc, _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), inv), &qe);
  const __m512i ro = fp8_avx512::cast16<kCodes>(cc, _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(v, high)), inv), &qo);
  const __m512i we = _mm512_castps_si512(_mm512_mul_ps(_mm512_castsi512_ps(re), pow2));
  const __m512i wo = _mm512_castps_si512(_mm512_mul_ps(_mm512_castsi512_ps(ro), pow2));
  _mm512_storeu_si512(wide, _mm512_or_si512(_mm512_srli_epi32(we, 16), _mm512_and_si512(wo, high)));
  // Each code is one byte (sign | magnitude), the rest of its lane zero: lane j's 16 low bits hold
  // codes 2j and 2j + 1 in order.
  if constexpr (kCodes)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_cvtepi32_epi16(_mm512_or_si512(qe, _mm512_slli_epi32(qo, 8))));
}

// |v|'s bits of 32 BF16 values as 16 lanes (each lane the larger of its two values' magnitudes).
MT_TARGET_AVX512 inline __m512i bf16_magnitudes32(const uint16_t* src) {
  const __m512i v = _mm512_loadu_si512(src);
  return _mm512_max_epu32(_mm512_and_si512(_mm512_slli_epi32(v, 16), _mm512_set1_epi32(0x7FFFFFFF)),
                          _mm512_and_si512(v, _mm512_set1_epi32(0x7FFF0000)));
}

// mx_code_of (amp/mx_scale_rule.h) of 16 amaxes at once (their magnitudes' bits), by the same
// integer rule: frexp's E and significand from the bits, rounded up or the spec's, clamped. A
// subnormal amax is not normalized: its E is at most -126 either way, so e <= -126 - 9 + 1 is
// clamped to -127 (code 0) as mx_code_of's normalized one is.
MT_TARGET_AVX512 inline __m512i codes16(__m512i bits, bool e5m2, bool spec) {
  const __m512i one = _mm512_set1_epi32(1);
  const __mmask16 nonfinite = _mm512_cmpge_epu32_mask(bits, _mm512_set1_epi32(0x7F800000));
  const __mmask16 zero = _mm512_cmpeq_epi32_mask(bits, _mm512_setzero_si512());
  const __m512i E = _mm512_sub_epi32(_mm512_srli_epi32(bits, 23), _mm512_set1_epi32(126));
  const __m512i sig = _mm512_or_si512(_mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFF)), _mm512_set1_epi32(0x800000));
  __m512i e;
  if (spec) {
    e = _mm512_sub_epi32(E, _mm512_set1_epi32(1 + (e5m2 ? 15 : 8)));
  } else {
    e = _mm512_sub_epi32(E, _mm512_set1_epi32(e5m2 ? 16 : 9));
    e = _mm512_mask_add_epi32(e, _mm512_cmpgt_epu32_mask(sig, _mm512_set1_epi32(0xE00000)), e, one);
  }
  e = _mm512_max_epi32(_mm512_min_epi32(e, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
  __m512i code = _mm512_add_epi32(e, _mm512_set1_epi32(127));
  code = _mm512_mask_mov_epi32(code, zero, _mm512_set1_epi32(127));
  return _mm512_mask_mov_epi32(code, nonfinite, _mm512_set1_epi32(0xFF));
}

// 16 whole BF16 blocks of 32 values: their amaxes reduced together (a transposing tree: each
// level pairs neighbouring lanes of two vectors, so lane b of the last vector is block b's
// maximum), their codes 16 at once (codes16), then each block with an exact scale cast as
// bf16_cast32 does; the others are left to the caller (their codes written).
template <bool kCodes>
MT_TARGET_AVX512 void bf16_16blocks_avx512(const fp8_avx512::Consts& cc, const uint16_t* src, bool e5m2, bool spec,
                                           uint8_t* codes, uint8_t* dst, uint16_t* wide) {
  __m512i a[16];
  for (int b = 0; b < 16; ++b) a[b] = bf16_magnitudes32(src + 32 * b);
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int n = 16; n > 1; n /= 2)
    for (int i = 0; i < n / 2; ++i)
      a[i] = _mm512_max_epu32(_mm512_permutex2var_epi32(a[2 * i], even, a[2 * i + 1]),
                              _mm512_permutex2var_epi32(a[2 * i], odd, a[2 * i + 1]));
  const __m512i code = codes16(a[0], e5m2, spec);
  _mm512_mask_cvtepi32_storeu_epi8(codes, 0xFFFF, code);
  // Exact scales (code in [17, 238]: mx_widening_is_product) are normal floats both ways:
  // 2^e = code << 23, 2^-e = (254 - code) << 23.
  const __mmask16 exact = _mm512_cmpge_epi32_mask(code, _mm512_set1_epi32(17)) &
                          _mm512_cmple_epi32_mask(code, _mm512_set1_epi32(238));
  alignas(64) float pow2[16], inv[16];
  _mm512_store_si512(pow2, _mm512_slli_epi32(code, 23));
  _mm512_store_si512(inv, _mm512_slli_epi32(_mm512_sub_epi32(_mm512_set1_epi32(254), code), 23));
  for (int b = 0; b < 16; ++b)
    if ((exact >> b) & 1)
      bf16_cast32<kCodes>(cc, src + 32 * b, _mm512_set1_ps(inv[b]), _mm512_set1_ps(pow2[b]),
                          kCodes ? dst + 32 * b : nullptr, wide + 32 * b);
}

// One whole BF16 block of len values, len a multiple of 32: its amax, its code, and bf16_cast32
// per 32 values where the scale is exact. Returns the block's code.
template <bool kCodes>
MT_TARGET_AVX512 uint8_t bf16_block_avx512(const fp8_avx512::Consts& cc, const uint16_t* src, int64_t len,
                                           bool e5m2, bool spec, uint8_t* dst, uint16_t* wide) {
  __m512i am = _mm512_setzero_si512();
  for (int64_t i = 0; i < len; i += 32) am = _mm512_max_epu32(am, bf16_magnitudes32(src + i));
  const uint8_t code = mx_code_of(std::bit_cast<float>(_mm512_reduce_max_epu32(am)), e5m2, spec);
  if (!mx_widening_is_product(code)) return code;
  const __m512 inv = _mm512_set1_ps(mx_inv_scale_of(code)), pow2 = _mm512_set1_ps(mx_scale_of(code));
  for (int64_t i = 0; i < len; i += 32) bf16_cast32<kCodes>(cc, src + i, inv, pow2, kCodes ? dst + i : nullptr, wide + i);
  return code;
}

template <bool kCodes, typename S>
MT_TARGET_AVX512 void blocks_avx512(const S* src, int64_t n, int64_t k, bool e5m2, bool spec, uint8_t* codes,
                                    uint8_t* dst, uint16_t* wide) {
  const fp8_avx512::Consts cc = fp8_avx512::consts_of(e5m2 ? fp8_avx512::kE5m2 : fp8_avx512::kE4m3);
  const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF);
  int64_t lo = 0, b = 0;
  if constexpr (std::is_same_v<S, uint16_t>) {
    if (k == 32)  // 16 whole blocks at a time, then the rest one by one
      for (; lo + 512 <= n; lo += 512, b += 16)
        bf16_16blocks_avx512<kCodes>(cc, src + lo, e5m2, spec, codes + b, kCodes ? dst + lo : nullptr, wide + lo);
  }
  for (; lo < n; lo += k, ++b) {
    const int64_t len = std::min(k, n - lo);
    if constexpr (std::is_same_v<S, uint16_t>) {
      if (len % 32 == 0) {
        codes[b] = bf16_block_avx512<kCodes>(cc, src + lo, len, e5m2, spec, kCodes ? dst + lo : nullptr, wide + lo);
        continue;
      }
    }
    // The amax as a max of |v|'s bits (monotonic for non-NaN floats; an inf or NaN, exponent all
    // ones, makes it >= 0x7F800000, which mx_code_of turns into the NaN code). Masked lanes read 0.
    __m512i am = _mm512_setzero_si512();
    for (int64_t i = 0; i < len; i += 16) {
      const __mmask16 m = len - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (len - i)) - 1);
      am = _mm512_max_epu32(am, _mm512_and_si512(_mm512_castps_si512(fp8_avx512::load16(src + lo + i, m)), magnitude));
    }
    const uint8_t code = mx_code_of(std::bit_cast<float>(_mm512_reduce_max_epu32(am)), e5m2, spec);
    codes[b] = code;
    if (!mx_widening_is_product(code)) continue;
    // v * 2^-e rounded once in f32 (the scalar rule's product), cast, and its value times 2^e
    // (exact here) stored as BF16's top half.
    const __m512 inv = _mm512_set1_ps(mx_inv_scale_of(code)), pow2 = _mm512_set1_ps(mx_scale_of(code));
    for (int64_t i = 0; i < len; i += 16) {
      const __mmask16 m = len - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (len - i)) - 1);
      __m512i q = _mm512_setzero_si512();
      const __m512i r = fp8_avx512::cast16<kCodes>(cc, _mm512_mul_ps(fp8_avx512::load16(src + lo + i, m), inv), &q);
      if constexpr (kCodes) _mm512_mask_cvtepi32_storeu_epi8(dst + lo + i, m, q);
      const __m512i w = _mm512_castps_si512(_mm512_mul_ps(_mm512_castsi512_ps(r), pow2));
      _mm512_mask_cvtepi32_storeu_epi16(wide + lo + i, m, _mm512_srli_epi32(w, 16));
    }
  }
}

MT_TARGET_AVX512 bool codes_avx512(const uint32_t* am, int64_t n, bool e5m2, bool spec, uint8_t* codes, float* inv,
                                   float* pow2) {
  bool all_exact = true;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m512i code = codes16(_mm512_maskz_loadu_epi32(m, am + i), e5m2, spec);
    _mm512_mask_cvtepi32_storeu_epi8(codes + i, m, code);
    // Exact scales (code in [17, 238]) are normal floats both ways: 2^e = code << 23,
    // 2^-e = (254 - code) << 23; the others (and the NaN code) from mx_scale_rule.h.
    const __mmask16 exact = _mm512_mask_cmpge_epi32_mask(m, code, _mm512_set1_epi32(17)) &
                            _mm512_cmple_epi32_mask(code, _mm512_set1_epi32(238));
    _mm512_mask_storeu_epi32(pow2 + i, m, _mm512_slli_epi32(code, 23));
    _mm512_mask_storeu_epi32(inv + i, m, _mm512_slli_epi32(_mm512_sub_epi32(_mm512_set1_epi32(254), code), 23));
    if (exact == m) continue;
    all_exact = false;
    for (int64_t j = i; j < std::min(n, i + 16); ++j)
      if (((exact >> (j - i)) & 1) == 0) {
        inv[j] = mx_inv_scale_of(codes[j]);
        pow2[j] = mx_scale_of(codes[j]);
      }
  }
  return all_exact;
}

template <typename S>
MT_TARGET_AVX512 void amax_rows_avx512(const S* src, int64_t rows, int64_t inner, uint32_t* am) {
  const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF);
  for (int64_t i = 0; i < inner; i += 16) {
    const __mmask16 m = inner - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (inner - i)) - 1);
    __m512i acc = _mm512_maskz_loadu_epi32(m, am + i);
    for (int64_t j = 0; j < rows; ++j)
      acc = _mm512_max_epu32(
          acc, _mm512_and_si512(_mm512_castps_si512(fp8_avx512::load16(src + j * inner + i, m)), magnitude));
    _mm512_mask_storeu_epi32(am + i, m, acc);
  }
}

template <typename S>
void blocks(const S* src, int64_t n, int64_t k, bool e5m2, bool spec, uint8_t* codes, uint8_t* dst, uint16_t* wide) {
  if (dst != nullptr) blocks_avx512<true>(src, n, k, e5m2, spec, codes, dst, wide);
  else blocks_avx512<false>(src, n, k, e5m2, spec, codes, dst, wide);
}
#endif

}  // namespace

bool mx_contiguous_blocks_available() {
#if MIXTAPE_X86_KERNELS
  return cpu::isa_avx512();
#else
  return false;
#endif
}

void mx_contiguous_blocks(const float* src, int64_t n, int64_t k, bool e5m2, bool spec, uint8_t* codes, uint8_t* dst,
                          BFloat16* wide) {
  MT_CHECK(mx_contiguous_blocks_available() && k >= 1, "mx_contiguous_blocks: needs AVX-512 and k >= 1, got k ", k);
  MT_X86_ONLY(blocks(src, n, k, e5m2, spec, codes, dst, &wide->bits));
}

void mx_contiguous_blocks(const BFloat16* src, int64_t n, int64_t k, bool e5m2, bool spec, uint8_t* codes,
                          uint8_t* dst, BFloat16* wide) {
  MT_CHECK(mx_contiguous_blocks_available() && k >= 1, "mx_contiguous_blocks: needs AVX-512 and k >= 1, got k ", k);
  MT_X86_ONLY(blocks(&src->bits, n, k, e5m2, spec, codes, dst, &wide->bits));
}

bool mx_codes_of(const uint32_t* am, int64_t n, bool e5m2, bool spec, uint8_t* codes, float* inv, float* pow2) {
  MT_CHECK(mx_contiguous_blocks_available(), "mx_codes_of: needs AVX-512");
  return MT_X86_ONLY(codes_avx512(am, n, e5m2, spec, codes, inv, pow2));
}

void mx_amax_rows(const float* src, int64_t rows, int64_t inner, uint32_t* am) {
  MT_CHECK(mx_contiguous_blocks_available(), "mx_amax_rows: needs AVX-512");
  MT_X86_ONLY(amax_rows_avx512(src, rows, inner, am));
}

void mx_amax_rows(const BFloat16* src, int64_t rows, int64_t inner, uint32_t* am) {
  MT_CHECK(mx_contiguous_blocks_available(), "mx_amax_rows: needs AVX-512");
  MT_X86_ONLY(amax_rows_avx512(&src->bits, rows, inner, am));
}

}  // namespace mixtape::amp

MT_KERNELS_END
