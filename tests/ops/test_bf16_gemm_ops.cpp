// tests/ops/test_bf16_gemm_ops.cpp — matmul, linear and conv2d (forward and both gradients) on BF16 operands through both paths of the
// BF16 GEMM (ops/cpu/blas.h, MIXTAPE_CPU_BF16): the emulated one (BF16 widened to FP32, FP32 GEMM)
// is bit for bit the f32 op on the widened inputs, rounded (test_reduced_precision.cpp,
// test_conv_pool_linear.cpp); here each native kernel the CPU has (vdpbf16ps, AMX tiles: the
// tests are instantiated for both) against it. (conv2d's numbers on each path, against FP64, are
// tests/ops/test_kernel_entries.cpp's: every BF16 conv entry at each ISA level, on every geometry
// of tests/ops/conv_geometries.h.)
// Bound, per output element: both paths compute an FP32 sum s of the same k exact products (a
// BF16 product is exact in FP32), in other orders, each within k u sum|a b| of the exact sum
// (u = 2^-24), so |s_native - s_emulated| <= 2 k u (|A| @ |B|); rounding each to BF16 adds at most
// one BF16 step, <= 2^-7 |result| (8 significant bits). Exact where every product and partial sum
// is an integer below 2^24 (small integers): then both paths give the same bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <utility>

#include <mixtape/mixtape.h>

#include "ops/conv_geometries.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/conv_implicit_gemm.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/steering.h"

