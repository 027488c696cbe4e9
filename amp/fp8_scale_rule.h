// amp/fp8_scale_rule.h — the per-tensor scale rule shared by the CPU recipes (amp::scale_from_amax)
// and the device-side delayed-scaling update (amp/cuda/fp8_delayed_scaling.cu), so both give the
// same bits. C++17, usable in device code.
//   s = scaled_max / amax (one f32 division, correctly rounded on both sides), where scaled_max
//   = fp8_max * 2^-margin is formed by the caller on the host; an amax that is 0, negative, NaN
//   or inf keeps `fallback`; s is clamped to [FLT_MIN, FLT_MAX] (TE's value_for_inf), and
//   power_of_2 drops its mantissa (the power of two at or below s).
#pragma once
#include <cfloat>

#include "core/half.h"  // detail::float_to_u32 / u32_to_float
#include "core/macros.h"

namespace mixtape::amp {

MIXTAPE_INLINE float fp8_scale_from_scaled_max(float amax, float scaled_max, bool power_of_2, float fallback) {
  if (!(amax > 0.0f) || !(amax <= FLT_MAX)) return fallback;  // 0, negative, NaN or inf
  float s = scaled_max / amax;
  if (!(s <= FLT_MAX)) s = FLT_MAX;  // inf (or scaled_max inf)
  if (s < FLT_MIN) s = FLT_MIN;      // keeps the scale and its reciprocal finite and positive
  if (power_of_2) s = ::mixtape::detail::u32_to_float(::mixtape::detail::float_to_u32(s) & 0xFF800000u);
  return s;
}

}  // namespace mixtape::amp
