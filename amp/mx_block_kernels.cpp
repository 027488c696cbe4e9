// amp/mx_block_kernels.cpp — see amp/mx_block_kernels.h. Only MT_TARGET_AVX512 functions hold
// AVX-512 instructions; they run only after isa_avx512().
#include "amp/mx_block_kernels.h"

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
// One whole BF16 block of len values, len a multiple of 32: 32 values a 512-bit load, seen as 16
// lanes of two BF16 values each; the even elements' floats are the lanes shifted up 16 bits, the
// odd ones' the lanes with their low halves cleared. So nothing is widened on load or narrowed on
// store: the two halves' widenings are merged back into one 512-bit store, in order, and their
// codes into one 32-byte store. Returns the block's code.
template <bool kCodes>
MT_TARGET_AVX512 uint8_t bf16_block_avx512(const fp8_avx512::Consts& cc, const uint16_t* src, int64_t len,
                                           bool e5m2, bool spec, uint8_t* dst, uint16_t* wide) {
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)), magnitude = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i high_magnitude = _mm512_set1_epi32(0x7FFF0000);
  __m512i am = _mm512_setzero_si512();
  for (int64_t i = 0; i < len; i += 32) {
    const __m512i v = _mm512_loadu_si512(src + i);
    am = _mm512_max_epu32(am, _mm512_max_epu32(_mm512_and_si512(_mm512_slli_epi32(v, 16), magnitude),
                                                _mm512_and_si512(v, high_magnitude)));
  }
  const uint8_t code = mx_code_of(std::bit_cast<float>(_mm512_reduce_max_epu32(am)), e5m2, spec);
  if (!mx_widening_is_product(code)) return code;
  const __m512 inv = _mm512_set1_ps(mx_inv_scale_of(code)), pow2 = _mm512_set1_ps(mx_scale_of(code));
  for (int64_t i = 0; i < len; i += 32) {
    const __m512i v = _mm512_loadu_si512(src + i);
    __m512i qe = _mm512_setzero_si512(), qo = _mm512_setzero_si512();
    const __m512i re = fp8_avx512::cast16<kCodes>(cc, _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), inv), &qe);
    const __m512i ro = fp8_avx512::cast16<kCodes>(cc, _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(v, high)), inv), &qo);
    const __m512i we = _mm512_castps_si512(_mm512_mul_ps(_mm512_castsi512_ps(re), pow2));
    const __m512i wo = _mm512_castps_si512(_mm512_mul_ps(_mm512_castsi512_ps(ro), pow2));
    _mm512_storeu_si512(wide + i, _mm512_or_si512(_mm512_srli_epi32(we, 16), _mm512_and_si512(wo, high)));
    // Each code is one byte (sign | magnitude), the rest of its lane zero: lane j's 16 low bits hold
    // codes 2j and 2j + 1 in order.
    if constexpr (kCodes)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                          _mm512_cvtepi32_epi16(_mm512_or_si512(qe, _mm512_slli_epi32(qo, 8))));
  }
  return code;
}

template <bool kCodes, typename S>
MT_TARGET_AVX512 void blocks_avx512(const S* src, int64_t n, int64_t k, bool e5m2, bool spec, uint8_t* codes,
                                    uint8_t* dst, uint16_t* wide) {
  const fp8_avx512::Consts cc = fp8_avx512::consts_of(e5m2 ? fp8_avx512::kE5m2 : fp8_avx512::kE4m3);
  const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF);
  for (int64_t lo = 0, b = 0; lo < n; lo += k, ++b) {
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
