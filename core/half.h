// core/half.h — mixtape::Half, IEEE binary16 storage, and the scalar fp32 <-> fp16 conversions.
// Invariant: Half is 2 trivially copyable bytes holding an IEEE binary16 pattern, so a Half*
// can be handed to CUDA as __half* unchanged. float -> Half rounds to nearest, ties to even,
// keeps subnormals and the sign of zero, overflows to +-inf, and maps NaN to the pattern x86
// F16C produces (sign | 0x7E00 | top 10 payload bits); Half -> float is exact for every
// non-NaN pattern and quiets NaNs as F16C does. The bulk path (core/convert.h) must match these
// functions bit for bit, NaNs included, so neither side may change alone.
//
// There is deliberately no arithmetic on Half: code converts to float, computes, and rounds
// once on store. Comparisons go through the implicit float conversion,
// which already gives IEEE semantics (NaN != NaN, +0 == -0).
//
// This header is included by CUDA translation units compiled at C++17, so it uses nothing newer
// (no std::bit_cast) and reinterprets bits with memcpy, which nvcc also accepts in device code.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/macros.h"

namespace mixtape {
namespace detail {

// Bit reinterpretation shared by Half and BFloat16. memcpy is the one form that is defined
// behaviour in C++17 and that every compiler turns into a register move.
MIXTAPE_INLINE uint32_t float_to_u32(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

MIXTAPE_INLINE float u32_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

}  // namespace detail

// float -> binary16 in integer arithmetic only, so the result does not depend on the FPU's
// rounding mode, FTZ/DAZ flags or the compiler's contraction choices.
MIXTAPE_INLINE uint16_t float_to_half_bits(float f) {
  const uint32_t x = detail::float_to_u32(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7FFFFFFFu;

  if (ax > 0x7F800000u)  // NaN: F16C's rule, so the scalar and bulk paths agree
    return static_cast<uint16_t>(sign | 0x7E00u | ((ax & 0x007FFFFFu) >> 13));
  if (ax >= 0x477FF000u)  // >= 65520 = max + half an ulp: RNE goes to inf (inf included)
    return static_cast<uint16_t>(sign | 0x7C00u);
  if (ax >= 0x38800000u) {
    // Normal result. Rebiasing the exponent (127 -> 15) is a subtraction of 112 << 23; the
    // carry out of the rounding add propagates into the exponent, which is what makes
    // 0x...FFF round up to the next binade without a special case.
    const uint32_t r = ax - 0x38000000u;
    return static_cast<uint16_t>(sign | ((r + 0x0FFFu + ((r >> 13) & 1u)) >> 13));
  }
  if (ax < 0x33000000u)  // < 2^-25, less than half the smallest subnormal: signed zero
    return static_cast<uint16_t>(sign);

  // Subnormal result: count in units of 2^-24. The input is a normal float here (exponent
  // >= 102), so its full significand is 24 bits and value = sig * 2^(e - 150); in units of
  // 2^-24 that is sig >> (126 - e), shift in [14, 24]. Rounding up from 0x3FF gives 0x400,
  // which is the correct encoding of the smallest normal.
  const uint32_t e = ax >> 23;
  const uint32_t sig = (ax & 0x007FFFFFu) | 0x00800000u;
  const uint32_t shift = 126u - e;
  uint32_t q = sig >> shift;
  const uint32_t rem = sig & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

// binary16 -> float. Exact for every number; a NaN keeps sign and payload and gets the quiet
// bit set, because vcvtph2ps does so and the bulk path must be reproducible here.
MIXTAPE_INLINE float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1Fu;
  uint32_t m = h & 0x03FFu;

  if (e == 0x1Fu) {
    const uint32_t quiet = m ? 0x00400000u : 0u;
    return detail::u32_to_float(sign | 0x7F800000u | quiet | (m << 13));
  }
  if (e != 0) return detail::u32_to_float(sign | ((e + 112u) << 23) | (m << 13));
  if (m == 0) return detail::u32_to_float(sign);
  // Subnormal m * 2^-24 is a normal float: shift the leading one up to the hidden-bit place.
  e = 113u;  // biased fp32 exponent of 2^-14, the fp16 subnormal binade's upper edge
  while (!(m & 0x0400u)) {
    m <<= 1;
    --e;
  }
  return detail::u32_to_float(sign | (e << 23) | ((m & 0x03FFu) << 13));
}

struct Half {
  uint16_t bits;  // raw IEEE binary16 pattern; public so kernels and I/O can move it verbatim

  Half() = default;  // trivial, like float: uninitialised unless value-initialised
  MIXTAPE_HD explicit Half(float f) : bits(float_to_half_bits(f)) {}
  MIXTAPE_HD operator float() const { return half_bits_to_float(bits); }

  // Half{0x3C00} would mean 15360.0 through the float constructor; a pattern needs a name.
  MIXTAPE_HD static constexpr Half from_bits(uint16_t b) {
    Half h{};
    h.bits = b;
    return h;
  }

  MIXTAPE_HD static constexpr Half max() { return from_bits(0x7BFF); }         // 65504
  MIXTAPE_HD static constexpr Half lowest() { return from_bits(0xFBFF); }      // -65504
  MIXTAPE_HD static constexpr Half min_normal() { return from_bits(0x0400); }  // 2^-14
  MIXTAPE_HD static constexpr Half denorm_min() { return from_bits(0x0001); }  // 2^-24
  MIXTAPE_HD static constexpr Half epsilon() { return from_bits(0x1400); }     // 2^-10
  MIXTAPE_HD static constexpr Half infinity() { return from_bits(0x7C00); }
  MIXTAPE_HD static constexpr Half quiet_nan() { return from_bits(0x7E00); }
};

static_assert(sizeof(Half) == 2, "Half must be exactly binary16-sized to alias __half");
static_assert(alignof(Half) == 2, "Half must align like __half");
static_assert(std::is_trivially_copyable<Half>::value, "Half is moved with memcpy");
static_assert(std::is_standard_layout<Half>::value, "Half is reinterpreted across APIs");

MIXTAPE_HD constexpr bool isnan(Half h) { return (h.bits & 0x7FFFu) > 0x7C00u; }
MIXTAPE_HD constexpr bool isinf(Half h) { return (h.bits & 0x7FFFu) == 0x7C00u; }
MIXTAPE_HD constexpr bool isfinite(Half h) { return (h.bits & 0x7C00u) != 0x7C00u; }
MIXTAPE_HD constexpr bool signbit(Half h) { return (h.bits & 0x8000u) != 0; }

}  // namespace mixtape
