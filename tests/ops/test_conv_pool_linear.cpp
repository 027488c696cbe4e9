// tests/ops/test_conv_pool_linear.cpp — conv2d, pooling and linear beyond their declared samples
// (the ops' own gradchecks, in ops/conv.cpp, ops/linear.cpp, ops/max_pool.cpp, ops/avg_pool.cpp):
// the SmallCNN chain's gradcheck, 16-bit round-once checks, hand-checked semantics (padding =
// -inf, divisors, NaN) and bad-input errors.
// Values against PyTorch live in test_conv_pool_linear_vs_torch.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>

#include "leaf.h"
#include "ops/conv.h"
#include "ops/cpu/conv_implicit_gemm.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/steering.h"
#include "ops/linear.h"
#include "ops/pooling.h"

namespace mixtape::testing {
namespace {

// ---- the SmallCNN path, end to end: conv -> relu -> pool -> conv -> pool -> linear ----
TEST(Gradcheck, SmallCnnChain) {
  const TensorList in{leaf({2, 1, 8, 8}), leaf({3, 1, 3, 3}, -1, 1, 2), leaf({3}, -1, 1, 3),
                      leaf({4, 3, 3, 3}, -1, 1, 4), leaf({2, 16}, -1, 1, 5), leaf({2}, -1, 1, 6)};
  const auto r = autograd::gradcheck(
      [](const TensorList& x) {
        Tensor h = max_pool2d(tanh(conv2d(x[0], x[1], x[2], {1}, {1})), {2});
        h = avg_pool2d(conv2d(h, x[3], Tensor(), {1}, {1}), {2});
        return TensorList{linear(h.flatten(1), x[4], x[5])};
      },
      in);
  EXPECT_TRUE(r.ok) << r.report;
}

// ---- 16-bit: the result is the f32 computation on the widened inputs, rounded once ----
bool bit_equal(const Tensor& a, const Tensor& b) {
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.dtype() == cb.dtype() && ca.sizes() == cb.sizes() &&
         std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

class ConvPoolLinear16 : public ::testing::TestWithParam<DType> {
 protected:
  // Random values, exactly representable in the 16-bit dtype.
  Tensor r16(const IntList& sizes, uint64_t seed) {
    Generator g(seed);
    return randn(sizes, {}, &g).to(GetParam());
  }
  Tensor f32(const Tensor& t) { return t.defined() ? t.to(DType::Float32) : t; }
  void expect_round_once(const std::string& what, const Tensor& got, const Tensor& want32) {
    EXPECT_EQ(got.dtype(), GetParam()) << what;
    EXPECT_TRUE(bit_equal(got, want32.to(GetParam()))) << what << " in " << dtype_name(GetParam());
  }
};

TEST_P(ConvPoolLinear16, Conv2dAndGradientOps) {
  // The bit-for-bit contract of the widened path; the native BF16 GEMM's own is
  // tests/ops/test_bf16_gemm_ops.cpp.
  cpu::Override widened(cpu::Bf16GemmPath::Emulated);
  struct Cfg {
    const char* name;
    IntList x, w;
    bool bias;
    IntList stride, padding, dilation;
    int64_t groups;
  };
  const Cfg cfgs[] = {
      {"basic", {2, 3, 6, 6}, {4, 3, 3, 3}, true, {1, 1}, {0, 0}, {1, 1}, 1},
      {"stride-padding", {2, 2, 7, 8}, {3, 2, 3, 2}, true, {2, 1}, {1, 2}, {1, 1}, 1},
      {"dilation-groups", {2, 4, 9, 9}, {6, 2, 3, 3}, false, {1, 1}, {2, 1}, {2, 3}, 2},
      {"1x1", {2, 8, 5, 5}, {4, 8, 1, 1}, true, {1, 1}, {0, 0}, {1, 1}, 1},
      // large enough for the batch-parallel path (N K L >= cpu::kParallelGrain)
      {"parallel", {16, 8, 10, 10}, {16, 8, 3, 3}, true, {1, 1}, {1, 1}, {1, 1}, 1},
      // O <= C with unit strides: the input gradient runs as a forward conv of gy
      {"in-grad-as-conv", {3, 8, 7, 7}, {8, 8, 3, 3}, true, {1, 1}, {1, 1}, {1, 1}, 1},
      {"in-grad-as-conv-groups-dilation", {2, 6, 9, 8}, {4, 3, 3, 2}, false, {1, 1}, {2, 0}, {2, 3}, 2},
  };
  uint64_t seed = 100;
  for (const Cfg& c : cfgs) {
    Tensor x = r16(c.x, seed++), w = r16(c.w, seed++), b = c.bias ? r16({c.w[0]}, seed++) : Tensor();
    Tensor y = conv2d(x, w, b, c.stride, c.padding, c.dilation, c.groups);
    expect_round_once(std::string("conv2d/") + c.name, y,
                      conv2d(f32(x), f32(w), f32(b), c.stride, c.padding, c.dilation, c.groups));
    Tensor g = r16(y.sizes(), seed++);
    expect_round_once(std::string("conv2d_input_grad/") + c.name,
                      conv2d_input_grad(g, w, c.x, c.stride, c.padding, c.dilation, c.groups),
                      conv2d_input_grad(f32(g), f32(w), c.x, c.stride, c.padding, c.dilation, c.groups));
    expect_round_once(std::string("conv2d_weight_grad/") + c.name,
                      conv2d_weight_grad(x, g, c.w, c.stride, c.padding, c.dilation, c.groups),
                      conv2d_weight_grad(f32(x), f32(g), c.w, c.stride, c.padding, c.dilation, c.groups));
  }
}

TEST_P(ConvPoolLinear16, Linear) {
  // The bit-for-bit contract of the widened path; the native BF16 GEMM's own is
  // tests/ops/test_bf16_gemm_ops.cpp.
  cpu::Override widened(cpu::Bf16GemmPath::Emulated);
  const IntList xs[] = {{7}, {5, 7}, {2, 3, 7}};
  uint64_t seed = 200;
  for (const IntList& s : xs) {
    Tensor x = r16(s, seed++), w = r16({6, 7}, seed++), b = r16({6}, seed++);
    expect_round_once("linear " + shape_str(s), linear(x, w, b), linear(f32(x), f32(w), f32(b)));
    expect_round_once("linear no bias " + shape_str(s), linear(x, w), linear(f32(x), f32(w)));
  }
  Tensor x = r16({7, 5}, seed++), w = r16({7, 6}, seed++);  // transposed operands
  expect_round_once("linear transposed", linear(x.t(), w.t()), linear(f32(x).t(), f32(w).t()));
}

TEST_P(ConvPoolLinear16, PoolingForwardAndBackward) {
  Tensor x = r16({2, 3, 9, 8}, 300), x32 = f32(x);
  auto check = [&](const std::string& name, const std::function<Tensor(const Tensor&)>& f) {
    expect_round_once(name, f(x), f(x32));
  };
  check("max_pool2d", [](const Tensor& t) { return max_pool2d(t, {3, 2}, {2, 3}, {1, 1}, {2, 1}, true); });
  check("avg_pool2d include", [](const Tensor& t) { return avg_pool2d(t, {3}, {2}, {1}, true, true); });
  check("avg_pool2d exclude", [](const Tensor& t) { return avg_pool2d(t, {3}, {2}, {1}, true, false); });
  check("adaptive_avg_pool2d", [](const Tensor& t) { return adaptive_avg_pool2d(t, {4, 3}); });

  auto [y, idx] = max_pool2d_with_indices(x, {3}, {1}, {1});  // overlapping: gradients accumulate
  Tensor g = r16(y.sizes(), 301);
  const IntList in = x.sizes();
  expect_round_once("max_pool2d_backward", max_pool2d_backward(g, idx, in), max_pool2d_backward(f32(g), idx, in));
  Tensor ga = r16(avg_pool2d(x, {3}, {1}, {1}).sizes(), 302);
  expect_round_once("avg_pool2d_backward", avg_pool2d_backward(ga, in, {3}, {1}, {1}),
                    avg_pool2d_backward(f32(ga), in, {3}, {1}, {1}));
  Tensor gd = r16({2, 3, 4, 3}, 303);
  expect_round_once("adaptive_avg_pool2d_backward", adaptive_avg_pool2d_backward(gd, in),
                    adaptive_avg_pool2d_backward(f32(gd), in));
}

INSTANTIATE_TEST_SUITE_P(Float16AndBFloat16, ConvPoolLinear16, ::testing::Values(DType::Float16, DType::BFloat16),
                         [](const auto& info) { return std::string(dtype_short(info.param)); });

TEST(ConvPoolLinear, SixteenBitAccumulatesInFloat) {
  // 4608 = 512 channels x 3 x 3 products of ones: an f16 running sum would stick at 2048.
  Tensor y = conv2d(ones({1, 512, 3, 3}, DType::Float16), ones({1, 512, 3, 3}, DType::Float16));
  EXPECT_EQ(y.item<float>(), 4608.0f);
  EXPECT_EQ(linear(ones({4096}, DType::Float16), ones({1, 4096}, DType::Float16)).item<float>(), 4096.0f);
  EXPECT_EQ(adaptive_avg_pool2d(full({1, 1, 64, 64}, 1.0, DType::BFloat16), {1}).item<float>(), 1.0f);
}

// ---- semantics checked by hand ----
TEST(ConvPoolLinear, MaxPoolPaddingIsMinusInfinity) {
  Tensor x = full({1, 1, 3, 3}, -5.0);
  Tensor y = max_pool2d(x, {3}, {1}, {1});
  for (float v : y.to_vector<float>()) EXPECT_EQ(v, -5.0f);  // never the 0 of the padding
}

TEST(ConvPoolLinear, MaxPoolIndicesFirstMaxAndNaN) {
  Tensor x = tensor({1.0, 3.0, 3.0, 2.0}, {1, 1, 2, 2});
  auto [y, idx] = max_pool2d_with_indices(x, {2});
  EXPECT_EQ(y.item<float>(), 3.0f);
  EXPECT_EQ(idx.item<int64_t>(), 1);  // the first of the tied maxima, h * W + w
  Tensor n = tensor({1.0, NAN, 5.0, 2.0}, {1, 1, 2, 2});
  auto [yn, in] = max_pool2d_with_indices(n, {2});
  EXPECT_TRUE(std::isnan(yn.item<float>()));
  EXPECT_EQ(in.item<int64_t>(), 1);
}

TEST(ConvPoolLinear, MaxPool2x2MatchesAWindowScanWithTiesNaNAndInf) {
  // The 2x2 stride-2 fast paths (SSE2: 4 windows at a time; AVX-512: 16, the rest masked) against
  // a plain scan: ties keep the first tap in row-major order, a NaN takes over (a later NaN too,
  // as PyTorch), -inf is an ordinary value; an odd H or W drops the last row or column. Many
  // ties: values are small integers. Widths 10, 37 and 70: 5, 18 and 35 windows per row (one
  // partial chunk; a full one and a partial; two full and a partial). In f32 and in BF16 (its own
  // AVX-512 kernels, widening in registers; the values are exact in BF16).
  for (const DType dt : {DType::Float32, DType::BFloat16})
  for (const int64_t W : {10, 37, 70}) {
    SCOPED_TRACE("W = " + std::to_string(W) + " in " + std::string(dtype_name(dt)));
    const int64_t H = 9, OH = H / 2, OW = W / 2, planes = 6;
    Generator g(21);
    std::vector<float> v = (rand({2, 3, H, W}, {}, &g) * 4.0).to_vector<float>();
    for (float& e : v) e = std::floor(e);
    for (size_t k : {7, 40, 41, 150, 151}) v[k] = NAN;
    for (size_t k : {100, 101, 110, 111, 300, 301, 302, 303}) v[k] = -INFINITY;
    Tensor x = tensor(std::vector<double>(v.begin(), v.end()), {2, 3, H, W}).to(dt);
    auto [y, idx] = max_pool2d_with_indices(x, {2});
    ASSERT_EQ(y.sizes(), (IntList{2, 3, OH, OW}));
    ASSERT_EQ(y.dtype(), dt);
    std::vector<float> got = y.to(DType::Float32).to_vector<float>();
    std::vector<int64_t> got_i = idx.to_vector<int64_t>();
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          float best = -INFINITY;
          int64_t bi = 2 * oh * W + 2 * ow;
          for (int64_t h = 2 * oh; h < 2 * oh + 2; ++h)
            for (int64_t w = 2 * ow; w < 2 * ow + 2; ++w) {
              float e = v[static_cast<size_t>(p * H * W + h * W + w)];
              if (e > best || std::isnan(e)) best = e, bi = h * W + w;
            }
          size_t o = static_cast<size_t>(p * OH * OW + oh * OW + ow);
          ASSERT_EQ(got_i[o], bi) << "plane " << p << " window " << oh << "," << ow;
          if (std::isnan(best))
            ASSERT_TRUE(std::isnan(got[o]));
          else
            ASSERT_EQ(got[o], best);
        }
    // The backward (f32, BF16: the fused AVX-512 pass where the CPU has it) equals the f64
    // backward (the generic argmax + scatter into zeros) on the same values, bit for bit: each
    // window's gradient lands on its argmax as 0 + g (so -0 becomes +0), everything else, the
    // dropped last row/column included, is +0.
    Tensor gout64 = randn({2, 3, OH, OW}, DType::Float64, &g).to(dt).to(DType::Float64);
    gout64.data_ptr<double>()[0] = -0.0;
    gout64.data_ptr<double>()[3] = -0.0;
    gout64.data_ptr<double>()[5] = NAN;
    Tensor x64 = x.to(DType::Float64).requires_grad_(), xt = x.detach().requires_grad_();
    max_pool2d(x64, {2}).backward(gout64);
    max_pool2d(xt, {2}).backward(gout64.to(dt));
    EXPECT_TRUE(bit_equal(xt.grad(), x64.grad().to(dt)));
  }
}

// A signalling NaN in a BF16 window comes out quiet, as the widen-pool-round path makes it (the
// rounding conversion sets the quiet bit): the AVX-512 BF16 kernel stores the float's upper half
// and must set that bit itself.
TEST(ConvPoolLinear, MaxPool2x2Bf16QuietsASignallingNaN) {
  Tensor x = zeros({1, 1, 2, 36}, DType::BFloat16);  // 18 windows: a full chunk of 16 and a partial one
  auto* bits = static_cast<BFloat16*>(x.data_ptr());
  bits[3] = BFloat16::from_bits(0x7F81);       // window 1, row 0
  bits[36 + 34] = BFloat16::from_bits(0xFF82);  // window 17, row 1, negative
  const Tensor y = max_pool2d(x, {2}).contiguous();
  const auto* out = static_cast<const BFloat16*>(y.data_ptr());
  EXPECT_EQ(out[1].bits, 0x7FC1);
  EXPECT_EQ(out[17].bits, 0xFFC2);
  EXPECT_EQ(out[0].bits, 0);
}

TEST(ConvPoolLinear, AvgPoolDivisors) {
  Tensor x = ones({1, 1, 3, 3});
  // 3x3 window, padding 1, corner output: 4 real cells of 9.
  EXPECT_FLOAT_EQ(avg_pool2d(x, {3}, {1}, {1}, false, true).to_vector<float>()[0], 4.0f / 9.0f);
  EXPECT_FLOAT_EQ(avg_pool2d(x, {3}, {1}, {1}, false, false).to_vector<float>()[0], 1.0f);
  // ceil_mode: the last 2x2 window of a 3x3 input covers 1 cell and no padding: divisor 1.
  Tensor c = avg_pool2d(tensor({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3}), {2}, {2}, {0}, true, true);
  EXPECT_EQ(c.sizes(), (IntList{1, 1, 2, 2}));
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{3.0f, 4.5f, 7.5f, 9.0f}));
}

