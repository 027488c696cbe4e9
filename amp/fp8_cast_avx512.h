// amp/fp8_cast_avx512.h — the arithmetic saturating float -> FP8 cast of 16 lanes (AVX-512),
// shared by the cast table's bulk casts (amp/fp8_cast_table.cpp) and the MX block kernels
// (amp/mx_block_avx512.cpp). Include only from a kernel file (MT_KERNELS_BEGIN), call only after
// cpu::isa_avx512().
// Invariant: for lanes that are not NaN, the code and the rounded value are the cast table's
// (core/float8.h, Fp8Saturation::Finite); tests/amp/test_fp8_kernels.cpp checks every high half.
#pragma once
#include <bit>
#include <cstdint>

#include "ops/cpu/isa.h"

#if MIXTAPE_X86_KERNELS
namespace mixtape::amp::fp8_avx512 {

// The format's constants for the arithmetic cast: mantissa bits, exponent bias, largest finite
// value, smallest normal, and 2^k with 2^-k the subnormal quantum.
struct Format {
  int mant, bias;
  float max, min_normal, sub_inv;
};
constexpr Format kE4m3{3, 7, 448.0f, 0x1p-6f, 0x1p9f};
constexpr Format kE5m2{2, 15, 57344.0f, 0x1p-14f, 0x1p16f};

// The vectors cast16 reads, built once per call of a bulk kernel.
struct Consts {
  int shift;
  __m512 vmax, vmin, vsub, vq;
  __m512i half, one, keep, rebias, signbit, emin, lift, inf;
};
MT_TARGET_AVX512 inline Consts consts_of(const Format& f) {
  Consts c;
  c.shift = 23 - f.mant;
  c.vmax = _mm512_set1_ps(f.max);
  c.vmin = _mm512_set1_ps(f.min_normal);
  c.vsub = _mm512_set1_ps(f.sub_inv);
  c.vq = _mm512_set1_ps(1.0f / f.sub_inv);
  c.half = _mm512_set1_epi32((1 << (c.shift - 1)) - 1);
  c.one = _mm512_set1_epi32(1);
  c.keep = _mm512_set1_epi32(~((1 << c.shift) - 1));
  c.rebias = _mm512_set1_epi32((127 - f.bias) << f.mant);
  c.signbit = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  // The rounding constant's exponent: a's own, at least the smallest normal's (subnormals share
  // its quantum), plus 23 - mant.
  c.emin = _mm512_set1_epi32(static_cast<int>(std::bit_cast<uint32_t>(f.min_normal) & 0x7F800000u));
  c.lift = _mm512_set1_epi32(c.shift << 23);
  c.inf = _mm512_set1_epi32(0x7F800000);
  return c;
}

// 16 source values as floats (masked lanes 0): f32 as they are, BF16 (its bits) widened in the
// register (exact), so a BF16 tensor needs no f32 copy.
MT_TARGET_AVX512 inline __m512 load16(const float* p, __mmask16 k) { return _mm512_maskz_loadu_ps(k, p); }
MT_TARGET_AVX512 inline __m512 load16(const uint16_t* p, __mmask16 k) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, p)), 16));
}

// v: 16 scaled values, none NaN. Returns each one's FP8 value (as f32 bits, v's sign), and with
// kCodes its FP8 code in *code (one per 32-bit lane). |v| is first clamped to the format's largest
// finite value (SATFINITE). With codes: round to nearest even on the float's bits at the format's
// mantissa width (normals), |v| times the subnormal quantum's inverse to an integer (subnormals).
// Without: one FP add and subtract of a power of two whose ulp is the format's quantum at |v|.
template <bool kCodes>
MT_TARGET_AVX512 inline __m512i cast16(const Consts& c, __m512 v, __m512i* code) {
  const __m512i vb = _mm512_castps_si512(v);
  const __m512i sign = _mm512_and_si512(vb, c.signbit);
  const __m512 a = _mm512_min_ps(_mm512_castsi512_ps(_mm512_andnot_si512(c.signbit, vb)), c.vmax);  // inf -> max
  __m512i b;
  if constexpr (kCodes) {
    // Normals: round to nearest even at `mant` bits on the bits (a carry moves into the exponent).
    b = _mm512_castps_si512(a);
    b = _mm512_add_epi32(b, _mm512_add_epi32(c.half, _mm512_and_si512(_mm512_srli_epi32(b, c.shift), c.one)));
    b = _mm512_and_si512(b, c.keep);
    __m512i q8 = _mm512_sub_epi32(_mm512_srli_epi32(b, c.shift), c.rebias);
    // Subnormals: |v| in quanta, rounded to the nearest even integer (exact: a power-of-two product).
    const __mmask16 sub = _mm512_cmp_ps_mask(a, c.vmin, _CMP_LT_OQ);
    const __m512 q = _mm512_roundscale_ps(_mm512_mul_ps(a, c.vsub), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q8 = _mm512_mask_mov_epi32(q8, sub, _mm512_cvttps_epi32(q));
    b = _mm512_mask_mov_epi32(b, sub, _mm512_castps_si512(_mm512_mul_ps(q, c.vq)));
    *code = _mm512_or_si512(q8, _mm512_srli_epi32(sign, 24));
  } else {
    // c = 2^(max(E, Emin) - mant + 23) for a in binade E. c + a lies in [c, 2c), whose ulp is
    // 2^(max(E, Emin) - mant), the format's quantum at a (normal or subnormal), so the add rounds
    // a to nearest even on the format's grid and the subtract is exact. a <= max, a grid point,
    // so nothing rounds past it.
    (void)code;
    const __m512i e = _mm512_max_epi32(_mm512_and_si512(_mm512_castps_si512(a), c.inf), c.emin);
    const __m512 r = _mm512_castsi512_ps(_mm512_add_epi32(e, c.lift));
    b = _mm512_castps_si512(_mm512_sub_ps(_mm512_add_ps(a, r), r));
  }
  return _mm512_or_si512(b, sign);
}

}  // namespace mixtape::amp::fp8_avx512
#endif