namespace mixtape {
namespace {

// The native kernel of the running test (the fixture sets it from the parameter).
cpu::Bf16GemmPath g_native = cpu::Bf16GemmPath::Avx512Bf16;
std::string native_missing() {
  return g_native == cpu::Bf16GemmPath::Amx ? cpu::bf16_amx_missing(cpu::cpu_features_with_amx())
                                            : cpu::bf16_native_missing(cpu::cpu_features());
}
#define MT_REQUIRE_NATIVE_BF16()                                                                          \
  if (!native_missing().empty())                                                                          \
  GTEST_SKIP() << "this CPU lacks " << native_missing() << ": that BF16 kernel cannot run here"

class Bf16GemmOps : public ::testing::TestWithParam<cpu::Bf16GemmPath> {
 protected:
  void SetUp() override { g_native = GetParam(); }
};

Tensor with_path(cpu::Bf16GemmPath path, const std::function<Tensor()>& f) {
  cpu::Override o(path);
  return f();
}
TensorList with_path_list(cpu::Bf16GemmPath path, const std::function<TensorList()>& f) {
  cpu::Override o(path);
  return f();
}
// conv2d(x, w), conv2d_input_grad(gx_of, w) and conv2d_weight_grad(x, gw_of) (3x3, padding 1) on
// the native and on the emulated path: {native results, emulated results}.
std::pair<TensorList, TensorList> conv_ops_both_paths(const Tensor& x, const Tensor& w, const Tensor& gx_of,
                                                      const Tensor& gw_of) {
  const IntList one{1, 1};
  auto all = [&] {
    return TensorList{conv2d(x, w, Tensor(), one, one), conv2d_input_grad(gx_of, w, x.sizes(), one, one),
                      conv2d_weight_grad(x, gw_of, w.sizes(), one, one)};
  };
  return {with_path_list(g_native, all), with_path_list(cpu::Bf16GemmPath::Emulated, all)};
}

// |native - emulated| <= 2 k u bound + 2^-7 |emulated|, element by element; `abs_product` is
// the op on |inputs| in f64.
::testing::AssertionResult within_bound(const Tensor& native, const Tensor& emulated, const Tensor& abs_product,
                                        int64_t k) {
  const Tensor n = native.to(DType::Float64).contiguous(), e = emulated.to(DType::Float64).contiguous();
  const Tensor p = abs_product.contiguous();
  if (n.sizes() != e.sizes() || p.sizes() != n.sizes()) return ::testing::AssertionFailure() << "shapes differ";
  int64_t bad = 0;
  for (int64_t i = 0; i < n.numel(); ++i) {
    const double a = get_element(n, i), b = get_element(e, i);
    const double tol = 2.0 * double(k) * std::ldexp(1.0, -24) * get_element(p, i) + std::ldexp(std::fabs(b), -7);
    if (!(std::fabs(a - b) <= tol) && bad++ < 3)
      std::cerr << "  [" << i << "] native " << a << " emulated " << b << " tol " << tol << "\n";
  }
  if (bad) return ::testing::AssertionFailure() << bad << " of " << n.numel() << " elements outside the bound";
  return ::testing::AssertionSuccess();
}

Tensor bf16_randn(const IntList& sizes, uint64_t seed) {
  Generator g(seed);
  return randn(sizes, {}, &g).to(DType::BFloat16);
}
Tensor abs64(const Tensor& t) { return abs(t.to(DType::Float64)); }

TEST_P(Bf16GemmOps, MatmulNativeWithinTheBoundOfTheWidenedPath) {
  MT_REQUIRE_NATIVE_BF16();
  struct Case {
    IntList a, b;
    bool ta, tb;
  };
  // Sizes off every tile edge, odd and long depths, batches with broadcast, transposed views.
  const Case cases[] = {{{37, 301}, {301, 45}, false, false},  {{2, 7, 64}, {64, 5}, false, false},
                        {{3, 1, 17, 9}, {2, 9, 33}, false, false}, {{129, 40}, {40, 70}, true, false},
                        {{20, 1030}, {1030, 18}, false, true},     {{1, 513}, {513, 1}, false, false}};
  uint64_t seed = 1;
  for (const Case& c : cases) {
    Tensor a = bf16_randn(c.a, seed++), b = bf16_randn(c.b, seed++);
    if (c.ta) a = a.transpose(-1, -2).contiguous().transpose(-1, -2);
    if (c.tb) b = b.transpose(-1, -2).contiguous().transpose(-1, -2);
    const Tensor n = with_path(g_native, [&] { return matmul(a, b); });
    const Tensor e = with_path(cpu::Bf16GemmPath::Emulated, [&] { return matmul(a, b); });
    EXPECT_EQ(n.dtype(), DType::BFloat16);
    EXPECT_TRUE(within_bound(n, e, matmul(abs64(a), abs64(b)), a.size(-1))) << shape_str(c.a) << " @ " << shape_str(c.b);
  }
}

TEST_P(Bf16GemmOps, LinearForwardAndBackwardNativeWithinTheBound) {
  MT_REQUIRE_NATIVE_BF16();
  const Tensor x0 = bf16_randn({4, 9, 200}, 11), w0 = bf16_randn({70, 200}, 12), b0 = bf16_randn({70}, 13);
  const Tensor gy = bf16_randn({4, 9, 70}, 14);
  auto run = [&](cpu::Bf16GemmPath path) {
    cpu::Override o(path);
    Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
    Tensor y = linear(x, w, b);
    y.backward(gy);
    return TensorList{y, x.grad(), w.grad()};
  };
  const TensorList n = run(g_native), e = run(cpu::Bf16GemmPath::Emulated);
  // y = x w^T + b: the bias enters the FP32 sum as its first term.
  EXPECT_TRUE(within_bound(n[0], e[0], linear(abs64(x0), abs64(w0), abs64(b0)), 201)) << "y";
  EXPECT_TRUE(within_bound(n[1], e[1], matmul(abs64(gy), abs64(w0)), 70)) << "grad x";
  EXPECT_TRUE(within_bound(n[2], e[2], matmul(abs64(gy).reshape({-1, 70}).t(), abs64(x0).reshape({-1, 200})), 36))
      << "grad w";
}

// The BF16 im2col of "same" convolutions (ops/cpu/im2col_avx512.h's plane-shift kernel, 32
// columns per masked load) against its row kernel: the same conv on an input zero-padded by hand
// along W (padding 0 there, so OW != W) takes the latter. The weight gradient sees the same col
// values at the same GEMM positions: the same bits. The forward too, with the convs held on
// im2col + GEMM (ConvAlgo::Im2col: the implicit GEMM would take the "same" side, and on
// AVX512-BF16 the direct kernel the hand-padded one, which sums in another order). The weight
// gradient held there too (by default both sides take the weight-gradient kernel on image pairs,
// which would compare that kernel with itself). Planes of one partial chunk to several, OH != H,
// dilation, groups.
TEST_P(Bf16GemmOps, Conv2dBf16PlaneShiftIm2colEqualsTheRowKernelBitForBit) {
  MT_REQUIRE_NATIVE_BF16();
  cpu::Override native(g_native);
  uint64_t seed = 90;
  int checked = 0;
  for (const testing::ConvGeometry& g : testing::kConvGeometries) {
    // Plane-shift im2col geometry (any groups) with column padding to move into the input.
    if (g.sH != 1 || g.sW != 1 || g.dW != 1 || g.kW != 2 * g.pW + 1 || g.pW == 0) continue;
    ++checked;
    SCOPED_TRACE(g.what);
    const Tensor x = bf16_randn(g.x_size(), seed++), w = bf16_randn(g.w_size(), seed++);
    const Tensor side = zeros({g.N, g.C, g.H, g.pW}, DType::BFloat16);
    const Tensor xp = cat({side, x, side}, 3);
    const IntList general_pad{g.pH, 0};
    Tensor y1, y2;
    {
      cpu::Override im2col(cpu::ConvAlgo::Im2col);
      y1 = conv2d(x, w, Tensor(), {1, 1}, g.padding(), g.dilation(), g.G);
      y2 = conv2d(xp, w, Tensor(), {1, 1}, general_pad, g.dilation(), g.G);
    }
    const Tensor gy = bf16_randn(y1.sizes(), seed++);
    EXPECT_EQ(std::memcmp(y1.contiguous().data_ptr(), y2.contiguous().data_ptr(), y1.nbytes()), 0) << "forward";
    Tensor gw1, gw2;
    {
      cpu::Override im2col(cpu::ConvAlgo::Im2col);
      gw1 = conv2d_weight_grad(x, gy, g.w_size(), {1, 1}, g.padding(), g.dilation(), g.G);
      gw2 = conv2d_weight_grad(xp, gy, g.w_size(), {1, 1}, general_pad, g.dilation(), g.G);
    }
    EXPECT_EQ(std::memcmp(gw1.data_ptr(), gw2.data_ptr(), gw1.nbytes()), 0) << "weight gradient";
  }
  EXPECT_GE(checked, 30);
}

// Small integers through every conv op: all products and partial sums are exact in FP32, so both
// paths give the same bits (and the native one equals the rounded f32 conv).
TEST_P(Bf16GemmOps, Conv2dSmallIntegersGiveTheSameBitsOnBothPaths) {
  MT_REQUIRE_NATIVE_BF16();
  auto ints = [](const IntList& sizes, int64_t seed) {
    Tensor t = Tensor::empty(sizes, TensorOptions(DType::Float32));
    for (int64_t i = 0; i < t.numel(); ++i) set_element(t, i, double((i * 5 + seed * 11 + i * i) % 7 - 3));
    return t.to(DType::BFloat16);
  };
  const Tensor x = ints({4, 6, 7, 7}, 1), w = ints({5, 6, 3, 3}, 2), gy = ints({4, 5, 7, 7}, 3);
  const auto [n, e] = conv_ops_both_paths(x, w, gy, gy);
  for (size_t i = 0; i < n.size(); ++i)
    EXPECT_EQ(std::memcmp(n[i].contiguous().data_ptr(), e[i].contiguous().data_ptr(), n[i].nbytes()), 0) << i;
}

// The native path really runs in conv2d and both gradients: a BF16 subnormal input counts as 0
// there, where the widened FP32 GEMM keeps it.
TEST_P(Bf16GemmOps, Conv2dReachesTheNativeKernel) {
  MT_REQUIRE_NATIVE_BF16();
  const double tiny = std::ldexp(1.0, -130);  // a BF16 subnormal
  const Tensor x = full({2, 4, 5, 5}, tiny, TensorOptions(DType::BFloat16));
  const Tensor w = full({3, 4, 3, 3}, 1.0, TensorOptions(DType::BFloat16));
  const Tensor gy = full({2, 3, 5, 5}, tiny, TensorOptions(DType::BFloat16));
  const Tensor ones = full({2, 3, 5, 5}, 1.0, TensorOptions(DType::BFloat16));
  const auto [n, e] = conv_ops_both_paths(x, w, gy, ones);
  for (size_t i = 0; i < n.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(get_element(n[i], 0), 0.0);
    EXPECT_GT(get_element(e[i], 0), 0.0);
  }
}

TEST_P(Bf16GemmOps, SmallIntegersGiveTheSameBitsOnBothPaths) {
  MT_REQUIRE_NATIVE_BF16();
  // Integers in [-8, 8]: every product and partial sum (|.| <= 64 k) is exact in FP32, and BF16
  // holds the results (|.| <= 192 < 256) exactly.
  auto ints = [](int64_t rows, int64_t cols, int64_t seed) {
    Tensor t = Tensor::empty({rows, cols}, TensorOptions(DType::Float32));
    for (int64_t i = 0; i < t.numel(); ++i) set_element(t, i, double((i * 7 + seed * 13 + i * i) % 17 - 8));
    return t.to(DType::BFloat16);
  };
  const Tensor a = ints(33, 3, 1), b = ints(3, 40, 2);
  const Tensor n = with_path(g_native, [&] { return matmul(a, b); });
  const Tensor e = with_path(cpu::Bf16GemmPath::Emulated, [&] { return matmul(a, b); });
  EXPECT_EQ(std::memcmp(n.contiguous().data_ptr(), e.contiguous().data_ptr(), n.nbytes()), 0);
}

// cpu::gemm's BF16 overload on its emulated path: the operands widened with their layouts (padded
// leading dimensions, transposes), beta kept, k = 0 touching no operand: the float gemm's bits.
TEST(Bf16GemmEmulated, OverloadIsTheFloatGemmOnWidenedOperands) {
  cpu::Override emulated(cpu::Bf16GemmPath::Emulated);
  const int64_t m = 19, n = 23, k = 37, pad = 5;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 1.0f}) {
        const int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
        const Tensor a = bf16_randn({ta ? k : m, lda}, 40 + ta), b = bf16_randn({tb ? n : k, ldb}, 50 + tb);
        const Tensor a32 = a.to(DType::Float32), b32 = b.to(DType::Float32);
        const Tensor c0 = bf16_randn({m, ldc}, 60).to(DType::Float32);
        Tensor got = c0.clone(), want = c0.clone();
        cpu::gemm(ta, tb, m, n, k, static_cast<const BFloat16*>(a.data_ptr()), lda,
                  static_cast<const BFloat16*>(b.data_ptr()), ldb, beta, got.data_ptr<float>(), ldc);
        cpu::gemm(ta, tb, m, n, k, a32.data_ptr<float>(), lda, b32.data_ptr<float>(), ldb, beta, want.data_ptr<float>(),
                  ldc);
        EXPECT_EQ(std::memcmp(got.data_ptr(), want.data_ptr(), got.nbytes()), 0) << "ta " << ta << " tb " << tb
                                                                                 << " beta " << beta;
      }
  Tensor c = full({2, 3}, 2.0, TensorOptions(DType::Float32));
  cpu::gemm(false, false, 2, 3, 0, static_cast<const BFloat16*>(nullptr), 1, static_cast<const BFloat16*>(nullptr), 3,
            0.5f, c.data_ptr<float>(), 3);
  EXPECT_EQ(get_element(c, 0), 1.0) << "k = 0: C = beta C";
}