// A window covering the whole plane (global average pooling, or a kernel as large as the padded
// plane) takes its own loops (8 planes side by side, and a fill for the gradient): each plane must
// still be summed in order, row by row, in the compute type, divided once by the window's divisor
// (81 for a 9x9 kernel with padding 1 counted, else 49) and rounded once, and the gradient be
// grad / divisor + 0 (-0 gives +0, as an accumulation from zero does). 21 planes: two groups of 8
// and a tail of 5; values over 30 binades, so any other order would round differently.
TEST(ConvPoolLinear, GlobalAveragePoolSumsEachPlaneInOrder) {
  std::mt19937 gen(3);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::uniform_int_distribution<int> binade(-15, 15);
  for (DType dt : {DType::Float32, DType::BFloat16, DType::Float16, DType::Float64}) {
    SCOPED_TRACE(dtype_name(dt));
    const DType acc = dt == DType::Float64 ? DType::Float64 : DType::Float32;
    Tensor x = Tensor::empty({3, 7, 7, 7}, TensorOptions(dt));
    for (int64_t i = 0; i < x.numel(); ++i) set_element(x, i, std::ldexp(nd(gen), dt == DType::Float16 ? binade(gen) / 3 : binade(gen)));
    const std::vector<double> xv = x.to_vector<double>();
    // Each plane's sum in order, divided by `divisor`, in the compute type, then rounded to dt.
    auto means = [&](double divisor) {
      Tensor want = Tensor::empty({3, 7, 1, 1}, TensorOptions(acc));
      for (int64_t p = 0; p < 21; ++p) {
        if (dt == DType::Float64) {
          double s = 0;
          for (int64_t i = 0; i < 49; ++i) s += xv[static_cast<size_t>(p * 49 + i)];
          set_element(want, p, s / divisor);
        } else {
          float s = 0;
          for (int64_t i = 0; i < 49; ++i) s += static_cast<float>(xv[static_cast<size_t>(p * 49 + i)]);
          set_element(want, p, s / static_cast<float>(divisor));
        }
      }
      return want.to(dt);
    };
    const std::pair<Tensor, double> forwards[] = {
        {adaptive_avg_pool2d(x, {1}), 49}, {avg_pool2d(x, {7}), 49},
        {avg_pool2d(x, {9}, {9}, {1}, false, true), 81}, {avg_pool2d(x, {9}, {9}, {1}, false, false), 49}};
    for (const auto& [got, divisor] : forwards) {
      const Tensor want = means(divisor);
      ASSERT_EQ(got.sizes(), want.sizes());
      EXPECT_EQ(std::memcmp(got.data_ptr(), want.data_ptr(), want.nbytes()), 0) << "divisor " << divisor;
    }
    Tensor grad = Tensor::empty({3, 7, 1, 1}, TensorOptions(dt));
    for (int64_t p = 0; p < 21; ++p) set_element(grad, p, p == 4 ? -0.0 : nd(gen));
    const std::vector<double> gv = grad.to_vector<double>();
    const std::pair<Tensor, double> backwards[] = {
        {adaptive_avg_pool2d_backward(grad, {3, 7, 7, 7}), 49},
        {avg_pool2d_backward(grad, {3, 7, 7, 7}, {9}, {9}, {1}, false, true), 81}};
    for (const auto& [gx, divisor] : backwards) {
      Tensor want = Tensor::empty({3, 7, 7, 7}, TensorOptions(acc));
      for (int64_t i = 0; i < gx.numel(); ++i) {
        const double g = gv[static_cast<size_t>(i / 49)];
        set_element(want, i, dt == DType::Float64 ? g / divisor + 0.0
                                                  : static_cast<double>(static_cast<float>(g) / static_cast<float>(divisor) + 0.0f));
      }
      want = want.to(dt);
      EXPECT_EQ(std::memcmp(gx.data_ptr(), want.data_ptr(), want.nbytes()), 0) << "divisor " << divisor;
      EXPECT_FALSE(std::signbit(get_element(gx, 4 * 49))) << "a -0 gradient gives +0";
    }
  }
}

