// tests/ops/test_reduced_precision.cpp — 16-bit kernels compute in f32 and round once on store.
// For a pointwise op that means op16(x) == round16(op32(float(x))) bit for bit, which is what
// these tests assert (no tolerance: any double rounding or f16 arithmetic would show up). Every
// pointwise op's own check runs over its declared samples (tests/ops/test_op_samples.cpp,
// SampleRoundsOnce); this file keeps the paths a sample does not name: scalars, long and strided
// rows, matmul, sums, pooling, bit copies.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include <mixtape/mixtape.h>

#include "ops/activation_functors.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/steering.h"

namespace mixtape {
namespace {

bool bit_equal(const Tensor& a, const Tensor& b) {
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.dtype() == cb.dtype() && ca.sizes() == cb.sizes() &&
         std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

class Reduced : public ::testing::TestWithParam<DType> {};

TEST_P(Reduced, ScalarOperandKeepsItsFloatValue) {
  // f16 * 0.1 multiplies by 0.1f (PyTorch's opmath scalar), not by the f16 nearest 0.1.
  DType dt = GetParam();
  Tensor x = randn({64}).to(dt);
  EXPECT_TRUE(bit_equal(x * 0.1, (x.to(DType::Float32) * 0.1).to(dt)));
  EXPECT_EQ((x * 0.1).dtype(), dt);
}

TEST_P(Reduced, MatmulAccumulatesInFloat) {
  DType dt = GetParam();
  // The bit-for-bit contract of the widened path; the native BF16 GEMM's own is
  // tests/ops/test_bf16_gemm_ops.cpp.
  cpu::Override widened(cpu::Bf16GemmPath::Emulated);
  Generator g(13);
  Tensor a = randn({2, 7, 64}, {}, &g).to(dt), b = randn({64, 5}, {}, &g).to(dt);
  Tensor got = matmul(a, b);
  Tensor want = matmul(a.to(DType::Float32), b.to(DType::Float32)).to(dt);
  EXPECT_EQ(got.dtype(), dt);
  EXPECT_TRUE(bit_equal(got, want));
}

TEST_P(Reduced, StridedAndLongRowsRoundOnce) {
  // Rows longer than a conversion block, and strided or broadcast operands, take other paths
  // through the 16-bit kernels than short contiguous rows; the bits must not change.
  DType dt = GetParam();
  Generator g(14);
  Tensor x = (randn({37, 70}, {}, &g) * 3.0).to(dt).transpose(0, 1);  // (70, 37), strided
  Tensor y = (randn({1, 1000}, {}, &g) * 2.0).to(dt);                  // one long row
  EXPECT_TRUE(bit_equal(relu(x), relu(x.to(DType::Float32)).to(dt)));
  EXPECT_TRUE(bit_equal(exp(y), exp(y.to(DType::Float32)).to(dt)));
  EXPECT_TRUE(bit_equal(y * 0.3, (y.to(DType::Float32) * 0.3).to(dt)));
  EXPECT_TRUE(bit_equal(x + x.slice(0, 0, 1), (x.to(DType::Float32) + x.slice(0, 0, 1).to(DType::Float32)).to(dt)));
  Tensor y0 = y.slice(1, 0, 1);  // (1, 1), broadcast over the long row
  EXPECT_TRUE(bit_equal(y - y0, (y.to(DType::Float32) - y0.to(DType::Float32)).to(dt)));
}

// sum walks strided inputs in place; it must give each value the lane (ops/cpu/lane_sum.h) its
// logical position gives it in the contiguous copy, so the accumulation (and its one rounding)
// gives the same bits for every layout.
void expect_layout_independent_sums(DType dt) {
  Generator g(15);
  Tensor nchw = randn({6, 5, 9, 11}, {}, &g).to(dt);
  for (const IntList& dims : {IntList{0, 2, 3}, IntList{1}, IntList{0}, IntList{3}, IntList{}, IntList{1, 3}}) {
    for (bool keep : {false, true}) {
      Tensor want = sum(nchw.contiguous(), dims, keep);
      EXPECT_TRUE(bit_equal(sum(nchw, dims, keep), want)) << shape_str(dims);
      Tensor perm = nchw.permute({2, 0, 3, 1}).contiguous().permute({1, 3, 0, 2});  // same values, other strides
      EXPECT_TRUE(bit_equal(sum(perm, dims, keep), want)) << "permuted, dims " << shape_str(dims);
    }
  }
  Tensor sliced = nchw.slice(2, 1, 9, 2);  // (6, 5, 4, 11), a gap between rows
  EXPECT_TRUE(bit_equal(sum(sliced, {0, 2, 3}), sum(sliced.contiguous(), {0, 2, 3})));
  EXPECT_TRUE(bit_equal(mean(sliced, {1, 3}), mean(sliced.contiguous(), {1, 3})));
}

TEST_P(Reduced, SumOfAnyLayoutEqualsSumOfItsContiguousCopy) { expect_layout_independent_sums(GetParam()); }
TEST(ReducedWide, SumOfAnyLayoutEqualsSumOfItsContiguousCopy) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(dtype_name(dt));
    expect_layout_independent_sums(dt);
  }
}

TEST_P(Reduced, MaxPoolForwardAndBackwardRoundOnce) {
  // 16-bit pooling widens planes to f32: the max is exact and the gradient sums round once.
  DType dt = GetParam();
  Generator g(16);
  Tensor x = randn({3, 4, 13, 12}, {}, &g).to(dt);
  for (const IntList& k : {IntList{2}, IntList{3}}) {
    const IntList stride = k[0] == 3 ? IntList{1} : IntList{};  // 3x3 stride 1: windows overlap, grads add up
    Tensor x16 = x.detach().requires_grad_(true), x32 = x.to(DType::Float32).detach().requires_grad_(true);
    Tensor y16 = max_pool2d(x16, k, stride, {1}), y32 = max_pool2d(x32, k, stride, {1});
    EXPECT_TRUE(bit_equal(y16, y32.to(dt)));
    Tensor gy = randn(y16.sizes(), {}, &g).to(dt);
    y16.backward(gy);
    y32.backward(gy.to(DType::Float32));
    EXPECT_TRUE(bit_equal(x16.grad(), x32.grad().to(dt))) << "kernel " << k[0];
  }
}

TEST(Reduced16, DotOf4096HalfOnesIsExactly4096) {
  // In f16 arithmetic a running sum of ones sticks at 2048 (2048 + 1 rounds back to 2048);
  // f32 accumulation with one final rounding gives 4096 = 0x6C00 (docs/amp-behaviours.md behaviour 36).
  Tensor a = ones({1, 4096}, DType::Float16), b = ones({4096, 1}, DType::Float16);
  EXPECT_EQ(matmul(a, b).item<Half>().bits, 0x6C00);
  EXPECT_EQ(sum(ones({4096}, DType::Float16)).item<Half>().bits, 0x6C00);
  EXPECT_EQ(sum(ones({4096}, DType::BFloat16)).item<float>(), 4096.0f);
  EXPECT_EQ(mean(full({3000}, 0.1, DType::Float16)).item<Half>().bits, Half(0.0999755859375f).bits);
}

// A strided copy (contiguous, clone, to(CPU)) of a 16-bit tensor copies bits: it must not go
// through float, which would quiet signalling NaNs (found by the CUDA emulator's peer-copy test).
TEST(Reduced16, StridedCopiesKeepEveryBitPatternSignallingNaNsIncluded) {
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    // Signalling NaNs (quiet bit clear, payload non-zero) of both signs, a quiet NaN, -0, 1.
    const std::vector<uint16_t> bits = dt == DType::Float16
                                           ? std::vector<uint16_t>{0x7C01, 0xFD55, 0x7E00, 0x8000, 0x3C00, 0x7D00}
                                           : std::vector<uint16_t>{0x7F81, 0xFF9C, 0x7FC0, 0x8000, 0x3F80, 0x7FA0};
    Tensor x = Tensor::empty({2, 3}, TensorOptions(dt));
    std::memcpy(x.data_ptr(), bits.data(), bits.size() * sizeof(uint16_t));
    for (const Tensor& copy : {x.t().contiguous().t().contiguous(), x.t().clone().t().contiguous()}) {
      ASSERT_EQ(copy.nbytes(), bits.size() * sizeof(uint16_t));
      EXPECT_EQ(std::memcmp(copy.data_ptr(), bits.data(), copy.nbytes()), 0);
    }
  }
}

