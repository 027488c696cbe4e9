// amp/fp8_cast_table.h — the recipes' saturating float -> FP8 cast (core/float8.h with
// Fp8Saturation::Finite) by table lookup, for the casts of every FP8 GEMM operand.
// Invariant: cast(v) == float_to_e4m3fn_bits(v, Finite) (or the e5m2 one) for every float v.
// Why a table is exact: the result depends on the float's top 16 bits (sign, exponent, the 7
// high mantissa bits) and on whether any of its low 16 bits is set. Both formats drop at least 20
// mantissa bits, so their rounding bit is among the top 16 and the low 16 only ever count as
// "sticky"; and a float with a zero exponent rounds to 0 either way, an all-ones exponent is inf
// (low bits 0) or NaN (not). So two 2^16-entry tables per format, for "low bits zero" and "low
// bits set", hold every answer; they are built once from the scalar function itself. They are
// stored as one array, "low bits set" second, so the bulk cast gathers from it 16 values at a time
// (AVX-512 where the CPU has it): the same entries, so the same bits as the scalar lookup.
// The arithmetic cast of the widening forms is amp/fp8_cast_avx512.h's, shared with the MX kernels.
#pragma once
#include <cstdint>
#include <array>
#include <cstring>
#include <vector>

#include "core/bfloat16.h"
#include "core/dtype.h"

namespace mixtape::amp {

// The other way, exact: dst[i] = table[src[i]], table the 256 BF16 patterns of an FP8 format
// (fp8_to_bf16_table). On AVX-512, 32 codes a step from the table's first 128 entries (two 64-entry
// word permutes) with the code's top bit moved to BF16's sign: every FP8 code c >= 128 is code
// c - 128 negated. That is checked on the table given (else the scalar loop runs), so the bits are
// the table's either way.
void widen_fp8_codes(const std::array<BFloat16, 256>& table, const uint8_t* src, BFloat16* dst, int64_t n);

class Fp8CastTable {
 public:
  // The table of Float8_e4m3fn or Float8_e5m2 (built at the first call, thread-safe).
  static const Fp8CastTable& of(DType fp8);

  uint8_t operator()(float v) const {
    uint32_t b;
    std::memcpy(&b, &v, sizeof b);
    return table_[(b >> 16) | ((b & 0xFFFFu) ? 0x10000u : 0u)];
  }

  // dst[i] = (*this)(src[i] * scale) for i < n (the product an f32 multiply, as written); returns
  // max |src[i]| over the same values (NaNs dropped, 0 for none), read in the same pass.
  float cast_scaled(const float* src, float scale, uint8_t* dst, int64_t n) const;
  // The same, and wide[i] = the BF16 of dst[i] (exact); dst may be null (only wide is written).
  // With AVX-512 in one pass of arithmetic, |v| first clamped to the format's largest finite value
  // (SATFINITE): with codes, round to nearest even on the float's bits at the format's mantissa
  // width (normals) or |v| times the subnormal quantum's inverse to an integer (subnormals);
  // without, one FP add and subtract of a power of two whose ulp is the format's quantum at |v|.
  // Vectors holding a NaN take the table. Its bits are the table's:
  // tests/amp/test_fp8_kernels.cpp checks every high half with several low halves, both ways.
  // lanes, when given (16 floats): lanes[i % 16] += src[i] for i < n in order (a row of a channel's
  // FP32 sum, read in the same pass; conv2d's bias gradient).
  float cast_scaled_widened(const float* src, float scale, uint8_t* dst, BFloat16* wide, int64_t n,
                            float* lanes = nullptr) const;
  // The same from BF16 values, read as they are (each is a float; no f32 copy). Bits: the f32 form's.
  float cast_scaled_widened(const BFloat16* src, float scale, uint8_t* dst, BFloat16* wide, int64_t n,
                            float* lanes = nullptr) const;
  // The same cast and widening with one scale per value, scales[i] (MX blocks); no amax. Its bits
  // are the table's: the vector form is cast_scaled_widened's with the scale loaded per lane.
  // pow2s, when given: wide[i] is the widening times pow2s[i] (the block's 2^e, applied in the same
  // pass), rounded by truncation to BF16: exact, and so mx_widen's value, only where every product
  // is a normal BF16 number (mx_block.cpp's `exact` blocks; the caller's to ensure).
  // BF16 sources are read as they are (no f32 copy); the bits are the f32 form's.
  void cast_lanes_widened(const float* src, const float* scales, uint8_t* dst, BFloat16* wide, int64_t n,
                          const float* pow2s = nullptr) const;
  void cast_lanes_widened(const BFloat16* src, const float* scales, uint8_t* dst, BFloat16* wide, int64_t n,
                          const float* pow2s = nullptr) const;
  // One MX block (contiguous values under one scale): cast_lanes_widened with every scales[i] ==
  // scale and every pow2s[i] == pow2, the same bits, without the per-value arrays.
  void cast_block_widened(const float* src, float scale, float pow2, uint8_t* dst, BFloat16* wide, int64_t n) const;
  void cast_block_widened(const BFloat16* src, float scale, float pow2, uint8_t* dst, BFloat16* wide,
                          int64_t n) const;

 private:
  explicit Fp8CastTable(DType fp8);
  template <typename S>
  void cast_lanes_widened_as(const S* src, const float* scales, const float* pow2s, uint8_t* dst, BFloat16* wide,
                             int64_t n) const;
  template <typename S>
  void cast_block_widened_as(const S* src, float scale, float pow2, uint8_t* dst, BFloat16* wide, int64_t n) const;
  bool e4m3_;
  std::array<BFloat16, 256> widen_;
  // [hi]: low 16 bits zero, [0x10000 + hi]: set; 3 bytes of padding after (a gather reads 4).
  std::vector<uint8_t> table_;
};

}  // namespace mixtape::amp
