// core/float8.h — mixtape::Float8_e4m3fn and mixtape::Float8_e5m2 (PyTorch's two FP8 dtypes,
// "FP8 Formats for Deep Learning", Micikevicius et al. 2022) and their scalar conversions.
// Invariant: each type is 1 trivially copyable byte holding the format's pattern, so a pointer
// can be handed to CUDA as __nv_fp8_storage_t* unchanged.
//
//   e4m3fn: s eeee mmm, bias 7, no infinities, NaN = s 1111 111 only, max 448, min subnormal 2^-9.
//   e5m2:   s eeeee mm, bias 15, IEEE-like: inf = s 11111 00, NaN = s 11111 {01,10,11},
//           max 57344, min subnormal 2^-16.
//
// float -> FP8 rounds to nearest, ties to even, keeps subnormals and the sign of zero, and gives
// the bits PyTorch's c10 conversions (fp8e4m3fn_from_fp32_value, fp8e5m2_from_fp32_value) give:
// a NaN becomes sign | 0x7F; a value that rounds beyond the largest finite becomes NaN (e4m3fn:
// |x| > 464, i.e. past 448 + half an ulp; 464 itself is a tie that goes to 448's even mantissa)
// or inf (e5m2: |x| >= 61440, where the tie rounds to the odd 57344's even neighbour, inf).
// Fp8Saturation::Finite instead clamps every non-NaN that would overflow, inf included, to
// +-max, as cuda_fp8's __NV_SATFINITE does; the scaled casts of the FP8 recipes use it.
// FP8 -> float is exact; a NaN comes back quiet with its sign and payload (e4m3fn 0x7F ->
// 0x7FF00000; e5m2 decodes through binary16 as c10 does, so 0x7D -> 0x7FE00000).
//
// Integer arithmetic only (no dependence on the FPU's rounding mode or FTZ/DAZ), C++17, and
// usable in device code, like core/half.h. No arithmetic on the types: compute in float.
#pragma once
#include <cstdint>
#include <type_traits>

#include "core/half.h"  // detail::float_to_u32 / u32_to_float, half_bits_to_float
#include "core/macros.h"

namespace mixtape {

// What a float -> FP8 conversion does with a value beyond the format's largest finite value.
//   None:   PyTorch's to(): e4m3fn gives NaN, e5m2 gives +-inf.
//   Finite: clamp to +-max (NaN stays NaN), cuda_fp8's __NV_SATFINITE.
enum class Fp8Saturation : uint8_t { None, Finite };

namespace detail {
// Rounds the magnitude `ax` (a float's bits, sign cleared, not NaN, below the overflow
// threshold) to an FP8 magnitude with `mbits` mantissa bits and exponent bias `bias`.
// Normal results: rebias the exponent by subtracting (127 - bias) << 23 and round away the low
// 23 - mbits bits (a carry out of the mantissa bumps the exponent, which is right). Subnormal
// results count units of the smallest subnormal 2^(1 - bias - mbits).
MIXTAPE_INLINE uint32_t fp8_round_magnitude(uint32_t ax, uint32_t mbits, uint32_t bias) {
  const uint32_t min_normal_exp = 127u - bias + 1u;  // biased fp32 exponent of the min normal
  if ((ax >> 23) >= min_normal_exp) {
    const uint32_t drop = 23u - mbits;
    const uint32_t r = ax - ((127u - bias) << 23);
    return (r + ((1u << (drop - 1u)) - 1u) + ((r >> drop) & 1u)) >> drop;
  }
  // value = sig * 2^(e - 150); in units of 2^(1 - bias - mbits) that is sig >> shift with
  // shift = 150 - e - (bias + mbits - 1). Below half the smallest subnormal the answer is 0;
  // that also covers float subnormals (e == 0), whose significand has no hidden bit.
  const uint32_t e = ax >> 23;
  const uint32_t unit_exp = 127u - (bias + mbits - 1u);  // biased exponent of the min subnormal
  if (e + 1u < unit_exp) return 0u;                       // < 2^(unit - 1): rounds to zero
  const uint32_t sig = (ax & 0x007FFFFFu) | 0x00800000u;
  const uint32_t shift = 150u - e - (bias + mbits - 1u);  // in [24 - mbits, 24]
  uint32_t q = sig >> shift;
  const uint32_t rem = sig & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
  return q;  // q == 1 << mbits is the smallest normal's encoding, which is right
}
}  // namespace detail

MIXTAPE_INLINE uint8_t float_to_e4m3fn_bits(float f, Fp8Saturation sat = Fp8Saturation::None) {
  const uint32_t x = detail::float_to_u32(f);
  const uint32_t sign = (x >> 24) & 0x80u;
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return static_cast<uint8_t>(sign | 0x7Fu);  // NaN
  if (ax > 0x43E80000u)  // > 464 (inf included): rounds past 448
    return static_cast<uint8_t>(sign | (sat == Fp8Saturation::Finite ? 0x7Eu : 0x7Fu));
  return static_cast<uint8_t>(sign | detail::fp8_round_magnitude(ax, 3u, 7u));
}

MIXTAPE_INLINE uint8_t float_to_e5m2_bits(float f, Fp8Saturation sat = Fp8Saturation::None) {
  const uint32_t x = detail::float_to_u32(f);
  const uint32_t sign = (x >> 24) & 0x80u;
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return static_cast<uint8_t>(sign | 0x7Fu);  // NaN
  if (ax >= 0x47700000u)  // >= 61440 (inf included): rounds to inf
    return static_cast<uint8_t>(sign | (sat == Fp8Saturation::Finite ? 0x7Bu : 0x7Cu));
  return static_cast<uint8_t>(sign | detail::fp8_round_magnitude(ax, 2u, 15u));
}

MIXTAPE_INLINE float e4m3fn_bits_to_float(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  uint32_t e = (b >> 3) & 0xFu;
  uint32_t m = b & 0x7u;
  if ((b & 0x7Fu) == 0x7Fu) return detail::u32_to_float(sign | 0x7FF00000u);  // the one NaN
  if (e != 0) return detail::u32_to_float(sign | ((e + 120u) << 23) | (m << 20));
  if (m == 0) return detail::u32_to_float(sign);
  e = 121u;  // subnormal m * 2^-9: shift the leading one up to the hidden-bit place
  while (!(m & 0x8u)) {
    m <<= 1;
    --e;
  }
  return detail::u32_to_float(sign | (e << 23) | ((m & 0x7u) << 20));
}

// e5m2 is binary16 with the low 8 bits cut off, so it widens exactly through it.
MIXTAPE_INLINE float e5m2_bits_to_float(uint8_t b) { return half_bits_to_float(static_cast<uint16_t>(b << 8)); }

struct Float8_e4m3fn {
  uint8_t bits;

