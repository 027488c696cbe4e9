// tests/core/test_float8.cpp — the FP8 dtypes (core/float8.h, docs/FP8.md): every pattern
// decoded exactly, PyTorch c10's rounding at the edges, saturation, the bulk converters, and
// the tensor-level plumbing (to(), copy, printing, add/mul, the refusals, safetensors).
// The all-2^32-inputs sweep is bench/exhaustive_convert.cpp (ctest exhaustive_fp8_conversion).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <mixtape/mixtape.h>

#include "common/error_of.h"

namespace mixtape {
namespace {

using testing::error_of;

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// value = (-1)^s * 2^(e - bias) * (1 + m / 2^mbits), or 2^(1 - bias) * m / 2^mbits for e == 0:
// the formula from the bit fields, in double.
double formula(unsigned b, int ebits, int mbits) {
  const int bias = (1 << (ebits - 1)) - 1;
  const unsigned s = b >> 7, e = (b >> mbits) & ((1u << ebits) - 1u), m = b & ((1u << mbits) - 1u);
  const double mag = e == 0 ? std::ldexp(static_cast<double>(m), 1 - bias - mbits)
                            : std::ldexp(static_cast<double>(m + (1u << mbits)), static_cast<int>(e) - bias - mbits);
  return s ? -mag : mag;
}

TEST(Float8, E4m3fnDecodesEveryPatternExactly) {
  for (unsigned b = 0; b < 256; ++b) {
    const float got = e4m3fn_bits_to_float(static_cast<uint8_t>(b));
    if ((b & 0x7F) == 0x7F) {  // the format's only NaN, one per sign; quiet, sign kept
      EXPECT_EQ(bits_of(got), (b & 0x80 ? 0x80000000u : 0u) | 0x7FF00000u) << b;
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), formula(b, 4, 3)) << "pattern " << b;
    EXPECT_EQ(std::signbit(got), (b & 0x80) != 0) << b;
  }
  EXPECT_EQ(static_cast<float>(Float8_e4m3fn::max()), 448.0f);
  EXPECT_EQ(static_cast<float>(Float8_e4m3fn::denorm_min()), std::ldexp(1.0f, -9));
  EXPECT_EQ(static_cast<float>(Float8_e4m3fn::min_normal()), std::ldexp(1.0f, -6));
  EXPECT_EQ(static_cast<float>(Float8_e4m3fn::epsilon()), 0.125f);
}

TEST(Float8, E5m2DecodesEveryPatternExactly) {
  for (unsigned b = 0; b < 256; ++b) {
    const float got = e5m2_bits_to_float(static_cast<uint8_t>(b));
    const uint32_t sign = b & 0x80 ? 0x80000000u : 0u;
    if ((b & 0x7F) == 0x7C) {
      EXPECT_EQ(bits_of(got), sign | 0x7F800000u) << b;
    } else if ((b & 0x7F) > 0x7C) {  // NaN: payload in the top mantissa bits, quiet bit set
      EXPECT_EQ(bits_of(got), sign | 0x7FC00000u | ((b & 3u) << 21)) << b;
    } else {
      EXPECT_EQ(static_cast<double>(got), formula(b, 5, 2)) << "pattern " << b;
      EXPECT_EQ(std::signbit(got), (b & 0x80) != 0) << b;
    }
  }
  EXPECT_EQ(static_cast<float>(Float8_e5m2::max()), 57344.0f);
  EXPECT_EQ(static_cast<float>(Float8_e5m2::denorm_min()), std::ldexp(1.0f, -16));
  EXPECT_TRUE(isinf(Float8_e5m2::infinity()));
}

// Every non-NaN pattern survives FP8 -> f32 -> FP8 in both modes; NaNs come back as sign | 0x7F.
TEST(Float8, EveryPatternRoundTrips) {
  for (unsigned b = 0; b < 256; ++b) {
    const uint8_t p = static_cast<uint8_t>(b);
    for (Fp8Saturation sat : {Fp8Saturation::None, Fp8Saturation::Finite}) {
      // Every e4m3fn pattern, its NaNs included (they are sign | 0x7F), comes back unchanged.
      EXPECT_EQ(float_to_e4m3fn_bits(e4m3fn_bits_to_float(p), sat), p) << b;
      const bool nan5 = (b & 0x7F) > 0x7C;
      const bool inf5 = (b & 0x7F) == 0x7C;
      const uint8_t want5 = nan5 ? static_cast<uint8_t>((b & 0x80) | 0x7F)
                            : (inf5 && sat == Fp8Saturation::Finite) ? static_cast<uint8_t>((b & 0x80) | 0x7B)
                                                                     : p;
      EXPECT_EQ(float_to_e5m2_bits(e5m2_bits_to_float(p), sat), want5) << b;
    }
  }
}

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// The edges of c10's fp8e4m3fn_from_fp32_value (c10/util/Float8_e4m3fn.h): inputs >= 480 (and
// NaN, inf) are NaN with the input's sign; between 448 and 480 the rounding decides: 464 is a
// tie that goes to 448 (even mantissa), anything above rounds to the 0x7F pattern, NaN.
TEST(Float8, E4m3fnMatchesC10AtTheEdges) {
  const auto enc = [](float f) { return float_to_e4m3fn_bits(f); };
  EXPECT_EQ(enc(448.0f), 0x7E);
  EXPECT_EQ(enc(464.0f), 0x7E);
  EXPECT_EQ(enc(std::nextafter(464.0f, kInf)), 0x7F);
  EXPECT_EQ(enc(479.0f), 0x7F);
  EXPECT_EQ(enc(480.0f), 0x7F);
  EXPECT_EQ(enc(-1e30f), 0xFF);
  EXPECT_EQ(enc(kInf), 0x7F);
  EXPECT_EQ(enc(-kInf), 0xFF);
  EXPECT_EQ(enc(kNaN), 0x7F);
  EXPECT_EQ(enc(-kNaN), 0xFF);
  EXPECT_EQ(enc(float_of(0x7F800001u)), 0x7F);  // a signalling NaN too
  // Subnormals, in units of 2^-9; c10 rounds them with an f32 add (RNE), here in integers.
  EXPECT_EQ(enc(std::ldexp(1.0f, -10)), 0x00);                               // tie -> 0 (even)
  EXPECT_EQ(enc(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(enc(std::ldexp(3.0f, -10)), 0x02);                               // tie 1|2 -> 2
  EXPECT_EQ(enc(std::ldexp(15.0f, -10)), 0x08);                              // tie 7|8 -> min normal
  EXPECT_EQ(enc(-0.0f), 0x80);
  EXPECT_EQ(enc(-std::ldexp(1.0f, -12)), 0x80);                              // underflow keeps the sign
  EXPECT_EQ(enc(float_of(0x00000001u)), 0x00);                               // an f32 subnormal
  // Normal ties: 1 + 1/16 is halfway between 1 and 1.125: to 1 (even); 1 + 3/16 -> 1.25.
  EXPECT_EQ(enc(1.0625f), 0x38);
  EXPECT_EQ(enc(1.1875f), 0x3A);
}

// c10's fp8e5m2_from_fp32_value: inputs >= 65536 are inf (NaN stays NaN, 0x7F); 61440 is the
// tie between 57344 (odd mantissa) and 65536, so it rounds to inf.
TEST(Float8, E5m2MatchesC10AtTheEdges) {
  const auto enc = [](float f) { return float_to_e5m2_bits(f); };
  EXPECT_EQ(enc(57344.0f), 0x7B);
  EXPECT_EQ(enc(std::nextafter(61440.0f, 0.0f)), 0x7B);
  EXPECT_EQ(enc(61440.0f), 0x7C);
  EXPECT_EQ(enc(-65536.0f), 0xFC);
  EXPECT_EQ(enc(kInf), 0x7C);
  EXPECT_EQ(enc(kNaN), 0x7F);
  EXPECT_EQ(enc(-kNaN), 0xFF);
  EXPECT_EQ(enc(std::ldexp(1.0f, -17)), 0x00);  // half the smallest subnormal: tie -> 0
  EXPECT_EQ(enc(std::ldexp(3.0f, -17)), 0x02);
  EXPECT_EQ(enc(std::ldexp(1.0f, -14)), 0x04);  // min normal
}

// Fp8Saturation::Finite is cuda_fp8's __NV_SATFINITE: beyond-range values (inf included) clamp
// to +-max, NaN stays NaN, everything else is the ordinary conversion.
TEST(Float8, SaturationClampsToTheLargestFinite) {
  const Fp8Saturation S = Fp8Saturation::Finite;
  EXPECT_EQ(float_to_e4m3fn_bits(1e9f, S), 0x7E);
  EXPECT_EQ(float_to_e4m3fn_bits(-kInf, S), 0xFE);
  EXPECT_EQ(float_to_e4m3fn_bits(std::nextafter(464.0f, kInf), S), 0x7E);
  EXPECT_EQ(float_to_e4m3fn_bits(kNaN, S), 0x7F);
  EXPECT_EQ(float_to_e4m3fn_bits(1.1875f, S), 0x3A);
  EXPECT_EQ(float_to_e5m2_bits(61440.0f, S), 0x7B);
  EXPECT_EQ(float_to_e5m2_bits(-kInf, S), 0xFB);
  EXPECT_EQ(float_to_e5m2_bits(-kNaN, S), 0xFF);
  EXPECT_EQ(Float8_e4m3fn::from_float(500.0f, S).bits, 0x7E);
  EXPECT_EQ(Float8_e4m3fn(500.0f).bits, 0x7F);  // the constructor is to()'s conversion
}

// Inputs that reach every branch, plus random patterns: the bulk converters give the scalar bits,
// with and without a scale, in both modes.
std::vector<float> probe_inputs() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.5f, 448.0f, 464.0f, 480.0f, 57344.0f, 61440.0f, 1e30f, -kInf, kInf,
                          kNaN, -kNaN, float_of(0x7F800001u), std::ldexp(1.0f, -10), std::ldexp(3.0f, -17),
                          float_of(1u), std::ldexp(15.0f, -10)};
  std::mt19937 rng(37);
  for (int i = 0; i < 4099; ++i) v.push_back(float_of(static_cast<uint32_t>(rng())));
  return v;
}

TEST(Float8, BulkConvertersMatchTheScalarFunctions) {
  const std::vector<float> in = probe_inputs();
  const size_t n = in.size();
  std::vector<Float8_e4m3fn> a(n);
  std::vector<Float8_e5m2> b(n);
  for (float scale : {1.0f, 0.25f, 3.0f}) {
    for (Fp8Saturation sat : {Fp8Saturation::None, Fp8Saturation::Finite}) {
      convert_float_to_e4m3fn(in.data(), a.data(), n, {scale, sat});
      convert_float_to_e5m2(in.data(), b.data(), n, {scale, sat});
      for (size_t i = 0; i < n; ++i) {
        const float x = scale == 1.0f ? in[i] : in[i] * scale;
        ASSERT_EQ(a[i].bits, float_to_e4m3fn_bits(x, sat)) << "input 0x" << std::hex << bits_of(in[i]);
        ASSERT_EQ(b[i].bits, float_to_e5m2_bits(x, sat)) << "input 0x" << std::hex << bits_of(in[i]);
      }
    }
  }
  std::vector<Float8_e4m3fn> all4(256);
  std::vector<Float8_e5m2> all5(256);
  for (unsigned i = 0; i < 256; ++i) {
    all4[i] = Float8_e4m3fn::from_bits(static_cast<uint8_t>(i));
    all5[i] = Float8_e5m2::from_bits(static_cast<uint8_t>(i));
  }
  std::vector<float> w4(256), w5(256);
  for (float scale : {1.0f, 0.5f}) {
    convert_e4m3fn_to_float(all4.data(), w4.data(), 256, scale);
    convert_e5m2_to_float(all5.data(), w5.data(), 256, scale);
    for (unsigned i = 0; i < 256; ++i) {
      const float s4 = e4m3fn_bits_to_float(static_cast<uint8_t>(i)), s5 = e5m2_bits_to_float(static_cast<uint8_t>(i));
      EXPECT_EQ(bits_of(w4[i]), bits_of(scale == 1.0f ? s4 : s4 * scale)) << i;
      EXPECT_EQ(bits_of(w5[i]), bits_of(scale == 1.0f ? s5 : s5 * scale)) << i;
    }
  }
}

TEST(Float8, DTypeTraitsAndNames) {
  EXPECT_EQ(element_size(DType::Float8_e4m3fn), 1u);
  EXPECT_EQ(element_size(DType::Float8_e5m2), 1u);
  EXPECT_FALSE(is_floating(DType::Float8_e4m3fn));  // no floating kernels (core/dtype.h says why)
  EXPECT_TRUE(is_float8(DType::Float8_e5m2));
  EXPECT_FALSE(is_reduced_float(DType::Float8_e5m2));
  EXPECT_EQ(dtype_name(DType::Float8_e4m3fn), "Float8_e4m3fn");
  EXPECT_EQ(dtype_name(DType::Float8_e5m2), "Float8_e5m2");
  EXPECT_EQ(dtype_short(DType::Float8_e4m3fn), "f8e4m3fn");
  EXPECT_EQ(dtype_short(DType::Float8_e5m2), "f8e5m2");
  EXPECT_EQ(dtype_v<Float8_e5m2>, DType::Float8_e5m2);
  EXPECT_EQ(promote_types(DType::Float8_e4m3fn, DType::Float8_e4m3fn), DType::Float8_e4m3fn);
  const std::string e = error_of([] { promote_types(DType::Float8_e4m3fn, DType::Float32); });
  EXPECT_NE(e.find("promotion for Float8 types is not supported"), std::string::npos) << e;
  EXPECT_NE(e.find("Float8_e4m3fn and Float32"), std::string::npos) << e;
  EXPECT_NE(error_of([] { promote_types(DType::Float8_e5m2, DType::Float8_e4m3fn); }).find("Float8_e5m2 and Float8_e4m3fn"),
            std::string::npos);
}

// to() uses c10's conversion (NaN beyond range), through the bulk path for contiguous f32 and the
// element loop otherwise; both agree with the scalar function.
TEST(Float8, TensorToAndBackIsTheScalarConversion) {
  const std::vector<double> vals = {0.1, -2.7, 300.0, 470.0, 1e6, -0.0, 5e-4, 60000.0};
  Tensor x = tensor(vals, {2, 4});
  for (DType dt : {DType::Float8_e4m3fn, DType::Float8_e5m2}) {
    Tensor y = x.to(dt);
    Tensor yt = x.t().to(dt).t();  // strided source: the element loop
    Tensor y64 = x.to(DType::Float64).to(dt);  // f64 -> f32 -> fp8, as PyTorch does
    Tensor yc = zeros({4, 2}, TensorOptions(dt)).t();  // copy_ into a strided FP8 destination
    copy_(yc, x);
    EXPECT_EQ(std::memcmp(yc.t().contiguous().data_ptr(), x.t().to(dt).contiguous().data_ptr(), 8), 0);
    ASSERT_EQ(y.dtype(), dt);
    for (int64_t i = 0; i < 8; ++i) {
      const float f = static_cast<float>(vals[static_cast<size_t>(i)]);
      const uint8_t want = dt == DType::Float8_e4m3fn ? float_to_e4m3fn_bits(f) : float_to_e5m2_bits(f);
      const uint8_t got = static_cast<const uint8_t*>(y.data_ptr())[i];
      EXPECT_EQ(got, want) << dtype_name(dt) << " " << vals[static_cast<size_t>(i)];
      EXPECT_EQ(static_cast<const uint8_t*>(yt.contiguous().data_ptr())[i], want);
      EXPECT_EQ(static_cast<const uint8_t*>(y64.data_ptr())[i], want);
      const float back = dt == DType::Float8_e4m3fn ? e4m3fn_bits_to_float(want) : e5m2_bits_to_float(want);
      const double got_back = get_element(y.to(DType::Float32), i);
      if (std::isnan(back))
        EXPECT_TRUE(std::isnan(got_back));
      else
        EXPECT_EQ(got_back, static_cast<double>(back));
      const double via_bf16 = get_element(y.to(DType::BFloat16), i);
      EXPECT_TRUE(via_bf16 == got_back || (std::isnan(via_bf16) && std::isnan(got_back)))
          << "every FP8 value is a BF16 value";
    }
  }
  // e4m3fn -> e5m2 goes through f32: 0.1 -> 0.1015625 (e4m3fn) -> 0.09375 (e5m2).
  EXPECT_EQ(tensor({0.1}).to(DType::Float8_e4m3fn).to(DType::Float8_e5m2).item<float>(), 0.09375f);
}

TEST(Float8, PrintingItemAndFill) {
  Tensor y = tensor({1.5, -448.0, 1000.0}).to(DType::Float8_e4m3fn);
  const std::string s = to_string(y);
  EXPECT_NE(s.find("dtype=f8e4m3fn"), std::string::npos) << s;
  EXPECT_NE(s.find("nan"), std::string::npos) << s;
  EXPECT_EQ(y.describe().substr(0, 8), "f8e4m3fn");
  EXPECT_EQ(y.to_vector<float>()[1], -448.0f);
  Tensor z = zeros({2, 3}, TensorOptions(DType::Float8_e5m2));
  fill_(z, 0.3);
  EXPECT_EQ(z.to_vector<Float8_e5m2>()[5].bits, float_to_e5m2_bits(0.3f));
  EXPECT_EQ(z.to_vector<float>()[0], 0.3125f);
  EXPECT_EQ(tensor({0.3}).to(DType::Float8_e5m2).item<float>(), 0.3125f);
  // Tiny values print in scientific notation, as for the wider floats (not as 0.0000).
  const std::string tiny = to_string(tensor({1.52587890625e-05, 3.0517578125e-05}).to(DType::Float8_e5m2));
  EXPECT_NE(tiny.find("1.5259e-05"), std::string::npos) << tiny;
}

// add and mul on FP8 compute in f32 and round once (the same bits as rounding the f32 result).
TEST(Float8, AddAndMulComputeInFloatAndRoundOnce) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-300.0f, 300.0f);
  std::vector<double> va(64), vb(64);
  for (size_t i = 0; i < 64; ++i) {
    va[i] = u(rng);
    vb[i] = u(rng);
  }
  for (DType dt : {DType::Float8_e4m3fn, DType::Float8_e5m2}) {
    Tensor a = tensor(va, {8, 8}).to(dt), b = tensor(vb, {8, 8}).to(dt);
    Tensor a32 = a.to(DType::Float32), b32 = b.to(DType::Float32);
    const auto same = [dt](const Tensor& got, const Tensor& want32) {
      ASSERT_EQ(got.dtype(), dt);
      Tensor want = want32.to(dt);
      for (int64_t i = 0; i < got.numel(); ++i) {
        const double g = get_element(got, i), w = get_element(want, i);
        EXPECT_TRUE(g == w || (std::isnan(g) && std::isnan(w))) << i << ": " << g << " vs " << w;
      }
    };
    Tensor s = add(a, b);
    EXPECT_EQ(s.dtype(), dt);
    same(s, add(a32, b32));
    same(mul(a, b), mul(a32, b32));
    same(mul(a, 0.1), mul(a32, 0.1));          // the scalar keeps its f32 value
    same(add(a.t(), b), add(a32.t(), b32));    // strided
    Tensor c = a.clone();
    add_(c, b);
    same(c, add(a32, b32));
    mul_(c, 0.5);
    same(c, mul(add(a32, b32).to(dt).to(DType::Float32), 0.5));
    same(full_like(a, 300.0), full_like(a32, 300.0));
  }
}

