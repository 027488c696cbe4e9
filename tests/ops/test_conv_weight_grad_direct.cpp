// tests/ops/test_conv_weight_grad_direct.cpp — the AVX-512 weight-gradient kernel without im2col
// (ops/cpu/conv_weight_grad_avx512.h) that conv2d_weight_grad takes for kernels 3 columns wide:
//   - called directly, against an FP64 reference within the FP32 summation bound of its reduction
//     length N OH OW, at every blocking edge: 1, 2 and 4 vectors of output channels and O not a
//     multiple of 16, short last pair blocks, strides, padding past the kernel's reach, row
//     dilation, kernel heights 1 and 5, padded rows longer than one 16-column chunk, several image
//     chunks with a short last one, one input channel (one block: with more than one thread the
//     team splits the image chunks instead, run_by_chunks);
//   - (the thread-count test also compares that chunk split, 2 and 3 threads, with the block split,
//     1 thread)
//   - conv2d_weight_grad returns exactly the kernel's bits (so the op really takes it), and stays
//     within twice the bound of im2col + GEMM;
//   - the same bits on 1, 2 and 3 OpenMP threads (im2col + GEMM's weight gradient is not);
//   - BF16 and FP16 storage: bit for bit the FP32 kernel on the widened operands (and the op's
//     result that, rounded once);
//   - geometries it does not take fall back to im2col + GEMM's bits.
#include <gtest/gtest.h>
#include <omp.h>

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <mixtape/mixtape.h>

#include "common/bit_equal.h"
#include "common/on_thread_counts.h"
#include "common/sum_bound.h"
#include "ops/conv3_geometry.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/conv_implicit_gemm.h"
#include "ops/cpu/conv_weight_grad_avx512.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/steering.h"

