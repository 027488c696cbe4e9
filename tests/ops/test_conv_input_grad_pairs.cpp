// tests/ops/test_conv_input_grad_pairs.cpp — the BF16 input-gradient kernel on output-channel pairs
// (ops/cpu/conv_input_grad_avx512.h, conv_input_grad_pairs) that conv2d_input_grad takes for native
// BF16 on vdpbf16ps where the FP32 kernel applies (strided convs):
//   - called directly, against an FP64 reference of the BF16 operands within the FP32 summation
//     bound (each input pixel sums at most O kH 3 products) plus the one rounding to BF16, at every
//     blocking edge: one and two vectors of input channels and C not a multiple of 16, pixel blocks
//     of every length the row split makes, row strides 1-3, padding past the kernel's reach, row
//     dilation, kernel heights 1 and 5, unread input rows and columns (zero there), odd O (the last
//     pair's high half zero) and O = 1;
//   - the same bits on 1, 2 and 3 threads;
//   - conv2d_input_grad returns its bits for strided convs, within twice the bound of the FP32
//     kernel on the widened operands (the emulated path); infinities and NaN reach the same
//     gradients as there;
//   - what it does not take: emulated BF16, geometries the FP32 kernel does not take.
#include <gtest/gtest.h>

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
#include "ops/cpu/conv_input_grad_avx512.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/steering.h"

