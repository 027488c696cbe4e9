// amp/tensor_stats.cpp — see amp/tensor_stats.h.
#include "amp/tensor_stats.h"

#include <algorithm>
#include <cmath>

#include "core/bfloat16.h"
#include "core/error.h"
#include "core/float8.h"
#include "core/half.h"

namespace mixtape::amp {

const char* stat_format_name(StatFormat f) {
  switch (f) {
    case StatFormat::Float16: return "fp16";
    case StatFormat::BFloat16: return "bf16";
    case StatFormat::E4M3: return "e4m3";
    case StatFormat::E5M2: return "e5m2";
  }
  return "?";
}

double stat_format_max(StatFormat f) {
  switch (f) {
    case StatFormat::Float16: return static_cast<float>(Half::max());
    case StatFormat::BFloat16: return bfloat16_bits_to_float(0x7F7Fu);
    case StatFormat::E4M3: return e4m3fn_bits_to_float(0x7Eu);
    case StatFormat::E5M2: return e5m2_bits_to_float(0x7Bu);
  }
  return 0;
}

double stat_format_denorm_min(StatFormat f) {
  switch (f) {
    case StatFormat::Float16: return std::ldexp(1.0, -24);
    case StatFormat::BFloat16: return std::ldexp(1.0, -133);
    case StatFormat::E4M3: return std::ldexp(1.0, -9);
    case StatFormat::E5M2: return std::ldexp(1.0, -16);
  }
  return 0;
}

float scaled_value(double x, double scale) {
  // Two floats' product is exact in double (48 significant bits), so rounding it once to float
  // gives exactly the f32 multiply a scaled cast kernel does.
  return static_cast<float>(static_cast<double>(static_cast<float>(x)) *
                            static_cast<double>(static_cast<float>(scale)));
}

CastFate cast_fate(float v, StatFormat f) {
  if (!std::isfinite(v)) return std::isnan(v) ? CastFate::NonFiniteIn : CastFate::Overflow;
  if (v == 0.0f) return CastFate::ExactZero;
  bool overflow = false, zero = false;
  switch (f) {
    case StatFormat::Float16: {
      const uint16_t b = Half(v).bits & 0x7FFFu;
      overflow = b == 0x7C00u;
      zero = b == 0;
      break;
    }
    case StatFormat::BFloat16: {
      const uint16_t b = float_to_bfloat16_bits(v) & 0x7FFFu;
      overflow = b == 0x7F80u;
      zero = b == 0;
      break;
    }
    case StatFormat::E4M3: {
      const uint8_t b = float_to_e4m3fn_bits(v) & 0x7Fu;
      overflow = b == 0x7Fu;  // e4m3fn's only non-finite pattern: NaN
      zero = b == 0;
      break;
    }
    case StatFormat::E5M2: {
      const uint8_t b = float_to_e5m2_bits(v) & 0x7Fu;
      overflow = b == 0x7Cu;
      zero = b == 0;
      break;
    }
  }
  return overflow ? CastFate::Overflow : zero ? CastFate::Flushed : CastFate::Kept;
}

double TensorStat::binades() const { return min_nonzero > 0 ? std::log2(amax / min_nonzero) : 0.0; }
double TensorStat::overflow_frac(StatFormat f) const {
  return numel ? static_cast<double>(overflow[static_cast<int>(f)]) / static_cast<double>(numel) : 0.0;
}
double TensorStat::flushed_frac(StatFormat f) const {
  return numel ? static_cast<double>(flushed[static_cast<int>(f)]) / static_cast<double>(numel) : 0.0;
}

TensorStat tensor_stat(const Tensor& t, double scale) {
  MT_CHECK(t.defined(), "tensor_stat: the tensor is undefined");
  MT_CHECK(t.is_floating_point() || is_float8(t.dtype()), "tensor_stat: expected a floating tensor, got ",
           t.describe());
  MT_CHECK(scale > 0 && std::isfinite(scale), "tensor_stat: scale must be positive and finite, got ", scale);
  TensorStat s;
  s.numel = t.numel();
  s.scale = scale;
  s.min_nonzero = INFINITY;
  for (double x : t.detach().to_vector<double>()) {
    if (!std::isfinite(x)) {
      ++s.nonfinite;
      continue;
    }
    if (x == 0.0) {
      ++s.zeros;
      continue;
    }
    const double a = std::fabs(x);
    s.amax = std::max(s.amax, a);
    s.min_nonzero = std::min(s.min_nonzero, a);
    const float v = scaled_value(x, scale);
    for (int i = 0; i < kNumStatFormats; ++i) {
      const CastFate fate = v == 0.0f ? CastFate::Flushed : cast_fate(v, kStatFormats[i]);
      if (fate == CastFate::Overflow) ++s.overflow[i];
      if (fate == CastFate::Flushed) ++s.flushed[i];
    }
  }
  if (!std::isfinite(s.min_nonzero)) s.min_nonzero = 0;
  return s;
}

}  // namespace mixtape::amp
