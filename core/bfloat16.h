// core/bfloat16.h — mixtape::BFloat16 (the top 16 bits of an fp32) and its scalar conversions.
// Invariant: BFloat16 is 2 trivially copyable bytes, so a BFloat16* can be handed to CUDA as
// __nv_bfloat16* unchanged. float -> BFloat16 rounds to nearest, ties to even, keeps
// subnormals (no flush to zero) and the sign of zero, overflows to +-inf, and maps NaN to
// sign | quiet bit | top 7 payload bits (the same keep-sign-and-payload rule Half follows);
// BFloat16 -> float is exact for every pattern, NaNs too. The bulk path (core/convert.h) must
// match these functions bit for bit.
//
// No arithmetic on purpose: convert to float, compute, round once on store. Comparisons go
// through the implicit float conversion. C++17-clean, because CUDA translation units include it.
#pragma once
#include <cstdint>
#include <type_traits>

#include "core/half.h"  // detail::float_to_u32 / u32_to_float: one bit-cast for both types
#include "core/macros.h"

namespace mixtape {

// bf16 has fp32's exponent field, so rounding is just rounding away the low 16 bits: adding
// 0x7FFF (+1 when the kept lsb is odd) carries exactly when the dropped half exceeds the tie,
// or equals it with an odd lsb, and a carry out of the mantissa bumps the exponent, which also
// turns values at or above bf16 max + half an ulp into inf. NaN must be caught first: the add
// would turn 0x7F800001 into inf and 0x7FFFFFFF into -0.
MIXTAPE_INLINE uint16_t float_to_bfloat16_bits(float f) {
  const uint32_t x = detail::float_to_u32(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

MIXTAPE_INLINE float bfloat16_bits_to_float(uint16_t b) {
  return detail::u32_to_float(static_cast<uint32_t>(b) << 16);
}

struct BFloat16 {
  uint16_t bits;  // raw pattern: the high half of the fp32 it came from, after rounding

  BFloat16() = default;  // trivial, like float
  MIXTAPE_HD explicit BFloat16(float f) : bits(float_to_bfloat16_bits(f)) {}
  MIXTAPE_HD operator float() const { return bfloat16_bits_to_float(bits); }

  MIXTAPE_HD static constexpr BFloat16 from_bits(uint16_t b) {
    BFloat16 h{};
    h.bits = b;
    return h;
  }

  MIXTAPE_HD static constexpr BFloat16 max() { return from_bits(0x7F7F); }         // ~3.3895e38
  MIXTAPE_HD static constexpr BFloat16 lowest() { return from_bits(0xFF7F); }
  MIXTAPE_HD static constexpr BFloat16 min_normal() { return from_bits(0x0080); }  // 2^-126
  MIXTAPE_HD static constexpr BFloat16 denorm_min() { return from_bits(0x0001); }  // 2^-133
  MIXTAPE_HD static constexpr BFloat16 epsilon() { return from_bits(0x3C00); }     // 2^-7
  MIXTAPE_HD static constexpr BFloat16 infinity() { return from_bits(0x7F80); }
  MIXTAPE_HD static constexpr BFloat16 quiet_nan() { return from_bits(0x7FC0); }
};

static_assert(sizeof(BFloat16) == 2, "BFloat16 must be 2 bytes to alias __nv_bfloat16");
static_assert(alignof(BFloat16) == 2, "BFloat16 must align like __nv_bfloat16");
static_assert(std::is_trivially_copyable<BFloat16>::value, "BFloat16 is moved with memcpy");
static_assert(std::is_standard_layout<BFloat16>::value, "BFloat16 is reinterpreted across APIs");

MIXTAPE_HD constexpr bool isnan(BFloat16 h) { return (h.bits & 0x7FFFu) > 0x7F80u; }
MIXTAPE_HD constexpr bool isinf(BFloat16 h) { return (h.bits & 0x7FFFu) == 0x7F80u; }
MIXTAPE_HD constexpr bool isfinite(BFloat16 h) { return (h.bits & 0x7F80u) != 0x7F80u; }
MIXTAPE_HD constexpr bool signbit(BFloat16 h) { return (h.bits & 0x8000u) != 0; }

}  // namespace mixtape