TEST(ConvPoolLinear, OutputShapes) {
  Tensor x = zeros({2, 3, 28, 28});
  EXPECT_EQ(conv2d(x, zeros({8, 3, 3, 3}), Tensor(), {1}, {1}).sizes(), (IntList{2, 8, 28, 28}));
  EXPECT_EQ(conv2d(x, zeros({9, 1, 5, 5}), zeros({9}), {2}, {2}, {1}, 3).sizes(), (IntList{2, 9, 14, 14}));
  EXPECT_EQ(max_pool2d(x, {2}).sizes(), (IntList{2, 3, 14, 14}));
  EXPECT_EQ(max_pool2d(zeros({1, 5, 5}), {2}, {2}, {0}, {1}, true).sizes(), (IntList{1, 3, 3}));
  // ceil_mode's rule: H = 5, padding 1, kernel 2, stride 2 rounds up to 4 windows, but the 4th
  // would start at row 6 - 1 = 5 = H, in the right padding only: it is dropped.
  EXPECT_EQ(max_pool2d(zeros({1, 1, 5, 5}), {2}, {2}, {1}, {1}, true).sizes(), (IntList{1, 1, 3, 3}));
  EXPECT_EQ(max_pool2d(zeros({1, 1, 5, 5}), {2}, {2}, {1}, {1}, false).sizes(), (IntList{1, 1, 3, 3}));
  EXPECT_EQ(max_pool2d(zeros({1, 1, 6, 6}), {2}, {2}, {1}, {1}, true).sizes(), (IntList{1, 1, 4, 4}));
  EXPECT_EQ(adaptive_avg_pool2d(x, {5, 1}).sizes(), (IntList{2, 3, 5, 1}));
  EXPECT_EQ(linear(zeros({4, 2, 7}), zeros({3, 7})).sizes(), (IntList{4, 2, 3}));
}