TEST(Float8, OpsWithoutAnFp8KernelSayWhich) {
  Tensor a = tensor({1.0, 2.0}).to(DType::Float8_e4m3fn);
  Tensor b = tensor({1.0, 2.0}).to(DType::Float8_e5m2);
  std::string e = error_of([&] { exp(a); });
  EXPECT_NE(e.find("exp: no Float8_e4m3fn kernel"), std::string::npos) << e;
  e = error_of([&] { sub(a, a); });
  EXPECT_NE(e.find("sub: no Float8_e4m3fn kernel"), std::string::npos) << e;
  e = error_of([&] { sum(b); });
  EXPECT_NE(e.find("no Float8_e5m2 kernel"), std::string::npos) << e;
  EXPECT_NE(e.find("sum"), std::string::npos) << e;
  // Ops that guard on is_floating refuse FP8 in their own words (false for FP8, core/dtype.h).
  e = error_of([&] { matmul(a.reshape({1, 2}), a.reshape({2, 1})); });
  EXPECT_NE(e.find("matmul: expected floating operands, got f8e4m3fn[1, 2]"), std::string::npos) << e;
  e = error_of([&] { a.requires_grad_(true); });
  EXPECT_NE(e.find("Float8_e4m3fn"), std::string::npos) << e;
  e = error_of([&] { add(a, tensor({1.0, 2.0})); });
  EXPECT_NE(e.find("add: FP8 does not promote"), std::string::npos) << e;
  e = error_of([&] { mul(a, b); });
  EXPECT_NE(e.find("mul: FP8 does not promote"), std::string::npos) << e;
}

