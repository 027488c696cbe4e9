// amp/fp8_cast_table.cpp — see amp/fp8_cast_table.h.
#include "amp/fp8_cast_table.h"

#include "core/error.h"

namespace mixtape::amp {

Fp8CastTable::Fp8CastTable(DType fp8) : low_zero_(1u << 16), low_set_(1u << 16) {
  const bool e4m3 = fp8 == DType::Float8_e4m3fn;
  for (uint32_t hi = 0; hi < (1u << 16); ++hi)
    for (uint32_t low : {0u, 1u}) {
      const uint32_t bits = hi << 16 | low;
      float v;
      std::memcpy(&v, &bits, sizeof v);
      const uint8_t q = e4m3 ? float_to_e4m3fn_bits(v, Fp8Saturation::Finite) : float_to_e5m2_bits(v, Fp8Saturation::Finite);
      (low ? low_set_ : low_zero_)[hi] = q;
    }
}

const Fp8CastTable& Fp8CastTable::of(DType fp8) {
  MT_CHECK(is_float8(fp8), "Fp8CastTable: expected Float8_e4m3fn or Float8_e5m2, got ", dtype_name(fp8));
  static const Fp8CastTable e4m3(DType::Float8_e4m3fn), e5m2(DType::Float8_e5m2);
  return fp8 == DType::Float8_e4m3fn ? e4m3 : e5m2;
}

}  // namespace mixtape::amp
