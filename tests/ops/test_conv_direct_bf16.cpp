// tests/ops/test_conv_direct_bf16.cpp — the direct BF16 convolution on vdpbf16ps
// (ops/cpu/conv_direct_avx512.h, channel pairs) that conv2d takes for BF16 operands where BF16
// GEMMs run on AVX512-BF16:
//   - called directly, against an FP64 reference of the BF16 operands within the FP32 summation
//     bound of its depth plus the one rounding to BF16, at every blocking edge (vectors of output
//     channels, pixel blocks, strides, padding, dilation, kernel heights) and for odd channel
//     counts (the last pair's high half is zero) and one channel;
//   - the same bits on 1, 2 and 3 threads, a batch of one (rows split between threads, with a
//     bias: the element-by-element store) included;
//   - conv2d returns the kernel's bits where it takes it, within the bound of the emulated path
//     (FP32 arithmetic on the widened operands); infinities and NaN reach the same outputs as there.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include <mixtape/mixtape.h>

#include "common/bit_equal.h"
#include "common/on_avx512_bf16.h"
#include "common/on_thread_counts.h"
#include "common/same_specials.h"
#include "common/sum_bound.h"
#include "ops/conv3_geometry.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/conv_direct_avx512.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/steering.h"

namespace mixtape {
namespace {

using testing::bit_equal;
using testing::within_sum_bound;

// False without AVX512-BF16 and under MIXTAPE_CPU_CONV=im2col (MT_REQUIRE_KERNEL puts BF16 GEMMs on
// vdpbf16ps for the test where the CPU has it, AMX CPUs included).
bool kernel_available() {
  return cpu::own_kernels_enabled() && cpu::conv_pairs_applies({1, 2, 4, 4, 1, 3, 3, 1, 1, 1, 1, 1, 1, 4, 4});
}
#define MT_REQUIRE_KERNEL()              \
  const testing::OnAvx512Bf16 on_avx512_bf16; \
  if (!kernel_available()) GTEST_SKIP() << "BF16 GEMMs do not run on AVX512-BF16 here (or MIXTAPE_CPU_CONV=im2col, MIXTAPE_GEMM=blas)"

using Geo = testing::Conv3;
const Geo kGeos[] = {
    {2, 16, 28, 28, 16, 3, 1, 1, 1, 1, 1, false, "ResNet-8's layer1: one vector, two 14-pixel blocks a row"},
    {2, 16, 28, 28, 32, 3, 2, 2, 1, 1, 1, false, "ResNet-8's stride-2 layer: two vectors, 14-pixel rows"},
    {2, 32, 14, 14, 64, 3, 2, 2, 1, 1, 1, true, "stride 2 onto 7x7: four vectors, blocks of 4 and 3"},
    {3, 5, 9, 11, 17, 3, 1, 1, 1, 1, 1, true, "C = 5 (three pairs, the last half empty); O = 17"},
    {1, 3, 13, 49, 40, 3, 1, 1, 1, 1, 1, true, "C = 3; O = 40: one-vector blocks; 49-pixel rows"},
    {2, 4, 10, 25, 80, 3, 3, 2, 0, 2, 2, false, "O = 80; row stride 3, row dilation 2, pW past reach"},
    {2, 6, 5, 40, 8, 5, 1, 2, 2, 1, 1, true, "5 rows, column stride 2: 20-pixel rows"},
    {2, 3, 1, 3, 16, 3, 1, 1, 1, 1, 1, true, "H = 1: two of three kernel rows read padding"},
    {2, 8, 6, 11, 64, 1, 1, 1, 0, 1, 1, false, "1x3 kernel"},
    {2, 4, 6, 3, 5, 3, 1, 1, 0, 0, 1, true, "no padding: 1-pixel rows, O = 5"},
    {1, 1, 7, 13, 3, 3, 1, 1, 1, 1, 1, true, "one channel: one pair, its high half zero"},
    {2, 80, 5, 9, 64, 3, 1, 1, 1, 1, 1, true, "C = 80, four vectors: 40 pairs in several depth slices"},
};

struct Inputs {
  Tensor x, w, b;  // x and w BF16, b f32
};
Inputs make_inputs(const Geo& g, uint64_t seed) {
  Generator gen(seed);
  Inputs in;
  in.x = randn(g.x_size(), {}, &gen).to(DType::BFloat16);
  in.w = randn(g.w_size(), {}, &gen).to(DType::BFloat16);
  if (g.bias) in.b = randn({g.O}, {}, &gen);
  return in;
}
Tensor f64(const Tensor& t) { return t.defined() ? t.to(DType::Float64) : Tensor(); }
Tensor abs_or_none(const Tensor& t) { return t.defined() ? abs(t) : Tensor(); }

Tensor direct(const Geo& g, const Inputs& in) {
  Tensor y = full(g.y_size(), std::numeric_limits<float>::quiet_NaN()).to(DType::BFloat16);  // every element written
  cpu::conv_pairs_forward(g.shape(), static_cast<const BFloat16*>(in.x.data_ptr()),
                           static_cast<const BFloat16*>(in.w.data_ptr()),
                           in.b.defined() ? static_cast<const float*>(in.b.data_ptr()) : nullptr,
                           static_cast<BFloat16*>(y.data_ptr()));
  return y;
}
Tensor op(const Geo& g, const Tensor& x, const Tensor& w, const Tensor& b) {
  return conv2d(x, w, b, g.stride(), g.padding(), g.dilation());
}

TEST(ConvDirectBf16, KernelMatchesFp64AtEveryEdge) {
  MT_REQUIRE_KERNEL();
  for (const Geo& geo : kGeos) {
    SCOPED_TRACE(geo.what);
    ASSERT_TRUE(cpu::conv_pairs_applies(geo.shape()));
    const Inputs in = make_inputs(geo, 51);
    const Tensor ref = op(geo, f64(in.x), f64(in.w), f64(in.b));
    const Tensor absterms = op(geo, abs(f64(in.x)), abs(f64(in.w)), abs_or_none(f64(in.b)));
    // The FP32 sum of exact products (bound of its depth), then one rounding to BF16.
    EXPECT_TRUE(within_sum_bound(direct(geo, in), ref, absterms, geo.C * geo.kH * 3, 1.0, 1));
  }
}

TEST(ConvDirectBf16, SameBitsOnOneTwoAndThreeThreads) {
  MT_REQUIRE_KERNEL();
  // 2^21+ multiply-adds, so a team runs: eight images (images split), and one (rows split).
  for (const Geo& geo : {Geo{8, 24, 16, 16, 32, 3, 2, 2, 1, 1, 1, true, "eight images"},
                         Geo{1, 33, 30, 30, 48, 3, 1, 1, 1, 1, 1, true, "one image, C odd, a bias"}}) {
    SCOPED_TRACE(geo.what);
    const Inputs in = make_inputs(geo, 52);
    const std::vector<Tensor> got = testing::on_thread_counts({1, 2, 3}, [&] { return direct(geo, in); });
    EXPECT_TRUE(bit_equal(got[0], got[1]));
    EXPECT_TRUE(bit_equal(got[0], got[2]));
  }
}

TEST(ConvDirectBf16, Conv2dReturnsTheKernelsBitsWithinTheBoundOfTheEmulatedPath) {
  MT_REQUIRE_KERNEL();
  int taken = 0;
  for (const Geo& geo : kGeos) {
    if (geo.C < 2) continue;  // conv2d keeps one-channel inputs off the pairs
    SCOPED_TRACE(geo.what);
    const Inputs in = make_inputs(geo, 53);
    const Tensor got = op(geo, in.x, in.w, in.b.defined() ? in.b.to(DType::BFloat16) : Tensor());
    const Tensor direct_bits = [&] {
      Inputs rounded = in;  // conv2d takes a BF16 bias and widens it exactly
      if (in.b.defined()) rounded.b = in.b.to(DType::BFloat16).to(DType::Float32);
      return direct(geo, rounded);
    }();
    // conv2d takes the kernel for strided convs and for "same" ones with rows of 16 or more.
    const bool same = geo.sH == 1 && geo.sW == 1 && geo.pW == 1 && geo.OW() == geo.W;
    if (!same || geo.OW() >= 16) {
      EXPECT_TRUE(bit_equal(got, direct_bits));
      ++taken;
    }
    Tensor emulated;
    {
      cpu::Override o(cpu::Bf16GemmPath::Emulated);
      emulated = op(geo, in.x, in.w, in.b.defined() ? in.b.to(DType::BFloat16) : Tensor());
    }
    const Tensor absterms = op(geo, abs(f64(in.x)), abs(f64(in.w)), abs_or_none(f64(in.b)));
    // Two FP32 sums of the same exact products, each rounded once to BF16.
    EXPECT_TRUE(within_sum_bound(got, emulated.to(DType::Float64), absterms, geo.C * geo.kH * 3, 2.0, 2));
  }
  EXPECT_GE(taken, 5);
}

TEST(ConvDirectBf16, InfinitiesAndNanReachTheOutputsTheEmulatedPathGives) {
  MT_REQUIRE_KERNEL();
  const Geo geo = kGeos[0];
  Inputs in = make_inputs(geo, 54);
  BFloat16* x = static_cast<BFloat16*>(in.x.data_ptr());
  x[5] = BFloat16(std::numeric_limits<float>::infinity());  // a border pixel: inf * 0 from padding is NaN
  x[300] = BFloat16(-std::numeric_limits<float>::infinity());
  x[2000] = BFloat16(std::numeric_limits<float>::quiet_NaN());
  static_cast<BFloat16*>(in.w.data_ptr())[4] = BFloat16(0.0f);  // inf * a zero weight: NaN
  const Tensor got = op(geo, in.x, in.w, Tensor());
  Tensor emulated;
  {
    cpu::Override o(cpu::Bf16GemmPath::Emulated);
    emulated = op(geo, in.x, in.w, Tensor());
  }
  EXPECT_TRUE(testing::same_specials(got, emulated, 21));
}

TEST(ConvDirectBf16, NotUnderEmulatedBf16) {
  MT_REQUIRE_KERNEL();
  cpu::Override o(cpu::Bf16GemmPath::Emulated);
  EXPECT_FALSE(cpu::conv_pairs_applies({1, 2, 4, 4, 1, 3, 3, 1, 1, 1, 1, 1, 1, 4, 4}));
}

}  // namespace
}  // namespace mixtape