  Float8_e4m3fn() = default;  // trivial, like float
  MIXTAPE_HD explicit Float8_e4m3fn(float f) : bits(float_to_e4m3fn_bits(f)) {}
  MIXTAPE_HD operator float() const { return e4m3fn_bits_to_float(bits); }
  MIXTAPE_HD static Float8_e4m3fn from_float(float f, Fp8Saturation sat) { return from_bits(float_to_e4m3fn_bits(f, sat)); }

  MIXTAPE_HD static constexpr Float8_e4m3fn from_bits(uint8_t b) {
    Float8_e4m3fn h{};
    h.bits = b;
    return h;
  }
  MIXTAPE_HD static constexpr Float8_e4m3fn max() { return from_bits(0x7E); }         // 448
  MIXTAPE_HD static constexpr Float8_e4m3fn lowest() { return from_bits(0xFE); }      // -448
  MIXTAPE_HD static constexpr Float8_e4m3fn min_normal() { return from_bits(0x08); }  // 2^-6
  MIXTAPE_HD static constexpr Float8_e4m3fn denorm_min() { return from_bits(0x01); }  // 2^-9
  MIXTAPE_HD static constexpr Float8_e4m3fn epsilon() { return from_bits(0x20); }     // 2^-3
  MIXTAPE_HD static constexpr Float8_e4m3fn quiet_nan() { return from_bits(0x7F); }
};

struct Float8_e5m2 {
  uint8_t bits;

  Float8_e5m2() = default;
  MIXTAPE_HD explicit Float8_e5m2(float f) : bits(float_to_e5m2_bits(f)) {}
  MIXTAPE_HD operator float() const { return e5m2_bits_to_float(bits); }
  MIXTAPE_HD static Float8_e5m2 from_float(float f, Fp8Saturation sat) { return from_bits(float_to_e5m2_bits(f, sat)); }

  MIXTAPE_HD static constexpr Float8_e5m2 from_bits(uint8_t b) {
    Float8_e5m2 h{};
    h.bits = b;
    return h;
  }
  MIXTAPE_HD static constexpr Float8_e5m2 max() { return from_bits(0x7B); }         // 57344
  MIXTAPE_HD static constexpr Float8_e5m2 lowest() { return from_bits(0xFB); }      // -57344
  MIXTAPE_HD static constexpr Float8_e5m2 min_normal() { return from_bits(0x04); }  // 2^-14
  MIXTAPE_HD static constexpr Float8_e5m2 denorm_min() { return from_bits(0x01); }  // 2^-16
  MIXTAPE_HD static constexpr Float8_e5m2 epsilon() { return from_bits(0x34); }     // 2^-2
  MIXTAPE_HD static constexpr Float8_e5m2 infinity() { return from_bits(0x7C); }
  MIXTAPE_HD static constexpr Float8_e5m2 quiet_nan() { return from_bits(0x7F); }
};

static_assert(sizeof(Float8_e4m3fn) == 1 && sizeof(Float8_e5m2) == 1, "FP8 types are one byte");
static_assert(std::is_trivially_copyable<Float8_e4m3fn>::value && std::is_trivially_copyable<Float8_e5m2>::value,
              "FP8 types are moved with memcpy");

MIXTAPE_HD constexpr bool isnan(Float8_e4m3fn h) { return (h.bits & 0x7Fu) == 0x7Fu; }
MIXTAPE_HD constexpr bool isinf(Float8_e4m3fn) { return false; }
MIXTAPE_HD constexpr bool isfinite(Float8_e4m3fn h) { return !isnan(h); }
MIXTAPE_HD constexpr bool signbit(Float8_e4m3fn h) { return (h.bits & 0x80u) != 0; }
MIXTAPE_HD constexpr bool isnan(Float8_e5m2 h) { return (h.bits & 0x7Fu) > 0x7Cu; }
MIXTAPE_HD constexpr bool isinf(Float8_e5m2 h) { return (h.bits & 0x7Fu) == 0x7Cu; }
MIXTAPE_HD constexpr bool isfinite(Float8_e5m2 h) { return (h.bits & 0x7Cu) != 0x7Cu; }
MIXTAPE_HD constexpr bool signbit(Float8_e5m2 h) { return (h.bits & 0x80u) != 0; }

}  // namespace mixtape
