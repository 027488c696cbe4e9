// tests/ops/test_conv_weight_grad_pairs.cpp — the BF16 weight-gradient kernel on image pairs
// (ops/cpu/conv_weight_grad_avx512.h, conv_weight_grad_pairs) that conv2d_weight_grad takes for
// native BF16 on vdpbf16ps:
//   - called directly, against an FP64 reference of the BF16 operands within the FP32 summation
//     bound of its reduction length N OH OW, at every blocking edge: 1, 2 and 4 vectors of output
//     channels and O not a multiple of 16, short last pair blocks, column and row strides, odd
//     output widths, padding past the kernel's reach, row dilation, kernel heights 1 and 5, several
//     staged chunks, an odd batch (the last image paired with zeros) and a batch of one, a ragged
//     16-pixel transpose of gy, one input channel (one block: the team splits the chunks);
//   - the same bits on 1, 2 and 3 threads;
//   - conv2d_weight_grad returns its bits where it applies, within twice the bound of the FP32
//     kernel on the widened operands (the emulated path); infinities and NaN reach the same
//     gradients as there;
//   - what it does not take: geometries the FP32 kernel does not take, emulated BF16.
#include <gtest/gtest.h>

#include <cmath>
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
#include "ops/cpu/conv_weight_grad_avx512.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/steering.h"

