// tests/ops/test_conv_weight_grad_pairs.cpp — the BF16 weight-gradient kernel on image pairs
// (ops/cpu/conv_weight_grad_avx512.h, conv_weight_grad_pairs) that conv2d_weight_grad takes for
// native BF16 on vdpbf16ps, beyond what tests/ops/test_kernel_entries.cpp derives for its entry
// (conv2d.wgrad:pairs_avx512bf16, whose result the op rounds to BF16):
//   - called directly, its FP32 result (every element written) against an FP64 reference of the
//     BF16 operands within the FP32 summation bound of its reduction length N OH OW, no BF16
//     rounding, on every geometry of tests/ops/conv_geometries.h it takes (vectors of O, short
//     pair blocks, strides, odd widths, dilation, staged chunks, odd batches and a batch of one:
//     the last image paired with zeros, a ragged 16-pixel transpose of gy, one channel);
//   - the same bits on 1, 2 and 3 threads;
//   - infinities and NaN reach the same gradients through conv2d_weight_grad as on the emulated path;
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
#include "ops/conv_geometries.h"
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

using Geo = testing::ConvGeometry;
using testing::kConvGeometries;

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

TEST(ConvWeightGradPairs, KernelMatchesFp64OnEveryGeometryItTakes) {
  MT_REQUIRE_KERNEL();
  int checked = 0;
  for (const Geo& geo : kConvGeometries) {
    if (geo.G != 1 || !cpu::conv_weight_grad_pairs_applies(geo.shape())) continue;
    ++checked;
    SCOPED_TRACE(geo.what);
    const Inputs in = make_inputs(geo, 61);
    const Tensor x64 = in.x.to(DType::Float64), g64 = in.gy.to(DType::Float64);
    const Tensor ref = op(geo, x64, g64), absterms = op(geo, abs(x64), abs(g64));
    EXPECT_TRUE(within_sum_bound(pairs(geo, in), ref, absterms, geo.N * geo.OH() * geo.OW(), 1.0, 0));
  }
  EXPECT_GE(checked, 30);
}

TEST(ConvWeightGradPairs, SameBitsOnOneTwoAndThreeThreads) {
  MT_REQUIRE_KERNEL();
  // A team's worth of work (2^21 multiply-adds), two staged chunks (20 and 11 images: the last pair
  // half empty), a short pair block.
  // One channel, 75 images: one block, 5 chunks (the last image paired with zeros): 1 thread runs
  // the block split, 2 and 3 split the chunks — the same operations, so the same bits.
  // (Sized for the team: no geometry of the list is.)
  for (const Geo& geo : {Geo{"blocks split", 31, 25, 14, 14, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1},
                         Geo{"chunks split", 75, 1, 28, 28, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1}}) {
    SCOPED_TRACE(geo.what);
    const Inputs in = make_inputs(geo, 62);
    const std::vector<Tensor> got = testing::on_thread_counts({1, 2, 3}, [&] { return pairs(geo, in); });
    EXPECT_TRUE(bit_equal(got[0], got[1]));
    EXPECT_TRUE(bit_equal(got[0], got[2]));
  }
}

TEST(ConvWeightGradPairs, InfinitiesAndNanReachTheGradientsTheEmulatedPathGives) {
  MT_REQUIRE_KERNEL();
  // Three images: the third is paired with zeros, and holds a NaN of its own.
  const Geo& geo = testing::conv_geometry("ResNet-8 layer1, N 3: the last image paired with zeros");
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
