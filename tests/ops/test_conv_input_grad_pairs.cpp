// tests/ops/test_conv_input_grad_pairs.cpp — the BF16 input-gradient kernel on output-channel pairs
// (ops/cpu/conv_input_grad_avx512.h, conv_input_grad_pairs) that conv2d_input_grad takes for native
// BF16 on vdpbf16ps where the FP32 kernel applies (strided convs), beyond what
// tests/ops/test_kernel_entries.cpp derives for its entry (conv2d.dgrad:pairs_avx512bf16):
//   - called directly (every element written), against an FP64 reference of the BF16 operands
//     within the FP32 summation bound (each input pixel sums at most O kH 3 products) plus the one
//     rounding to BF16, on every geometry of tests/ops/conv_geometries.h it takes, O = 1 included
//     (one pair, its high half zero), which its entry leaves to the FP32 kernel;
//   - the same bits on 1, 2 and 3 threads;
//   - infinities and NaN reach the same gradients through conv2d_input_grad as on the emulated path;
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
#include "ops/conv_geometries.h"
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

using Geo = testing::ConvGeometry;
using testing::kConvGeometries;
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

TEST(ConvInputGradPairs, KernelMatchesFp64OnEveryGeometryItTakes) {
  MT_REQUIRE_KERNEL();
  int checked = 0;
  for (const Geo& g : kConvGeometries) {
    if (g.G != 1 || !cpu::conv_input_grad_pairs_applies(g.shape())) continue;
    ++checked;
    SCOPED_TRACE(g.what);
    const Inputs in = make_inputs(g, 71);
    const Tensor gy64 = in.gy.to(DType::Float64), w64 = in.w.to(DType::Float64);
    const Tensor ref = op(g, gy64, w64), absterms = op(g, abs(gy64), abs(w64));
    // The FP32 sum of exact products (at most O kH 3 of them), then one rounding to BF16.
    EXPECT_TRUE(within_sum_bound(pairs(g, in), ref, absterms, g.O * g.kH * g.kW, 1.0, 1));
  }
  EXPECT_GE(checked, 30);
}

TEST(ConvInputGradPairs, SameBitsOnOneTwoAndThreeThreads) {
  MT_REQUIRE_KERNEL();
  // 2^21+ multiply-adds: a team runs (no geometry of the list is that big); O odd.
  const Geo g{"team-sized", 5, 24, 16, 16, 41, 3, 3, 2, 2, 1, 1, 1, 1, 1};
  const Inputs in = make_inputs(g, 72);
  const std::vector<Tensor> got = testing::on_thread_counts({1, 2, 3}, [&] { return pairs(g, in); });
  EXPECT_TRUE(bit_equal(got[0], got[1]));
  EXPECT_TRUE(bit_equal(got[0], got[2]));
}

TEST(ConvInputGradPairs, InfinitiesAndNanReachTheGradientsTheEmulatedPathGives) {
  MT_REQUIRE_KERNEL();
  const Geo& g = testing::conv_geometry("ResNet-8/20 stride-2 3x3");  // 14x14 planes of gy, O 32
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