namespace mixtape {
namespace {

using testing::bit_equal;
using testing::within_sum_bound;

// False without AVX512-BF16 and under MIXTAPE_CPU_CONV=im2col (MT_REQUIRE_KERNEL puts BF16 GEMMs on
// vdpbf16ps for the test where the CPU has it, AMX CPUs included).
bool kernel_available() {
  return cpu::own_kernels_enabled() &&
         cpu::conv_weight_grad_pairs_applies({2, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 8, 8});
}
#define MT_REQUIRE_KERNEL()              \
  const testing::OnAvx512Bf16 on_avx512_bf16; \
  if (!kernel_available()) GTEST_SKIP() << "BF16 GEMMs do not run on AVX512-BF16 here (or MIXTAPE_CPU_CONV=im2col, MIXTAPE_GEMM=blas)"

using Geo = testing::Conv3;  // the bias flag unused here
const Geo kGeos[] = {
    {2, 16, 28, 28, 16, 3, 1, 1, 1, 1, 1, false, "ResNet-8's layer1: one vector of channels, one image pair"},
    {3, 5, 9, 11, 17, 3, 1, 1, 1, 1, 1, false, "O = 17; 15 pairs, last block 3; N = 3: the last image with zeros"},
    {2, 16, 12, 12, 32, 3, 2, 2, 1, 1, 1, false, "stride 2, two vectors"},
    {2, 8, 7, 7, 64, 3, 1, 1, 1, 1, 1, false, "four vectors, 7x7 planes (49 pixels: a ragged transpose)"},
    {2, 6, 10, 9, 48, 3, 2, 1, 0, 2, 2, false, "O = 48 (three one-vector blocks), row stride 2, dH 2, pW past reach"},
    {1, 6, 5, 40, 8, 5, 1, 2, 2, 1, 1, false, "N = 1 (a pair with zeros), column stride 2, padded rows of 41"},
    {7, 64, 28, 28, 16, 3, 1, 1, 1, 1, 1, false, "2 images (one pair) per staged chunk: chunks of 2, 2, 2 and 1"},
    {2, 3, 1, 3, 64, 3, 1, 1, 1, 1, 1, false, "H = 1: two of three kernel rows read padding"},
    {2, 8, 6, 11, 64, 1, 1, 1, 0, 1, 1, false, "1x3 kernel"},
    {3, 4, 6, 6, 40, 3, 1, 1, 0, 0, 1, false, "no padding, O = 40"},
    {41, 1, 28, 28, 16, 3, 1, 1, 1, 1, 1, false, "one channel: one short block; chunks of 18, 18 and 5 split"},
};

Tensor op(const Geo& g, const Tensor& x, const Tensor& gy) {
  return conv2d_weight_grad(x, gy, g.w_size(), g.stride(), g.padding(), g.dilation());
}

struct Inputs {
  Tensor x, gy;  // BF16
};
Inputs make_inputs(const Geo& g, uint64_t seed) {
  Generator gen(seed);
  return {randn(g.x_size(), {}, &gen).to(DType::BFloat16), randn(g.y_size(), {}, &gen).to(DType::BFloat16)};
}

Tensor pairs(const Geo& g, const Inputs& in) {
  Tensor gw = full(g.w_size(), std::numeric_limits<float>::quiet_NaN());  // every element written
  cpu::conv_weight_grad_pairs(g.shape(), static_cast<const BFloat16*>(in.x.data_ptr()),
                              static_cast<const BFloat16*>(in.gy.data_ptr()), static_cast<float*>(gw.data_ptr()));
  return gw;
}

TEST(ConvWeightGradPairs, KernelMatchesFp64AtEveryEdge) {
  MT_REQUIRE_KERNEL();
  for (const Geo& geo : kGeos) {
    SCOPED_TRACE(geo.what);
    ASSERT_TRUE(cpu::conv_weight_grad_pairs_applies(geo.shape()));
    const Inputs in = make_inputs(geo, 61);
    const Tensor x64 = in.x.to(DType::Float64), g64 = in.gy.to(DType::Float64);
    const Tensor ref = op(geo, x64, g64), absterms = op(geo, abs(x64), abs(g64));
    EXPECT_TRUE(within_sum_bound(pairs(geo, in), ref, absterms, geo.N * geo.OH() * geo.OW(), 1.0, 0));
  }
}

TEST(ConvWeightGradPairs, SameBitsOnOneTwoAndThreeThreads) {
  MT_REQUIRE_KERNEL();
  // A team's worth of work (2^21 multiply-adds), two staged chunks (20 and 11 images: the last pair
  // half empty), a short pair block.
  // One channel, 75 images: one block, 5 chunks (the last image paired with zeros): 1 thread runs
  // the block split, 2 and 3 split the chunks — the same operations, so the same bits.
  for (const Geo& geo : {Geo{31, 25, 14, 14, 20, 3, 1, 1, 1, 1, 1, false, "blocks split"},
                         Geo{75, 1, 28, 28, 16, 3, 1, 1, 1, 1, 1, false, "chunks split"}}) {
    SCOPED_TRACE(geo.what);
    const Inputs in = make_inputs(geo, 62);
    const std::vector<Tensor> got = testing::on_thread_counts({1, 2, 3}, [&] { return pairs(geo, in); });
    EXPECT_TRUE(bit_equal(got[0], got[1]));
    EXPECT_TRUE(bit_equal(got[0], got[2]));
  }
}

TEST(ConvWeightGradPairs, TheOpReturnsItsBitsWithinTheBoundOfTheEmulatedPath) {
  MT_REQUIRE_KERNEL();
  for (const Geo& geo : kGeos) {
    SCOPED_TRACE(geo.what);
    const Inputs in = make_inputs(geo, 63);
    const Tensor got = op(geo, in.x, in.gy);
    EXPECT_TRUE(bit_equal(got, pairs(geo, in).to(DType::BFloat16)));  // the op's one rounding
    Tensor emulated;
    {
      cpu::Override o(cpu::Bf16GemmPath::Emulated);
      emulated = op(geo, in.x, in.gy);
    }
    const Tensor x64 = in.x.to(DType::Float64), g64 = in.gy.to(DType::Float64);
    // Two FP32 sums of the same exact products, each rounded once to BF16.
    EXPECT_TRUE(within_sum_bound(got, emulated.to(DType::Float64), op(geo, abs(x64), abs(g64)),
                                 geo.N * geo.OH() * geo.OW(), 2.0, 2));
  }
}

TEST(ConvWeightGradPairs, InfinitiesAndNanReachTheGradientsTheEmulatedPathGives) {
  MT_REQUIRE_KERNEL();
  // Three images: the third is paired with zeros, and holds a NaN of its own.
  const Geo geo{3, 16, 28, 28, 16, 3, 1, 1, 1, 1, 1, false, "three images"};
  Inputs in = make_inputs(geo, 64);
  BFloat16* x = static_cast<BFloat16*>(in.x.data_ptr());
  const int64_t image = geo.C * geo.H * geo.W;
  x[29] = BFloat16(std::numeric_limits<float>::infinity());  // row 1, column 1 of image 0, channel 0
  x[900] = BFloat16(std::numeric_limits<float>::quiet_NaN());
  x[2 * image + 5 * 784 + 400] = BFloat16(std::numeric_limits<float>::quiet_NaN());  // image 2, channel 5
  static_cast<BFloat16*>(in.gy.data_ptr())[100] = BFloat16(-std::numeric_limits<float>::infinity());
  const Tensor got = op(geo, in.x, in.gy);
  Tensor emulated;
  {
    cpu::Override o(cpu::Bf16GemmPath::Emulated);
    emulated = op(geo, in.x, in.gy);
  }
  EXPECT_TRUE(testing::same_specials(got, emulated, 11));
}

TEST(ConvWeightGradPairs, WhatItDoesNotTake) {
  MT_REQUIRE_KERNEL();
  EXPECT_TRUE(cpu::conv_weight_grad_pairs_applies({2, 16, 12, 12, 32, 3, 3, 2, 2, 1, 1, 1, 1, 6, 6}));   // sW 2
  EXPECT_FALSE(cpu::conv_weight_grad_pairs_applies({2, 16, 8, 8, 16, 3, 5, 1, 1, 1, 2, 1, 1, 8, 8}));    // kW 5
  EXPECT_TRUE(cpu::conv_weight_grad_pairs_applies({2, 1, 28, 28, 16, 3, 3, 1, 1, 1, 1, 1, 1, 28, 28}));   // 1 block
  cpu::Override o(cpu::Bf16GemmPath::Emulated);
  EXPECT_FALSE(cpu::conv_weight_grad_pairs_applies({2, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 8, 8}));
}

}  // namespace
}  // namespace mixtape
