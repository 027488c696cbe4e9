// amp/tensor_stats.h — one tensor's numbers as a low-precision format would see them: amax,
// smallest nonzero magnitude, dynamic range in binades, and the fraction of its elements that
// would overflow or flush to zero if cast to FP16, BF16, E4M3 (e4m3fn) or E5M2 at a given scale.
// Transformer Engine's LogTensorStats is the model; amp::TensorStatsLogger (tensor_stats_logger.h)
// collects these per layer over training.
//
// Invariant: every decision is bit-exact and is the one the cast itself makes. A value x is scaled
// as an FP8 recipe's f32 scaled cast does, v = fl32(x * fl32(scale)), and v is converted with
// mixtape's own round-to-nearest-even conversions (core/half.h, core/bfloat16.h, core/float8.h,
// the non-saturating mode that to() uses):
//   overflow  x is finite and the conversion gives inf (FP16, BF16, E5M2) or NaN (e4m3fn, which
//             has no inf); a saturating (SATFINITE) cast would clamp these same values to +-max.
//   flushed   x is nonzero and finite and the conversion gives +-0: |v| <= half the smallest
//             subnormal (the tie goes to the even 0). Subnormals are representable: a value that
//             rounds to a subnormal is kept, not flushed (they lose precision, not existence).
// Exact zeros and non-finite inputs are counted apart (zeros, nonfinite), never as either fate.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace mixtape::amp {

enum class StatFormat : uint8_t { Float16, BFloat16, E4M3, E5M2 };
constexpr int kNumStatFormats = 4;
constexpr StatFormat kStatFormats[kNumStatFormats] = {StatFormat::Float16, StatFormat::BFloat16, StatFormat::E4M3,
                                                      StatFormat::E5M2};
const char* stat_format_name(StatFormat f);  // "fp16", "bf16", "e4m3", "e5m2"
double stat_format_max(StatFormat f);        // the largest finite value: 65504, ~3.39e38, 448, 57344
double stat_format_denorm_min(StatFormat f);  // the smallest subnormal: 2^-24, 2^-133, 2^-9, 2^-16

// What casting the already scaled value `v` to `f` does to it.
enum class CastFate : uint8_t { ExactZero, Kept, Flushed, Overflow, NonFiniteIn };
CastFate cast_fate(float v, StatFormat f);
// v = fl32(x * fl32(scale)), the value a scaled cast converts.
float scaled_value(double x, double scale);

struct TensorStat {
  int64_t numel = 0;
  int64_t zeros = 0;      // exact zeros
  int64_t nonfinite = 0;  // infs and NaNs already in the tensor
  double amax = 0;         // largest finite |x| (0 when there is none)
  double min_nonzero = 0;  // smallest nonzero finite |x| (0 when there is none)
  double scale = 1;        // the scale the fates were evaluated at
  int64_t overflow[kNumStatFormats] = {};
  int64_t flushed[kNumStatFormats] = {};

  // log2(amax / min_nonzero): how many binades the nonzero values span (0 with none).
  double binades() const;
  // Fractions of all the tensor's elements (as TE's underflows%), 0 for an empty tensor.
  double overflow_frac(StatFormat f) const;
  double flushed_frac(StatFormat f) const;
};

// The statistics of `t` (any floating dtype, any device: a device tensor is read through a host
// copy) with fates evaluated at `scale` (positive and finite).
TensorStat tensor_stat(const Tensor& t, double scale = 1.0);

}  // namespace mixtape::amp
