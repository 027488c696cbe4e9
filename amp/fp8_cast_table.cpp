// amp/fp8_cast_table.cpp — see amp/fp8_cast_table.h. Only the MT_TARGET_AVX512 function holds
// AVX-512 instructions; it runs only after isa_avx512().
#include "amp/fp8_cast_table.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <type_traits>

#include "amp/fp8_cast_avx512.h"
#include "amp/fp8_scaling.h"
#include "core/error.h"
#include "ops/cpu/isa.h"

MT_KERNELS_BEGIN

namespace mixtape::amp {

namespace {

float cast_scaled_scalar(const uint8_t* table, const float* src, float scale, uint8_t* dst, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(src[i]);
    m = a > m ? a : m;  // a NaN compares false and is dropped
    const float v = src[i] * scale;
    uint32_t b;
    std::memcpy(&b, &v, sizeof b);
    dst[i] = table[(b >> 16) | ((b & 0xFFFFu) ? 0x10000u : 0u)];
  }
  return m;
}

// A widened element (BF16 bits) times its block's power of two, kept as the product's top half
// (exact for the blocks the MX casts pass here: mx_block.cpp's `exact`).
inline uint16_t pow2_times(uint16_t wide, float pow2) {
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(std::bit_cast<float>(static_cast<uint32_t>(wide) << 16) * pow2) >>
                               16);
}

// The kernels read BF16 sources as their bits.
template <typename S>
using source_t = std::conditional_t<std::is_same_v<S, BFloat16>, uint16_t, S>;

#if MIXTAPE_X86_KERNELS
MT_TARGET_AVX512 float cast_scaled_avx512(const uint8_t* table, const float* src, float scale, uint8_t* dst,
                                          int64_t n) {
  const __m512 vs = _mm512_set1_ps(scale);
  const __m512i low16 = _mm512_set1_epi32(0xFFFF), set_half = _mm512_set1_epi32(0x10000);
  __m512 m = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(k, src + i);
    // max(a, m) returns m when a is NaN: NaNs dropped, as the scalar loop drops them.
    m = _mm512_max_ps(_mm512_abs_ps(x), m);
    const __m512i b = _mm512_castps_si512(_mm512_mul_ps(x, vs));
    __m512i idx = _mm512_srli_epi32(b, 16);
    idx = _mm512_mask_or_epi32(idx, _mm512_test_epi32_mask(b, low16), idx, set_half);
    const __m512i q = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), k, idx, table, 1);
    _mm512_mask_cvtepi32_storeu_epi8(dst + i, k, q);  // the low byte of each gathered word
  }
  return _mm512_reduce_max_ps(m);  // all lanes >= 0 and not NaN: order-free
}
inline float as_float(float v) { return v; }
inline float as_float(uint16_t bf16) { return std::bit_cast<float>(static_cast<uint32_t>(bf16) << 16); }

