// tests/ops/test_reduced_precision.cpp — 16-bit kernels compute in f32 and round once on store.
// For a pointwise op that means op16(x) == round16(op32(float(x))) bit for bit, which is what
// these tests assert (no tolerance: any double rounding or f16 arithmetic would show up).
#include <gtest/gtest.h>

#include <cstring>

#include <mixtape/mixtape.h>

namespace mixtape {
namespace {

bool bit_equal(const Tensor& a, const Tensor& b) {
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.dtype() == cb.dtype() && ca.sizes() == cb.sizes() &&
         std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

class Reduced : public ::testing::TestWithParam<DType> {};

TEST_P(Reduced, UnaryOpsRoundOnce) {
  DType dt = GetParam();
  Generator g(11);
  Tensor x = (randn({257}, {}, &g) * 3.0).to(dt);             // odd length: vector tails too
  Tensor pos = (rand({257}, {}, &g) * 10.0 + 0.01).to(dt);
  auto check = [&](const char* name, auto op, const Tensor& in) {
    Tensor got = op(in);
    Tensor want = op(in.to(DType::Float32)).to(dt);
    EXPECT_EQ(got.dtype(), dt) << name;
    EXPECT_TRUE(bit_equal(got, want)) << name << " in " << dtype_name(dt);
  };
  check("neg", [](const Tensor& t) { return neg(t); }, x);
  check("exp", [](const Tensor& t) { return exp(t); }, x);
  check("log", [](const Tensor& t) { return log(t); }, pos);
  check("sqrt", [](const Tensor& t) { return sqrt(t); }, pos);
  check("abs", [](const Tensor& t) { return abs(t); }, x);
  check("relu", [](const Tensor& t) { return relu(t); }, x);
  check("sigmoid", [](const Tensor& t) { return sigmoid(t); }, x);
  check("tanh", [](const Tensor& t) { return tanh(t); }, x);
  check("pow", [](const Tensor& t) { return pow(t, 1.5); }, pos);
}

TEST_P(Reduced, BinaryOpsBroadcastAndRoundOnce) {
  DType dt = GetParam();
  Generator g(12);
  Tensor a = randn({4, 1, 33}, {}, &g).to(dt), b = (randn({5, 33}, {}, &g) + 3.0).to(dt);
  auto check = [&](const char* name, auto op) {
    Tensor got = op(a, b);
    Tensor want = op(a.to(DType::Float32), b.to(DType::Float32)).to(dt);
    EXPECT_EQ(got.sizes(), (IntList{4, 5, 33})) << name;
    EXPECT_TRUE(bit_equal(got, want)) << name << " in " << dtype_name(dt);
  };
  check("add", [](const Tensor& p, const Tensor& q) { return p + q; });
  check("sub", [](const Tensor& p, const Tensor& q) { return p - q; });
  check("mul", [](const Tensor& p, const Tensor& q) { return p * q; });
  check("div", [](const Tensor& p, const Tensor& q) { return p / q; });
}

TEST_P(Reduced, ScalarOperandKeepsItsFloatValue) {
  // f16 * 0.1 multiplies by 0.1f (PyTorch's opmath scalar), not by the f16 nearest 0.1.
  DType dt = GetParam();
  Tensor x = randn({64}).to(dt);
  EXPECT_TRUE(bit_equal(x * 0.1, (x.to(DType::Float32) * 0.1).to(dt)));
  EXPECT_EQ((x * 0.1).dtype(), dt);
}

TEST_P(Reduced, MatmulAccumulatesInFloat) {
  DType dt = GetParam();
  Generator g(13);
  Tensor a = randn({2, 7, 64}, {}, &g).to(dt), b = randn({64, 5}, {}, &g).to(dt);
  Tensor got = matmul(a, b);
  Tensor want = matmul(a.to(DType::Float32), b.to(DType::Float32)).to(dt);
  EXPECT_EQ(got.dtype(), dt);
  EXPECT_TRUE(bit_equal(got, want));
}

TEST(Reduced16, DotOf4096HalfOnesIsExactly4096) {
  // In f16 arithmetic a running sum of ones sticks at 2048 (2048 + 1 rounds back to 2048);
  // f32 accumulation with one final rounding gives 4096 = 0x6C00 (AMP-REFERENCE #36).
  Tensor a = ones({1, 4096}, DType::Float16), b = ones({4096, 1}, DType::Float16);
  EXPECT_EQ(matmul(a, b).item<Half>().bits, 0x6C00);
  EXPECT_EQ(sum(ones({4096}, DType::Float16)).item<Half>().bits, 0x6C00);
  EXPECT_EQ(sum(ones({4096}, DType::BFloat16)).item<float>(), 4096.0f);
  EXPECT_EQ(mean(full({3000}, 0.1, DType::Float16)).item<Half>().bits, Half(0.0999755859375f).bits);
}

TEST(Reduced16, SumWithDtypeAccumulatesWide) {
  Tensor x = full({10000}, 1.0, DType::Float16);
  Tensor s = sum(x, DType::Float32);
  EXPECT_EQ(s.dtype(), DType::Float32);
  EXPECT_EQ(s.item<float>(), 10000.0f);
  EXPECT_EQ(sum(x).item<float>(), 10000.0f);  // f16 can hold 10000 exactly
  EXPECT_EQ(sum(full({70000}, 1.0, DType::Float16)).item<float>(), INFINITY);  // overflows on store
}

TEST(Reduced16, MixedPrecisionBinaryPromotes) {
  Tensor h = ones({2}, DType::Float16), f = ones({2}, DType::Float32), b = ones({2}, DType::BFloat16);
  EXPECT_EQ((h + f).dtype(), DType::Float32);
  EXPECT_EQ((h + b).dtype(), DType::Float32);
  EXPECT_EQ((b * 2).dtype(), DType::BFloat16);
}

INSTANTIATE_TEST_SUITE_P(Float16AndBFloat16, Reduced, ::testing::Values(DType::Float16, DType::BFloat16),
                         [](const auto& info) { return std::string(dtype_short(info.param)); });

}  // namespace
}  // namespace mixtape