TEST(ConvPoolLinear, EmptyBatchesAndSums) {
  // N = 0: empty outputs, zero weight gradients; in = 0 features: y = b.
  Tensor w = ones({8, 3, 3, 3});
  EXPECT_EQ(conv2d(zeros({0, 3, 8, 8}), w).sizes(), (IntList{0, 8, 6, 6}));
  EXPECT_EQ(conv2d_input_grad(zeros({0, 8, 6, 6}), w, {0, 3, 8, 8}).sizes(), (IntList{0, 3, 8, 8}));
  Tensor gw = conv2d_weight_grad(zeros({0, 3, 8, 8}), zeros({0, 8, 6, 6}), {8, 3, 3, 3});
  EXPECT_EQ(sum(abs(gw)).item<float>(), 0.0f);
  EXPECT_EQ(linear(zeros({0, 5}), ones({3, 5}), ones({3})).sizes(), (IntList{0, 3}));
  EXPECT_EQ(linear(zeros({2, 0}), zeros({3, 0}), full({3}, 2.0)).to_vector<float>(), std::vector<float>(6, 2.0f));
  EXPECT_EQ(linear(zeros({2, 0}), zeros({3, 0})).to_vector<float>(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(max_pool2d(zeros({0, 2, 4, 4}), {2}).sizes(), (IntList{0, 2, 2, 2}));
  EXPECT_EQ(adaptive_avg_pool2d(zeros({1, 2, 4, 4}), {0, 3}).sizes(), (IntList{1, 2, 0, 3}));
}

TEST(ConvPoolLinear, BatchParallelPathMatchesOneImageAtATime) {
  // N K L >= kParallelGrain takes the threaded path; single images run serially.
  Generator g(5);
  Tensor x = randn({16, 8, 10, 10}, DType::Float64, &g), w = randn({16, 8, 3, 3}, DType::Float64, &g);
  Tensor b = randn({16}, DType::Float64, &g);
  Tensor y = conv2d(x, w, b, {1}, {1});
  Tensor gy = randn(y.sizes(), DType::Float64, &g);
  Tensor gx = conv2d_input_grad(gy, w, x.sizes(), {1}, {1});
  Tensor gw = conv2d_weight_grad(x, gy, w.sizes(), {1}, {1});
  Tensor gw_sum = zeros(w.sizes(), DType::Float64);
  for (int64_t n = 0; n < 16; ++n) {
    Tensor xn = x.narrow(0, n, 1), gn = gy.narrow(0, n, 1);
    Tensor yn = conv2d(xn, w, b, {1}, {1});
    Tensor gxn = conv2d_input_grad(gn, w, xn.sizes(), {1}, {1});
    for (int64_t i = 0; i < yn.numel(); ++i)
      ASSERT_NEAR(get_element(yn, i), get_element(y.narrow(0, n, 1), i), 1e-12);
    for (int64_t i = 0; i < gxn.numel(); ++i)
      ASSERT_NEAR(get_element(gxn, i), get_element(gx.narrow(0, n, 1), i), 1e-12);
    gw_sum = gw_sum + conv2d_weight_grad(xn, gn, w.sizes(), {1}, {1});
  }
  for (int64_t i = 0; i < gw.numel(); ++i) ASSERT_NEAR(get_element(gw, i), get_element(gw_sum, i), 1e-10);
}

// "Same" convolutions (unit strides and column dilation, OW == W) take im2col/col2im's
// plane-shift path (ops/conv.cpp); the same conv on an input zero-padded by hand with padding 0
// along W has OW != W and takes the other path: the general loops, or on AVX-512 (f32) the row
// kernel of ops/cpu/im2col_avx512.h. Run twice: with the convs held on im2col + GEMM
// (ConvAlgo::Im2col, what this test is about), and by default (on AVX-512 the forward's "same" side
// takes the implicit-GEMM kernel, and 3-wide weight gradients the direct kernel on both sides,
// which stage the same padded values). Forward and weight gradient must give the same bits: the
// same values reach the GEMMs at the same places. The input gradient may take another
// algorithm on the two sides (with O <= C the "same" conv runs it as a forward conv of gy, the
// padded one, whose H W exceeds OH OW, through col2im): there, within the FP32/FP64 summation
// bound of its O/G kH kW terms (col2im's adds included).
TEST(ConvPoolLinear, PlaneShiftIm2colEqualsTheGeneralLoopsBitForBit) {
  struct Case {
    IntList x, w, padding, dilation;
    int64_t groups;
  };
  for (cpu::ConvAlgo algo : {cpu::ConvAlgo::Im2col, cpu::ConvAlgo::Auto})
  for (DType dt : {DType::Float32, DType::Float64})
    for (const Case& c : {Case{{2, 3, 6, 7}, {4, 3, 3, 3}, {1, 1}, {1, 1}, 1},
                          Case{{1, 2, 7, 5}, {3, 2, 3, 3}, {2, 1}, {2, 1}, 1},
                          Case{{2, 4, 5, 9}, {6, 2, 5, 5}, {2, 2}, {1, 1}, 2},
                          Case{{1, 2, 4, 6}, {2, 2, 1, 3}, {0, 1}, {1, 1}, 1},
                          Case{{1, 2, 9, 10}, {3, 2, 3, 3}, {0, 1}, {1, 1}, 1},    // OH = H - 2
                          Case{{2, 3, 14, 14}, {4, 3, 3, 3}, {1, 1}, {1, 1}, 1}}) {  // L = 196: 13 chunks of 16
      SCOPED_TRACE(std::string(algo == cpu::ConvAlgo::Im2col ? "im2col " : "default ") + std::string(dtype_name(dt)) + " x " +
                   shape_str(c.x) + " w " + shape_str(c.w));
      cpu::Override on(algo);
      Generator gen(17);
      Tensor x = randn(c.x, dt, &gen).requires_grad_(), w = randn(c.w, dt, &gen).requires_grad_();
      Tensor b = randn({c.w[0]}, dt, &gen);
      const IntList shifted_pad = c.padding, general_pad{c.padding[0], 0};
      Tensor y1 = conv2d(x, w, b, {1, 1}, shifted_pad, c.dilation, c.groups);
      Tensor gy = randn(y1.sizes(), dt, &gen);
      (y1 * gy).sum().backward();
      const Tensor gx1 = x.grad(), gw1 = w.grad();
      x.set_grad(Tensor());
      w.set_grad(Tensor());
      const int64_t P = c.padding[1];
      Tensor side = zeros({c.x[0], c.x[1], c.x[2], P}, dt);
      Tensor xp = P > 0 ? cat({side, x, side}, 3) : x;
      Tensor y2 = conv2d(xp, w, b, {1, 1}, general_pad, c.dilation, c.groups);
      (y2 * gy).sum().backward();
      EXPECT_TRUE(bit_equal(y1, y2)) << "forward";
      const Tensor bound = conv2d_input_grad(abs(gy.to(DType::Float64)), abs(w.detach().to(DType::Float64)), c.x,
                                             {1, 1}, shifted_pad, c.dilation, c.groups);
      const double eps = dt == DType::Float32 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -53);
      const double terms = double(c.w[0] / c.groups * c.w[2] * c.w[3]);
      const Tensor gx2 = x.grad();
      for (int64_t i = 0; i < gx1.numel(); ++i)
        ASSERT_LE(std::fabs(get_element(gx1, i) - get_element(gx2, i)), 2 * terms * eps * get_element(bound, i))
            << "input gradient [" << i << "]";
      EXPECT_TRUE(bit_equal(gw1, w.grad())) << "weight gradient";
    }
}

TEST(ConvPoolLinear, LinearEqualsMatmulPlusBias) {
  Generator g(6);
  Tensor x = randn({3, 4, 9}, DType::Float64, &g), w = randn({5, 9}, DType::Float64, &g), b = randn({5}, DType::Float64, &g);
  Tensor y = linear(x, w, b), ref = matmul(x, w.t()) + b;
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_NEAR(get_element(y, i), get_element(ref, i), 1e-13);
}

// ---- bad input: every error names the op and says expected vs got ----
void expect_error(const std::function<void()>& f, const std::string& substring) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << substring;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(substring), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << substring;
  }
}

