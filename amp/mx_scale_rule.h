// amp/mx_scale_rule.h — the MXFP8 block rule, element by element, shared by the CPU's block casts
// (amp/mx_block.cpp) and the device's (amp/cuda/mx_block.cu), so both give the same bits: a
// block's E8M0 code from its amax, an element's FP8 code under that scale, and the element's
// BF16 widening with the scale applied. C++17, integer arithmetic on the floats' bits (no frexp,
// no log, no ldexp: their device versions are not the host's), usable in device code.
// Invariant: mx_code_of(amax) is amp::mx_scale_code's documented rule (amp/mx_block.h), and
// mx_element_bits / mx_widen_bits give the bits of the CPU's scalar block cast.
#pragma once
#include <cstdint>

#include "core/bfloat16.h"
#include "core/float8.h"
#include "core/half.h"  // detail::float_to_u32 / u32_to_float
#include "core/macros.h"

namespace mixtape::amp {

// The E8M0 code of a block whose largest magnitude is |amax| (the sign bit is ignored), for
// elements of E4M3 (e5m2 false) or E5M2 (true); spec: OCP's floor(log2 amax) - emax_elem, else
// rounded up: the smallest e with amax <= fp8_max * 2^e. Clamped to [-127, 127], code = e + 127;
// amax 0 gives 127, a non-finite amax 0xFF (NaN).
MIXTAPE_INLINE uint8_t mx_code_of(float amax, bool e5m2, bool spec) {
  const uint32_t bits = ::mixtape::detail::float_to_u32(amax) & 0x7FFFFFFFu;
  if (bits >= 0x7F800000u) return 0xFF;
  if (bits == 0) return 127;
  // amax = (sig / 2^24) * 2^E with sig in [2^23, 2^24): frexp's m and E, exactly.
  uint32_t sig = bits & 0x7FFFFFu;
  int E = static_cast<int>(bits >> 23) - 126;
  if (bits >> 23 == 0) {  // subnormal: normalize the significand
    E = -125;
    while (sig < 0x800000u) {
      sig <<= 1;
      --E;
    }
  } else {
    sig |= 0x800000u;
  }
  int e;
  if (spec) {
    e = (E - 1) - (e5m2 ? 15 : 8);  // floor(log2 amax) = E - 1
  } else {
    // fp8_max = 0.875 * 2^Ef (448: Ef 9, 57344: Ef 16). amax <= 0.875 * 2^(Ef + e) holds for
    // e = E - Ef exactly when m <= 0.875, i.e. sig <= 0.875 * 2^24; m >= 0.5 rules out one less.
    const int Ef = e5m2 ? 16 : 9;
    e = sig <= 0xE00000u ? E - Ef : E - Ef + 1;
  }
  e = e < -127 ? -127 : e > 127 ? 127 : e;
  return static_cast<uint8_t>(e + 127);
}

// 2^k as an exact float, k in [-149, 127] (2^-127 .. 2^-149 are subnormal).
MIXTAPE_INLINE float mx_pow2(int k) {
  return ::mixtape::detail::u32_to_float(k >= -126 ? static_cast<uint32_t>(k + 127) << 23
                                                   : 1u << static_cast<unsigned>(k + 149));
}

// The block scale 2^(code - 127) and its inverse 2^(127 - code) (both exact floats); NaN for 0xFF.
MIXTAPE_INLINE float mx_scale_of(uint8_t code) {
  return code == 0xFF ? ::mixtape::detail::u32_to_float(0x7FC00000u) : mx_pow2(static_cast<int>(code) - 127);
}
MIXTAPE_INLINE float mx_inv_scale_of(uint8_t code) {
  return code == 0xFF ? ::mixtape::detail::u32_to_float(0x7FC00000u) : mx_pow2(127 - static_cast<int>(code));
}

// One element v of a block with code `code`: fp8_saturating(f32(v * 2^-e)) (the product rounded
// once in f32, as the CPU's cast rounds it); a NaN block's elements are all 0x7F (NaN in both
// formats).
MIXTAPE_INLINE uint8_t mx_element_bits(float v, uint8_t code, bool e5m2) {
  if (code == 0xFF) return 0x7F;
  const float p = v * mx_inv_scale_of(code);
  return e5m2 ? float_to_e5m2_bits(p, Fp8Saturation::Finite) : float_to_e4m3fn_bits(p, Fp8Saturation::Finite);
}

// The BF16 widening of one MX element, `value` (its decoded FP8 value) times `pow2` (its block's
// 2^e, NaN for code 0xFF): the f32 product (exact) rounded to BF16, exact but at BF16's range
// edges: below 2^-126 it rounds to nearest even among BF16's subnormals, and a finite product at
// or beyond 2^128 (f32 overflow) saturates to +-BF16's largest finite value, as the scaled casts
// saturate. A NaN element or scale (a NaN block) gives BF16's quiet NaN 0x7FC0: a fixed pattern,
// because which operand's payload a multiply of two NaNs keeps differs between compilers and GPUs.
MIXTAPE_INLINE uint16_t mx_widen_bits(float value, float pow2) {
  const uint32_t vb = ::mixtape::detail::float_to_u32(value), sb = ::mixtape::detail::float_to_u32(pow2);
  if ((vb & 0x7FFFFFFFu) > 0x7F800000u || (sb & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
  const float p = value * pow2;
  const uint32_t pb = ::mixtape::detail::float_to_u32(p);
  const bool p_inf = (pb & 0x7FFFFFFFu) == 0x7F800000u;
  const bool finite = (vb & 0x7F800000u) != 0x7F800000u && (sb & 0x7F800000u) != 0x7F800000u;
  if (p_inf && finite) return (pb >> 31) != 0 ? uint16_t{0xFF7F} : uint16_t{0x7F7F};
  return float_to_bfloat16_bits(p);
}

// An FP8 element's decoded value (exact).
MIXTAPE_INLINE float mx_decode(uint8_t q, bool e5m2) { return e5m2 ? e5m2_bits_to_float(q) : e4m3fn_bits_to_float(q); }

}  // namespace mixtape::amp