// scales, when given, holds one scale per value (MX blocks) in place of `scale`. kCodes: the FP8
// codes are written to dst as well; without them only the rounded value is needed, and one FP add
// and subtract round it (below). lanes, when given: lanes[i % 16] += src[i], in order.
// pow2s, when given (MX blocks): the widening is the rounded value times pow2s[i], stored as
// BF16's top half: exact only for blocks whose products are normal BF16 numbers (the caller's
// `exact` blocks), where it is what multiplying the stored widening by pow2s[i] gives.
template <bool kCodes, typename S>
MT_TARGET_AVX512 float cast_widen_avx512_as(const fp8_avx512::Format& f, const uint8_t* table, const BFloat16* wtable,
                                            const S* src, float scale, const float* scales, const float* pow2s,
                                            float pow2, uint8_t* dst, uint16_t* wide, int64_t n, float* lanes) {
  const bool times_pow2 = pow2s != nullptr || pow2 != 1.0f;
  const __m512 vpow2 = _mm512_set1_ps(pow2);
  const fp8_avx512::Consts cc = fp8_avx512::consts_of(f);
  const __m512 vs = _mm512_set1_ps(scale);
  const __m512i signbit = cc.signbit, inf = cc.inf;
  __m512 m = _mm512_setzero_ps();
  // A masked tail adds +0 to its idle lanes, which leaves every lane's value as it is (a lane
  // starting at +0 never holds -0).
  __m512 acc = lanes != nullptr ? _mm512_loadu_ps(lanes) : _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m512 x = fp8_avx512::load16(src + i, k);
    m = _mm512_max_ps(_mm512_abs_ps(x), m);  // NaNs dropped, as in cast_scaled_avx512
    if (lanes != nullptr) acc = _mm512_add_ps(acc, x);
    const __m512 vsi = scales != nullptr ? _mm512_maskz_loadu_ps(k, scales + i) : vs;
    const __m512 v = _mm512_mul_ps(x, vsi);
    const __m512i ab = _mm512_andnot_si512(signbit, _mm512_castps_si512(v));
    if (_mm512_mask_cmpgt_epi32_mask(k, ab, inf)) {  // a NaN: this vector by the tables
      for (int64_t j = i; j < std::min(n, i + 16); ++j) {
        const float p = as_float(src[j]) * (scales != nullptr ? scales[j] : scale);
        uint32_t b;
        std::memcpy(&b, &p, sizeof b);
        const uint8_t c = table[(b >> 16) | ((b & 0xFFFFu) ? 0x10000u : 0u)];
        if (dst != nullptr) dst[j] = c;
        wide[j] = times_pow2 ? pow2_times(wtable[c].bits, pow2s != nullptr ? pow2s[j] : pow2) : wtable[c].bits;
      }
      continue;
    }
    __m512i code = _mm512_setzero_si512();
    __m512i b = fp8_avx512::cast16<kCodes>(cc, v, &code);
    if constexpr (kCodes) _mm512_mask_cvtepi32_storeu_epi8(dst + i, k, code);
    if (times_pow2)
      b = _mm512_castps_si512(_mm512_mul_ps(_mm512_castsi512_ps(b),
                                            pow2s != nullptr ? _mm512_maskz_loadu_ps(k, pow2s + i) : vpow2));
    _mm512_mask_cvtepi32_storeu_epi16(wide + i, k, _mm512_srli_epi32(b, 16));
  }
  if (lanes != nullptr) _mm512_storeu_ps(lanes, acc);
  return _mm512_reduce_max_ps(m);
}

template <typename S>
MT_TARGET_AVX512 float cast_widen_avx512(const fp8_avx512::Format& f, const uint8_t* table, const BFloat16* wtable,
                                         const S* src, float scale, const float* scales, uint8_t* dst,
                                         uint16_t* wide, int64_t n, float* lanes = nullptr,
                                         const float* pow2s = nullptr, float pow2 = 1.0f) {
  return dst != nullptr
             ? cast_widen_avx512_as<true>(f, table, wtable, src, scale, scales, pow2s, pow2, dst, wide, n, lanes)
             : cast_widen_avx512_as<false>(f, table, wtable, src, scale, scales, pow2s, pow2, dst, wide, n, lanes);
}

MT_TARGET_AVX512 void widen_avx512(const uint16_t* t, const uint8_t* src, uint16_t* dst, int64_t n) {
  const __m512i t0 = _mm512_loadu_si512(t), t1 = _mm512_loadu_si512(t + 32);
  const __m512i t2 = _mm512_loadu_si512(t + 64), t3 = _mm512_loadu_si512(t + 96);
  const __m512i bit6 = _mm512_set1_epi16(0x40), sign = _mm512_set1_epi16(static_cast<int16_t>(0x8000));
  for (int64_t i = 0; i < n; i += 32) {
    const __mmask32 k = n - i >= 32 ? ~__mmask32(0) : static_cast<__mmask32>((1u << (n - i)) - 1);
    const __m512i c = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(k, src + i));
    const __m512i lo = _mm512_permutex2var_epi16(t0, c, t1), hi = _mm512_permutex2var_epi16(t2, c, t3);
    __m512i r = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(c, bit6), lo, hi);
    r = _mm512_or_si512(r, _mm512_and_si512(_mm512_slli_epi16(c, 8), sign));  // code bit 7 -> bit 15
    _mm512_mask_storeu_epi16(dst + i, k, r);
  }
}
#endif

}  // namespace