TEST(ConvPoolLinearErrors, Conv2d) {
  Tensor x = zeros({1, 3, 8, 8}), w = zeros({8, 3, 3, 3});
  expect_error([&] { conv2d(zeros({3, 8}), w); },
               "conv2d: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got f32[3, 8]");
  expect_error([&] { conv2d(x, zeros({32, 3})); }, "conv2d: weight must be 4-D (O, C/groups, kH, kW), got f32[32, 3]");
  expect_error([&] { conv2d(zeros({1, 4, 8, 8}), w); },
               "conv2d: expected input with 3 channels (weight f32[8, 3, 3, 3], groups 1), got f32[1, 4, 8, 8]");
  expect_error([&] { conv2d(zeros({4, 8, 8}), w); },
               "conv2d: expected input with 3 channels (weight f32[8, 3, 3, 3], groups 1), got f32[4, 8, 8]");
  expect_error([&] { conv2d(x, zeros({4, 1, 3, 3}), Tensor(), {1}, {0}, {1}, 2); },
               "conv2d: groups 2 must divide the input channels, got f32[1, 3, 8, 8]");
  expect_error([&] { conv2d(zeros({1, 4, 8, 8}), zeros({5, 2, 3, 3}), Tensor(), {1}, {0}, {1}, 2); },
               "conv2d: groups 2 must divide the output channels, got weight f32[5, 2, 3, 3]");
  expect_error([&] { conv2d(x, w, Tensor(), {1}, {0}, {1}, 0); }, "conv2d: groups must be positive, got 0");
  expect_error([&] { conv2d(zeros({1, 3, 4, 4}), zeros({2, 3, 5, 5})); },
               "conv2d: kernel 5x5 (dilation [1, 1], spanning 5x5) is larger than the padded input 4x4");
  expect_error([&] { conv2d(zeros({1, 3, 4, 4}), zeros({2, 3, 3, 3}), Tensor(), {1}, {0}, {2}); },
               "spanning 5x5) is larger than the padded input 4x4");
  expect_error([&] { conv2d(x, w, Tensor(), {0, 1}); }, "conv2d: stride must be positive, got [0, 1]");
  expect_error([&] { conv2d(x, w, Tensor(), {1}, {0}, {1, 0}); }, "conv2d: dilation must be positive, got [1, 0]");
  expect_error([&] { conv2d(x, w, Tensor(), {1}, {-1}); }, "conv2d: padding must be non-negative, got [-1, -1]");
  expect_error([&] { conv2d(x, w, Tensor(), {1, 1, 1}); }, "conv2d: stride must have 1 or 2 values, got [1, 1, 1]");
  expect_error([&] { conv2d(x, zeros({8, 3, 3, 3}, DType::Float64)); },
               "conv2d: expected input and weight of the same dtype, got f32[1, 3, 8, 8] and f64[8, 3, 3, 3]");
  expect_error([&] { conv2d(x, w, zeros({8}, DType::Float16)); }, "conv2d: expected bias of the input's dtype, got f16[8]");
  expect_error([&] { conv2d(x, w, zeros({4})); },
               "conv2d: bias must be 1-D with 8 elements (weight f32[8, 3, 3, 3]), got f32[4]");
  expect_error([&] { conv2d(zeros({1, 3, 8, 8}, DType::Int64), zeros({8, 3, 3, 3}, DType::Int64)); },
               "conv2d: expected a floating input, got i64[1, 3, 8, 8]");
  expect_error([&] { conv2d_input_grad(zeros({1, 8, 5, 5}), w, {1, 3, 8, 8}); },
               "conv2d_input_grad: expected grad of shape [1, 8, 6, 6]");
  expect_error([&] { conv2d_weight_grad(x, zeros({1, 8, 6, 5}), {8, 3, 3, 3}); },
               "conv2d_weight_grad: expected grad of shape [1, 8, 6, 6]");
  expect_error([&] { conv2d_input_grad(zeros({1, 8, 6, 6}), w, {1, 4, 8, 8}); },
               "conv2d_input_grad: expected input with 3 channels (weight f32[8, 3, 3, 3], groups 1), got [1, 4, 8, 8]");
}