TEST(Float8, ScaledCastsSaturateAndScale) {
  Tensor x = tensor({100.0, -1000.0, 1.0, std::nan(""), 1e-4});
  Tensor y = to_float8(x, DType::Float8_e4m3fn, {2.0f, Fp8Saturation::Finite});
  const std::vector<float> got = from_float8(y).to_vector<float>();
  EXPECT_EQ(got[0], 192.0f);   // 200 rounds to 192 (spacing 32 in [128, 256))
  EXPECT_EQ(got[1], -448.0f);  // saturated, not NaN
  EXPECT_EQ(got[2], 2.0f);
  EXPECT_TRUE(std::isnan(got[3]));
  EXPECT_EQ(got[4], 0.0f);     // 2e-4 < 2^-10: flushed by rounding
  EXPECT_TRUE(std::isnan(to_float8(x, DType::Float8_e4m3fn, {1.0f, Fp8Saturation::None}).to_vector<float>()[1]));
  EXPECT_EQ(from_float8(y, 0.5f).to_vector<float>()[0], 96.0f);
  EXPECT_TRUE(std::isinf(to_float8(x * 100.0, DType::Float8_e5m2, {1.0f, Fp8Saturation::None}).to_vector<float>()[1]));
  EXPECT_EQ(to_float8(x * 100.0, DType::Float8_e5m2).to_vector<float>()[1], -57344.0f);  // default: Finite

  std::string e = error_of([&] { to_float8(x, DType::Float8_e4m3fn, {0.0f, Fp8Saturation::Finite}); });
  EXPECT_NE(e.find("to_float8: scale must be finite and > 0, got 0"), std::string::npos) << e;
  e = error_of([&] { to_float8(x, DType::Float16); });
  EXPECT_NE(e.find("Float8_e4m3fn or Float8_e5m2, got Float16"), std::string::npos) << e;
  e = error_of([&] { to_float8(x.to(DType::Int32), DType::Float8_e5m2); });
  EXPECT_NE(e.find("expected an f32, f16 or bf16 tensor"), std::string::npos) << e;
  Tensor w = tensor({1.0}, TensorOptions().with_requires_grad(true));
  e = error_of([&] { to_float8(w, DType::Float8_e5m2); });
  EXPECT_NE(e.find("pass x.detach()"), std::string::npos) << e;
  e = error_of([&] { from_float8(x); });
  EXPECT_NE(e.find("from_float8: expected a Float8_e4m3fn or Float8_e5m2 tensor"), std::string::npos) << e;
}

