// amp/fp8_cast_table.h — the recipes' saturating float -> FP8 cast (core/float8.h with
// Fp8Saturation::Finite) by table lookup, for the casts of every FP8 GEMM operand.
// Invariant: cast(v) == float_to_e4m3fn_bits(v, Finite) (or the e5m2 one) for every float v.
// Why a table is exact: the result depends on the float's top 16 bits (sign, exponent, the 7
// high mantissa bits) and on whether any of its low 16 bits is set. Both formats drop at least 20
// mantissa bits, so their rounding bit is among the top 16 and the low 16 only ever count as
// "sticky"; and a float with a zero exponent rounds to 0 either way, an all-ones exponent is inf
// (low bits 0) or NaN (not). So two 2^16-entry tables per format, for "low bits zero" and "low
// bits set", hold every answer; they are built once from the scalar function itself.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"

namespace mixtape::amp {

class Fp8CastTable {
 public:
  // The table of Float8_e4m3fn or Float8_e5m2 (built at the first call, thread-safe).
  static const Fp8CastTable& of(DType fp8);

  uint8_t operator()(float v) const {
    uint32_t b;
    std::memcpy(&b, &v, sizeof b);
    return ((b & 0xFFFFu) ? low_set_ : low_zero_)[b >> 16];
  }

 private:
  explicit Fp8CastTable(DType fp8);
  std::vector<uint8_t> low_zero_, low_set_;
};

}  // namespace mixtape::amp