// relu and relu_grad run contiguous BF16 rows on the 16-bit patterns (Relu::bf16_bits): every
// pattern, NaNs of both signs, -0 and subnormals included, gives the bits of the f32 op rounded.
Tensor bf16_from_bits(const std::vector<uint16_t>& bits) {
  Tensor t = Tensor::empty({int64_t(bits.size())}, TensorOptions(DType::BFloat16));
  std::memcpy(t.data_ptr(), bits.data(), bits.size() * sizeof(uint16_t));
  return t;
}
// The op's loops take the bits path (a refactor that lost it would still pass the values below).
static_assert(cpu::has_bf16_bits<fn::Relu, BFloat16, 1> && cpu::has_bf16_bits<fn::ReluGrad, BFloat16, 2>);
TEST(Reduced16, Bf16ReluOfEveryBitPatternIsTheRoundedF32Relu) {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = uint16_t(i);
  const Tensor x = bf16_from_bits(all);
  EXPECT_TRUE(bit_equal(relu(x), relu(x.to(DType::Float32)).to(DType::BFloat16)));
  // relu_grad(g, out): every g against out values of every kind, and every out against such g.
  const std::vector<uint16_t> kinds = {0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x0080, 0x3F80, 0xBF80, 0x7F7F,
                                       0xFF7F, 0x7F80, 0xFF80, 0x7F81, 0xFF81, 0x7FC0, 0xFFC0, 0x7FFF, 0xFFFF};
  for (uint16_t k : kinds) {
    SCOPED_TRACE(k);
    const Tensor other = bf16_from_bits(std::vector<uint16_t>(all.size(), k));
    const Tensor x32 = x.to(DType::Float32), other32 = other.to(DType::Float32);
    EXPECT_TRUE(bit_equal(relu_grad(x, other), relu_grad(x32, other32).to(DType::BFloat16)));
    EXPECT_TRUE(bit_equal(relu_grad(other, x), relu_grad(other32, x32).to(DType::BFloat16)));
  }
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