void widen_fp8_codes(const std::array<BFloat16, 256>& table, const uint8_t* src, BFloat16* dst, int64_t n) {
#if MIXTAPE_X86_KERNELS
  if (cpu::isa_avx512() && n >= 32) {
    bool signed_pairs = true;
    for (int c = 0; c < 128; ++c)
      signed_pairs = signed_pairs && table[static_cast<size_t>(c + 128)].bits == (table[static_cast<size_t>(c)].bits | 0x8000u);
    if (signed_pairs) return widen_avx512(&table[0].bits, src, &dst->bits, n);
  }
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = table[src[i]];
}

Fp8CastTable::Fp8CastTable(DType fp8)
    : e4m3_(fp8 == DType::Float8_e4m3fn), widen_(fp8_to_bf16_table(fp8)), table_(2 * (1u << 16) + 3, 0) {
  const bool e4m3 = fp8 == DType::Float8_e4m3fn;
  for (uint32_t hi = 0; hi < (1u << 16); ++hi)
    for (uint32_t low : {0u, 1u}) {
      const uint32_t bits = hi << 16 | low;
      float v;
      std::memcpy(&v, &bits, sizeof v);
      const uint8_t q = e4m3 ? float_to_e4m3fn_bits(v, Fp8Saturation::Finite) : float_to_e5m2_bits(v, Fp8Saturation::Finite);
      table_[(low ? 0x10000u : 0u) | hi] = q;
    }
}

float Fp8CastTable::cast_scaled(const float* src, float scale, uint8_t* dst, int64_t n) const {
  if (n <= 0) return 0.0f;
#if MIXTAPE_X86_KERNELS
  if (cpu::isa_avx512()) return cast_scaled_avx512(table_.data(), src, scale, dst, n);
#endif
  return cast_scaled_scalar(table_.data(), src, scale, dst, n);
}

float Fp8CastTable::cast_scaled_widened(const float* src, float scale, uint8_t* dst, BFloat16* wide, int64_t n,
                                        float* lanes) const {
  if (n <= 0) return 0.0f;
#if MIXTAPE_X86_KERNELS
  if (cpu::isa_avx512())
    return cast_widen_avx512(e4m3_ ? fp8_avx512::kE4m3 : fp8_avx512::kE5m2, table_.data(), widen_.data(), src, scale, nullptr, dst,
                             &wide->bits, n, lanes);
#endif
  if (lanes != nullptr)
    for (int64_t i = 0; i < n; ++i) lanes[i % 16] += src[i];
  std::vector<uint8_t> own(dst != nullptr ? 0 : static_cast<size_t>(n));
  uint8_t* codes = dst != nullptr ? dst : own.data();
  const float m = cast_scaled(src, scale, codes, n);
  widen_fp8_codes(widen_, codes, wide, n);
  return m;
}