TEST(Float8, SafetensorsKeepsTheBitsAndNames) {
  const std::string path = ::testing::TempDir() + "fp8.safetensors";
  StateDict sd;
  sd["a"] = tensor({1.0, -448.0, 1e-3, 1000.0}).to(DType::Float8_e4m3fn);
  sd["b"] = tensor({57344.0, 1e9, -2.5}).to(DType::Float8_e5m2);
  save_safetensors(sd, path);
  StateDict back = load_safetensors(path);
  for (const char* k : {"a", "b"}) {
    ASSERT_EQ(back[k].dtype(), sd[k].dtype()) << k;
    EXPECT_EQ(std::memcmp(back[k].data_ptr(), sd[k].data_ptr(), static_cast<size_t>(sd[k].numel())), 0) << k;
  }
  EXPECT_STREQ(safetensors_dtype_name(DType::Float8_e4m3fn), "F8_E4M3");
  EXPECT_STREQ(safetensors_dtype_name(DType::Float8_e5m2), "F8_E5M2");
  std::FILE* f = std::fopen(path.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  std::string header(256, '\0');
  header.resize(std::fread(header.data(), 1, header.size(), f));
  std::fclose(f);
  EXPECT_NE(header.find("\"F8_E4M3\""), std::string::npos);
  EXPECT_NE(header.find("\"F8_E5M2\""), std::string::npos);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace mixtape
