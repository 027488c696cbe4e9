// amp/amax_kernels.cpp — see amp/amax_kernels.h. Only the MT_TARGET_AVX512 functions hold AVX-512
// instructions; they run only after isa_avx512().
#include "amp/amax_kernels.h"

#include <cmath>

#include "ops/cpu/isa.h"

MT_KERNELS_BEGIN

namespace mixtape::amp {

namespace {

#if MIXTAPE_X86_KERNELS
MT_TARGET_AVX512 float amax_f32_avx512(const float* p, int64_t n) {
  __m512 m = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    m = _mm512_max_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(k, p + i)), m);  // max(NaN, m) is m
  }
  return _mm512_reduce_max_ps(m);
}

// On the bits: |v|'s pattern orders as |v| does, and the patterns above inf's are NaNs, set to 0.
MT_TARGET_AVX512 float amax_bf16_avx512(const uint16_t* p, int64_t n) {
  const __m512i abs_mask = _mm512_set1_epi16(0x7FFF), inf = _mm512_set1_epi16(0x7F80);
  __m512i m = _mm512_setzero_si512();
  for (int64_t i = 0; i < n; i += 32) {
    const __mmask32 k = n - i >= 32 ? ~__mmask32(0) : static_cast<__mmask32>((1u << (n - i)) - 1);
    const __m512i a = _mm512_and_si512(_mm512_maskz_loadu_epi16(k, p + i), abs_mask);
    m = _mm512_max_epu16(m, _mm512_maskz_mov_epi16(_mm512_cmple_epu16_mask(a, inf), a));
  }
  alignas(64) uint16_t lanes[32];
  _mm512_store_si512(lanes, m);
  uint16_t best = 0;
  for (uint16_t v : lanes) best = v > best ? v : best;
  return static_cast<float>(BFloat16::from_bits(best));
}
#endif

}  // namespace

float amax_f32(const float* p, int64_t n) {
#if MIXTAPE_X86_KERNELS
  if (cpu::isa_avx512()) return amax_f32_avx512(p, n);
#endif
  float m = 0.0f;
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(p[i]);
    m = a > m ? a : m;  // a NaN compares false and is dropped, as fmax drops it
  }
  return m;
}

float amax_bf16(const BFloat16* p, int64_t n) {
#if MIXTAPE_X86_KERNELS
  if (cpu::isa_avx512()) return amax_bf16_avx512(&p->bits, n);
#endif
  const uint16_t* b = &p->bits;
  // As int16: the patterns are non-negative there, and signed 16-bit max is baseline SSE2.
  int16_t m = 0;
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) {
    int16_t a = static_cast<int16_t>(b[i] & 0x7FFF);
    a = a > 0x7F80 ? int16_t(0) : a;
    m = a > m ? a : m;
  }
  return static_cast<float>(BFloat16::from_bits(static_cast<uint16_t>(m)));
}

}  // namespace mixtape::amp

MT_KERNELS_END