float Fp8CastTable::cast_scaled_widened(const BFloat16* src, float scale, uint8_t* dst, BFloat16* wide, int64_t n,
                                        float* lanes) const {
  if (n <= 0) return 0.0f;
#if MIXTAPE_X86_KERNELS
  if (cpu::isa_avx512())
    return cast_widen_avx512(e4m3_ ? fp8_avx512::kE4m3 : fp8_avx512::kE5m2, table_.data(), widen_.data(), &src->bits, scale, nullptr, dst,
                             &wide->bits, n, lanes);
#endif
  // In chunks of 16-value multiples small enough for an f32 copy on the stack (exact: every BF16
  // value is a float), so each chunk's lanes line up with the whole row's.
  constexpr int64_t kChunk = 1024;
  float buf[kChunk];
  float m = 0.0f;
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = std::min(kChunk, n - i);
    for (int64_t j = 0; j < len; ++j) buf[j] = static_cast<float>(src[i + j]);
    const float a = cast_scaled_widened(buf, scale, dst != nullptr ? dst + i : nullptr, wide + i, len, lanes);
    m = a > m ? a : m;
  }
  return m;
}

template <typename S>
void Fp8CastTable::cast_lanes_widened_as(const S* src, const float* scales, const float* pow2s, uint8_t* dst,
                                         BFloat16* wide, int64_t n) const {
  if (n <= 0) return;
#if MIXTAPE_X86_KERNELS
  if (cpu::isa_avx512()) {
    cast_widen_avx512(e4m3_ ? fp8_avx512::kE4m3 : fp8_avx512::kE5m2, table_.data(), widen_.data(), reinterpret_cast<const source_t<S>*>(src),
                      1.0f, scales, dst, &wide->bits, n, nullptr, pow2s);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t c = (*this)(static_cast<float>(src[i]) * scales[i]);
    if (dst != nullptr) dst[i] = c;
    wide[i] = pow2s != nullptr ? BFloat16::from_bits(pow2_times(widen_[c].bits, pow2s[i])) : widen_[c];
  }
}

template <typename S>
void Fp8CastTable::cast_block_widened_as(const S* src, float scale, float pow2, uint8_t* dst, BFloat16* wide,
                                         int64_t n) const {
  if (n <= 0) return;
#if MIXTAPE_X86_KERNELS
  if (cpu::isa_avx512()) {
    cast_widen_avx512(e4m3_ ? fp8_avx512::kE4m3 : fp8_avx512::kE5m2, table_.data(), widen_.data(), reinterpret_cast<const source_t<S>*>(src),
                      scale, nullptr, dst, &wide->bits, n, nullptr, nullptr, pow2);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t c = (*this)(static_cast<float>(src[i]) * scale);
    if (dst != nullptr) dst[i] = c;
    wide[i] = BFloat16::from_bits(pow2_times(widen_[c].bits, pow2));
  }
}

void Fp8CastTable::cast_block_widened(const float* src, float scale, float pow2, uint8_t* dst, BFloat16* wide,
                                      int64_t n) const {
  cast_block_widened_as(src, scale, pow2, dst, wide, n);
}

void Fp8CastTable::cast_block_widened(const BFloat16* src, float scale, float pow2, uint8_t* dst, BFloat16* wide,
                                      int64_t n) const {
  cast_block_widened_as(src, scale, pow2, dst, wide, n);
}

void Fp8CastTable::cast_lanes_widened(const float* src, const float* scales, uint8_t* dst, BFloat16* wide,
                                      int64_t n, const float* pow2s) const {
  cast_lanes_widened_as(src, scales, pow2s, dst, wide, n);
}

void Fp8CastTable::cast_lanes_widened(const BFloat16* src, const float* scales, uint8_t* dst, BFloat16* wide,
                                      int64_t n, const float* pow2s) const {
  cast_lanes_widened_as(src, scales, pow2s, dst, wide, n);
}

const Fp8CastTable& Fp8CastTable::of(DType fp8) {
  MT_CHECK(is_float8(fp8), "Fp8CastTable: expected Float8_e4m3fn or Float8_e5m2, got ", dtype_name(fp8));
  static const Fp8CastTable e4m3(DType::Float8_e4m3fn), e5m2(DType::Float8_e5m2);
  return fp8 == DType::Float8_e4m3fn ? e4m3 : e5m2;
}

}  // namespace mixtape::amp

MT_KERNELS_END