namespace mixtape {
namespace {

using testing::bit_equal;
using testing::within_sum_bound;

// False without AVX512-BF16, under MIXTAPE_CPU_CONV=im2col and under MIXTAPE_GEMM=blas (where conv2d
// keeps its GEMM paths; MT_REQUIRE_KERNEL puts BF16 GEMMs on vdpbf16ps for the test where the CPU
// has it, AMX CPUs included).
bool kernel_available() {
  return cpu::own_kernels_enabled() &&
         cpu::conv_input_grad_pairs_applies({1, 2, 4, 4, 2, 3, 3, 2, 2, 1, 1, 1, 1, 2, 2});
}
#define MT_REQUIRE_KERNEL()                   \
  const testing::OnAvx512Bf16 on_avx512_bf16; \
  if (!kernel_available())                    \
  GTEST_SKIP() << "BF16 GEMMs do not run on AVX512-BF16 here (or MIXTAPE_CPU_CONV=im2col, MIXTAPE_GEMM=blas)"

using Geo = testing::Conv3;  // the bias flag unused here
const Geo kGeos[] = {
    {2, 16, 28, 28, 32, 3, 2, 2, 1, 1, 1, false, "ResNet-8's 16 -> 32 stride 2: one vector, blocks of 7"},
    {2, 32, 14, 14, 64, 3, 2, 2, 1, 1, 1, false, "ResNet-8's 32 -> 64 stride 2: two vectors, 7-pixel rows"},
    {2, 64, 9, 9, 8, 3, 2, 2, 1, 1, 1, false, "four vectors: two two-vector blocks"},
    {3, 17, 9, 11, 5, 3, 1, 1, 1, 1, 1, false, "C = 17: two vectors, the second one channel; O = 5 (odd); stride 1"},
    {1, 40, 8, 49, 6, 3, 1, 2, 1, 1, 1, false, "C = 40: one-vector blocks; 25-pixel rows"},
    {2, 4, 10, 26, 7, 3, 3, 2, 0, 2, 2, false, "row stride 3, dilation 2, pW past reach; O = 7"},
    {2, 6, 5, 40, 8, 5, 1, 2, 2, 1, 1, false, "5 rows, column stride 2"},
    {2, 3, 1, 3, 16, 3, 1, 1, 1, 1, 1, false, "H = 1"},
    {2, 8, 6, 11, 12, 1, 2, 1, 0, 1, 1, false, "1x3 kernel, row stride 2"},
    {2, 4, 7, 4, 5, 3, 2, 2, 0, 0, 1, false, "no padding: 1-pixel rows; the last row and column unread"},
    {2, 5, 9, 9, 1, 3, 2, 2, 1, 1, 1, false, "O = 1: one pair, its high half zero"},
};

Tensor op(const Geo& g, const Tensor& gy, const Tensor& w) {
  return conv2d_input_grad(gy, w, g.x_size(), g.stride(), g.padding(), g.dilation());
}

struct Inputs {
  Tensor gy, w;  // BF16
};
Inputs make_inputs(const Geo& g, uint64_t seed) {
  Generator gen(seed);
  return {randn(g.y_size(), {}, &gen).to(DType::BFloat16), randn(g.w_size(), {}, &gen).to(DType::BFloat16)};
}

Tensor pairs(const Geo& g, const Inputs& in) {
  Tensor gx = full(g.x_size(), std::numeric_limits<float>::quiet_NaN()).to(DType::BFloat16);  // every element written
  cpu::conv_input_grad_pairs(g.shape(), static_cast<const BFloat16*>(in.gy.data_ptr()),
                             static_cast<const BFloat16*>(in.w.data_ptr()), static_cast<BFloat16*>(gx.data_ptr()));
  return gx;
}

TEST(ConvInputGradPairs, KernelMatchesFp64AtEveryEdge) {
  MT_REQUIRE_KERNEL();
  for (const Geo& g : kGeos) {
    SCOPED_TRACE(g.what);
    ASSERT_TRUE(cpu::conv_input_grad_pairs_applies(g.shape()));
    const Inputs in = make_inputs(g, 71);
    const Tensor gy64 = in.gy.to(DType::Float64), w64 = in.w.to(DType::Float64);
    const Tensor ref = op(g, gy64, w64), absterms = op(g, abs(gy64), abs(w64));
    // The FP32 sum of exact products (at most O kH 3 of them), then one rounding to BF16.
    EXPECT_TRUE(within_sum_bound(pairs(g, in), ref, absterms, g.O * g.kH * 3, 1.0, 1));
  }
}

TEST(ConvInputGradPairs, SameBitsOnOneTwoAndThreeThreads) {
  MT_REQUIRE_KERNEL();
  const Geo g{5, 24, 16, 16, 41, 3, 2, 2, 1, 1, 1, false, ""};  // 2^21+ multiply-adds: a team runs; O odd
  const Inputs in = make_inputs(g, 72);
  const std::vector<Tensor> got = testing::on_thread_counts({1, 2, 3}, [&] { return pairs(g, in); });
  EXPECT_TRUE(bit_equal(got[0], got[1]));
  EXPECT_TRUE(bit_equal(got[0], got[2]));
}

TEST(ConvInputGradPairs, TheOpReturnsItsBitsForStridedConvsWithinTheBoundOfTheEmulatedPath) {
  MT_REQUIRE_KERNEL();
  int strided = 0;
  for (const Geo& g : kGeos) {
    if (g.sH == 1 && g.sW == 1) continue;  // unit strides run as a forward conv
    SCOPED_TRACE(g.what);
    const Inputs in = make_inputs(g, 73);
    const Tensor got = op(g, in.gy, in.w);
    if (g.O >= 2) {  // one output channel stays on the FP32 kernel
      EXPECT_TRUE(bit_equal(got, pairs(g, in)));
      ++strided;
    }
    Tensor emulated;
    {
      cpu::Override o(cpu::Bf16GemmPath::Emulated);
      emulated = op(g, in.gy, in.w);
    }
    const Tensor gy64 = in.gy.to(DType::Float64), w64 = in.w.to(DType::Float64);
    // Two FP32 sums of the same exact products, each rounded once to BF16.
    EXPECT_TRUE(within_sum_bound(got, emulated.to(DType::Float64), op(g, abs(gy64), abs(w64)), g.O * g.kH * 3, 2.0, 2));
  }
  EXPECT_GE(strided, 6);
}

TEST(ConvInputGradPairs, InfinitiesAndNanReachTheGradientsTheEmulatedPathGives) {
  MT_REQUIRE_KERNEL();
  const Geo g = kGeos[0];
  Inputs in = make_inputs(g, 74);
  BFloat16* gy = static_cast<BFloat16*>(in.gy.data_ptr());
  gy[3] = BFloat16(std::numeric_limits<float>::infinity());
  gy[196 + 50] = BFloat16(-std::numeric_limits<float>::infinity());  // channel 1: the high half of pair 0
  gy[31 * 196 + 7] = BFloat16(std::numeric_limits<float>::quiet_NaN());  // the last channel
  static_cast<BFloat16*>(in.w.data_ptr())[2] = BFloat16(0.0f);  // inf * a zero weight: NaN
  const Tensor got = op(g, in.gy, in.w);
  Tensor emulated;
  {
    cpu::Override o(cpu::Bf16GemmPath::Emulated);
    emulated = op(g, in.gy, in.w);
  }
  EXPECT_TRUE(testing::same_specials(got, emulated, 31));
}

TEST(ConvInputGradPairs, WhatItDoesNotTake) {
  MT_REQUIRE_KERNEL();
  EXPECT_FALSE(cpu::conv_input_grad_pairs_applies({1, 2, 9, 9, 4, 3, 3, 1, 3, 1, 1, 1, 1, 9, 3}));  // column stride 3
  EXPECT_FALSE(cpu::conv_input_grad_pairs_applies({1, 2, 9, 9, 4, 3, 5, 2, 2, 1, 2, 1, 1, 5, 5}));  // width 5
  cpu::Override o(cpu::Bf16GemmPath::Emulated);
  EXPECT_FALSE(cpu::conv_input_grad_pairs_applies({1, 2, 4, 4, 2, 3, 3, 2, 2, 1, 1, 1, 1, 2, 2}));
}

}  // namespace
}  // namespace mixtape