TEST(ConvPoolLinearErrors, Linear) {
  Tensor w = zeros({3, 4});
  expect_error([&] { linear(zeros({2, 5}), w); },
               "linear: expected input with 4 features in its last dim (weight f32[3, 4]), got f32[2, 5]");
  expect_error([&] { linear(zeros({2, 4}), zeros({4})); }, "linear: weight must be 2-D (out, in), got f32[4]");
  expect_error([&] { linear(zeros({2, 4}), w, zeros({4})); },
               "linear: bias must be 1-D with 3 elements (weight f32[3, 4]), got f32[4]");
  expect_error([&] { linear(scalar_tensor(1.0), w); }, "linear: expected an input with at least 1 dim (*, in), got f32[]");
  expect_error([&] { linear(zeros({2, 4}, DType::Float64), w); },
               "linear: expected input, weight and bias of one dtype, got f64[2, 4], f32[3, 4] and no bias");
  expect_error([&] { linear(zeros({2, 4}, DType::Int64), zeros({3, 4}, DType::Int64)); },
               "linear: expected a floating input, got i64[2, 4]");
}

TEST(ConvPoolLinearErrors, Pooling) {
  Tensor x = zeros({1, 2, 4, 4});
  expect_error([&] { max_pool2d(zeros({4, 4}), {2}); },
               "max_pool2d: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got f32[4, 4]");
  expect_error([&] { avg_pool2d(zeros({1, 1, 1, 4, 4}), {2}); },
               "avg_pool2d: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got f32[1, 1, 1, 4, 4]");
  expect_error([&] { adaptive_avg_pool2d(zeros({4}), {2}); },
               "adaptive_avg_pool2d: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got f32[4]");
  expect_error([&] { max_pool2d(x, {0, 2}); }, "max_pool2d: kernel_size must be positive, got [0, 2]");
  expect_error([&] { max_pool2d(x, {2}, {0}); }, "max_pool2d: stride must be positive, got [0, 0]");
  expect_error([&] { max_pool2d(x, {2}, {}, {0}, {0}); }, "max_pool2d: dilation must be positive, got [0, 0]");
  expect_error([&] { max_pool2d(x, {3}, {1}, {2}); },
               "max_pool2d: padding must be between 0 and half the kernel size, got padding [2, 2] for kernel_size [3, 3]");
  expect_error([&] { avg_pool2d(x, {2}, {1}, {-1}); }, "avg_pool2d: padding must be between 0 and half the kernel size");
  expect_error([&] { max_pool2d(x, {5}); }, "max_pool2d: output size is too small: input f32[1, 2, 4, 4] with kernel_size [5, 5]");
  expect_error([&] { avg_pool2d(zeros({2, 3, 3}), {2, 4}); }, "avg_pool2d: output size is too small: input f32[2, 3, 3]");
  expect_error([&] { max_pool2d(x, {2, 2, 2}); }, "max_pool2d: kernel_size must have 1 or 2 values, got [2, 2, 2]");
  expect_error([&] { max_pool2d(zeros({1, 2, 4, 4}, DType::Int64), {2}); }, "max_pool2d: expected a floating input, got i64[1, 2, 4, 4]");
  expect_error([&] { avg_pool2d(zeros({1, 2, 4, 4}, DType::Int64), {2}); }, "avg_pool2d: expected a floating input, got i64");
  expect_error([&] { max_pool2d(zeros({1, 0, 4, 4}), {2}); }, "max_pool2d: expected non-empty C, H and W, got f32[1, 0, 4, 4]");
  expect_error([&] { adaptive_avg_pool2d(x, {-1, 2}); }, "adaptive_avg_pool2d: output_size must be 2 non-negative values, got [-1, 2]");
  expect_error([&] { max_pool2d_backward(zeros({1, 2, 2, 2}), full({1, 2, 2, 2}, 16.0, DType::Int64), {1, 2, 4, 4}); },
               "max_pool2d_backward: index 16 is outside its 4x4 plane");
  expect_error([&] { max_pool2d_backward(zeros({1, 2, 2, 2}), zeros({1, 2, 2, 2}), {1, 2, 4, 4}); },
               "max_pool2d_backward: expected Int64 indices of the grad's shape [1, 2, 2, 2], got f32[1, 2, 2, 2]");
  expect_error([&] { avg_pool2d_backward(zeros({1, 2, 3, 3}), {1, 2, 4, 4}, {2}); },
               "avg_pool2d_backward: expected grad of shape [1, 2, 2, 2]");
  expect_error([&] { adaptive_avg_pool2d_backward(zeros({1, 3, 2, 2}), {1, 2, 4, 4}); },
               "adaptive_avg_pool2d_backward: expected grad of shape [1, 2, 2, 2]");
}

}  // namespace
}  // namespace mixtape::testing