namespace mixtape {
namespace {

using testing::bit_equal;
using testing::within_sum_bound;

// False on CPUs without AVX-512 F/BW/VL and under MIXTAPE_CPU_CONV=im2col (the kernel refuses to run).
bool kernel_available() {
  return cpu::own_kernels_enabled() &&
         cpu::conv_weight_grad_direct_applies({2, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 8, 8});
}
#define MT_REQUIRE_KERNEL() \
  if (!kernel_available()) GTEST_SKIP() << "no AVX-512 F/BW/VL, or MIXTAPE_CPU_CONV=im2col, or MIXTAPE_GEMM=blas"

using Geo = testing::Conv3;  // the bias flag unused here
const Geo kGeos[] = {
    {2, 16, 28, 28, 16, 3, 1, 1, 1, 1, 1, false, "ResNet-8's layer1: one vector of channels, 6 full pair blocks"},
    {3, 5, 9, 11, 17, 3, 1, 1, 1, 1, 1, false, "O = 17: two vectors, the second one channel; 15 pairs, last block 3"},
    {2, 16, 12, 12, 32, 3, 2, 2, 1, 1, 1, false, "stride 2, two vectors"},
    {2, 8, 7, 7, 64, 3, 1, 1, 1, 1, 1, false, "four vectors, 7x7 planes (49 pixels: a ragged 16-pixel transpose)"},
    {2, 6, 10, 9, 48, 3, 2, 1, 0, 2, 2, false, "O = 48 (three one-vector blocks), row stride 2, dH 2, pW past reach"},
    {1, 6, 5, 40, 8, 5, 1, 2, 2, 1, 1, false, "5 rows, column stride 2, padded rows of 41 columns (3 chunks)"},
    {7, 64, 20, 20, 16, 3, 1, 1, 1, 1, 1, false, "3 images per chunk: chunks of 3, 3 and 1"},
    {2, 3, 1, 3, 64, 3, 1, 1, 1, 1, 1, false, "H = 1: two of three kernel rows read padding"},
    {2, 8, 6, 11, 64, 1, 1, 1, 0, 1, 1, false, "1x3 kernel"},
    {3, 4, 6, 6, 40, 3, 1, 1, 0, 0, 1, false, "no padding, O = 40: three one-vector blocks"},
    {20, 1, 28, 28, 16, 3, 1, 1, 1, 1, 1, false, "one channel: one short block, chunks of 9, 9 and 2 split"},
};

Tensor op(const Geo& g, const Tensor& x, const Tensor& gy) {
  return conv2d_weight_grad(x, gy, g.w_size(), g.stride(), g.padding(), g.dilation());
}

struct Inputs {
  Tensor x, gy;  // f32
};
Inputs make_inputs(const Geo& g, uint64_t seed) {
  Generator gen(seed);
  return {randn(g.x_size(), {}, &gen), randn(g.y_size(), {}, &gen)};
}

// The kernel itself on x and gy of storage type E.
template <typename E>
Tensor direct(const Geo& g, const Tensor& x, const Tensor& gy) {
  Tensor gw = full(g.w_size(), std::numeric_limits<float>::quiet_NaN());  // every element written
  cpu::conv_weight_grad_direct(g.shape(), static_cast<const E*>(x.data_ptr()), static_cast<const E*>(gy.data_ptr()),
                               static_cast<float*>(gw.data_ptr()));
  return gw;
}
Tensor with_algo(cpu::ConvAlgo a, const std::function<Tensor()>& f) {
  cpu::Override o(a);
  return f();
}

TEST(ConvWeightGradDirect, KernelMatchesFp64AtEveryEdge) {
  MT_REQUIRE_KERNEL();
  for (const Geo& geo : kGeos) {
    SCOPED_TRACE(geo.what);
    ASSERT_TRUE(cpu::conv_weight_grad_direct_applies(geo.shape()));
    const Inputs in = make_inputs(geo, 31);
    const Tensor x64 = in.x.to(DType::Float64), g64 = in.gy.to(DType::Float64);
    const Tensor ref = op(geo, x64, g64), absterms = op(geo, abs(x64), abs(g64));
    EXPECT_TRUE(within_sum_bound(direct<float>(geo, in.x, in.gy), ref, absterms, geo.N * geo.OH() * geo.OW(), 1.0, 0));
  }
}

TEST(ConvWeightGradDirect, TheOpReturnsTheKernelsBitsWithinTheBoundOfIm2col) {
  MT_REQUIRE_KERNEL();
  for (const Geo& geo : kGeos) {
    SCOPED_TRACE(geo.what);
    const Inputs in = make_inputs(geo, 32);
    const Tensor got = with_algo(cpu::ConvAlgo::Auto, [&] { return op(geo, in.x, in.gy); });
    const Tensor old = with_algo(cpu::ConvAlgo::Im2col, [&] { return op(geo, in.x, in.gy); });
    EXPECT_TRUE(bit_equal(got, direct<float>(geo, in.x, in.gy)));
    const Tensor x64 = in.x.to(DType::Float64), g64 = in.gy.to(DType::Float64);
    EXPECT_TRUE(within_sum_bound(got, old.to(DType::Float64), op(geo, abs(x64), abs(g64)), geo.N * geo.OH() * geo.OW(),
                                 2.0, 0));
  }
}

TEST(ConvWeightGradDirect, SameBitsOnOneTwoAndThreeThreads) {
  MT_REQUIRE_KERNEL();
  // A team's worth of work (2^21 multiply-adds), two chunks of 11 images and a short one of 8, a
  // short pair block (75 pairs, 4 to a block).
  // One channel, 64 images: one block, 8 chunks: 1 thread runs the block split, 2 and 3 split the
  // chunks (run_by_chunks) — the same operations, so the same bits.
  for (const Geo& geo : {Geo{30, 25, 13, 13, 20, 3, 1, 1, 1, 1, 1, false, "blocks split"},
                         Geo{64, 1, 28, 28, 16, 3, 1, 1, 1, 1, 1, false, "chunks split"}}) {
    SCOPED_TRACE(geo.what);
    const Inputs in = make_inputs(geo, 33);
    const std::vector<Tensor> got = testing::on_thread_counts({1, 2, 3}, [&] { return op(geo, in.x, in.gy); });
    EXPECT_TRUE(bit_equal(got[0], got[1]));
    EXPECT_TRUE(bit_equal(got[0], got[2]));
  }
}

TEST(ConvWeightGradDirect, SixteenBitStorageIsTheFp32KernelOnWidenedOperands) {
  MT_REQUIRE_KERNEL();
  for (const Geo& geo : kGeos) {
    SCOPED_TRACE(geo.what);
    const Inputs in = make_inputs(geo, 34);
    for (DType dt : {DType::BFloat16, DType::Float16}) {
      const Tensor x = in.x.to(dt), gy = in.gy.to(dt);
      const Tensor f32 = direct<float>(geo, x.to(DType::Float32), gy.to(DType::Float32));
      const Tensor got = dt == DType::BFloat16 ? direct<BFloat16>(geo, x, gy) : direct<Half>(geo, x, gy);
      EXPECT_TRUE(bit_equal(got, f32)) << dtype_name(dt);
      cpu::Override o(cpu::Bf16GemmPath::Emulated);  // BF16 in FP32 arithmetic (FP16 always is)
      EXPECT_TRUE(bit_equal(op(geo, x, gy), f32.to(dt))) << dtype_name(dt);
    }
  }
}

TEST(ConvWeightGradDirect, OtherGeometriesKeepIm2colsBits) {
  MT_REQUIRE_KERNEL();
  Generator gen(35);
  const Tensor x = randn({2, 4, 9, 8}, {}, &gen);
  struct Case {
    IntList w, stride, padding, dilation;
    int64_t groups;
    const char* what;
  };
  const Case cases[] = {
      {{16, 4, 3, 1}, {1, 1}, {1, 0}, {1, 1}, 1, "kernel width 1"},
      {{16, 4, 3, 5}, {1, 1}, {1, 2}, {1, 1}, 1, "kernel width 5"},
      {{16, 4, 3, 3}, {1, 1}, {1, 2}, {1, 2}, 1, "column dilation"},
      {{16, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2, "groups"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    const Tensor y = conv2d(x, randn(k.w, {}, &gen), Tensor(), k.stride, k.padding, k.dilation, k.groups);
    const Tensor gy = randn(y.sizes(), {}, &gen);
    const auto f = [&] { return conv2d_weight_grad(x, gy, k.w, k.stride, k.padding, k.dilation, k.groups); };
    EXPECT_TRUE(bit_equal(with_algo(cpu::ConvAlgo::Auto, f), with_algo(cpu::ConvAlgo::Im2col, f)));
  }
  // The kernel's own test of the geometry, on the shapes above; the 1-channel first layers it takes.
  EXPECT_TRUE(cpu::conv_weight_grad_direct_applies({2, 1, 28, 28, 16, 3, 3, 1, 1, 1, 1, 1, 1, 28, 28}));
  EXPECT_FALSE(cpu::conv_weight_grad_direct_applies({2, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 2, 8, 6}));
  EXPECT_FALSE(cpu::conv_weight_grad_direct_applies({2, 16, 8, 8, 16, 3, 5, 1, 1, 1, 2, 1, 1, 8, 8}));
  EXPECT_FALSE(cpu::conv_weight_grad_direct_applies({2, 16, 8, 2000, 16, 3, 3, 1, 1, 1, 1, 1, 1, 8, 2000}));
  {
    cpu::Override o(cpu::ConvAlgo::Im2col);
    EXPECT_FALSE(cpu::conv_weight_grad_direct_applies({2, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 8, 8}));
  }
}

}  // namespace
}  // namespace mixtape