// The native path really runs in matmul: vdpbf16ps and tdpbf16ps treat subnormal inputs as zero,
// where the widened FP32 GEMM keeps them (docs/CPU.md, "BF16 GEMM").
TEST_P(Bf16GemmOps, MatmulReachesTheNativeKernel) {
  MT_REQUIRE_NATIVE_BF16();
  const double tiny = std::ldexp(1.0, -130);  // a BF16 subnormal
  const Tensor a = full({16, 16}, tiny, TensorOptions(DType::BFloat16));
  const Tensor b = full({16, 16}, 1.0, TensorOptions(DType::BFloat16));
  const Tensor n = with_path(g_native, [&] { return matmul(a, b); });
  const Tensor e = with_path(cpu::Bf16GemmPath::Emulated, [&] { return matmul(a, b); });
  EXPECT_EQ(get_element(n, 0), 0.0);
  EXPECT_EQ(get_element(e, 0), 16 * tiny);
}

INSTANTIATE_TEST_SUITE_P(Kernels, Bf16GemmOps, ::testing::Values(cpu::Bf16GemmPath::Avx512Bf16, cpu::Bf16GemmPath::Amx),
                         [](const ::testing::TestParamInfo<cpu::Bf16GemmPath>& i) {
                           return std::string(i.param == cpu::Bf16GemmPath::Amx ? "amx" : "avx512bf16");
                         });

}  // namespace
}  // namespace mixtape
