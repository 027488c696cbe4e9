// tests/ops/test_conv_weight_grad_direct.cpp — the AVX-512 weight-gradient kernel without im2col
// (ops/cpu/conv_weight_grad_avx512.h) that conv2d_weight_grad takes for kernels 3 columns wide. Its
// numbers against FP64 are tests/ops/test_kernel_entries.cpp's (conv2d.wgrad:direct_avx512, on
// every geometry of tests/ops/conv_geometries.h it takes: vectors of O, pair blocks, strides,
// padding, dilation, image chunks, one channel); here what those do not derive:
//   - the same bits on 1, 2 and 3 OpenMP threads (im2col + GEMM's weight gradient is not), and
//     the chunk split (one channel, 2 and 3 threads, run_by_chunks) equal to the block split;
//   - BF16 and FP16 storage: bit for bit the FP32 kernel on the widened operands (and the op's
//     result that, rounded once);
//   - geometries it does not take keep im2col + GEMM's bits.
#include <gtest/gtest.h>
#include <omp.h>

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <mixtape/mixtape.h>

#include "common/bit_equal.h"
#include "common/on_thread_counts.h"
#include "ops/conv_geometries.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/conv_implicit_gemm.h"
#include "ops/cpu/conv_weight_grad_avx512.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/steering.h"

namespace mixtape {
namespace {

using testing::bit_equal;

// False on CPUs without AVX-512 F/BW/VL and under MIXTAPE_CPU_CONV=im2col (the kernel refuses to run).
bool kernel_available() {
  return cpu::own_kernels_enabled() &&
         cpu::conv_weight_grad_direct_applies({2, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 8, 8});
}
#define MT_REQUIRE_KERNEL() \
  if (!kernel_available()) GTEST_SKIP() << "no AVX-512 F/BW/VL, or MIXTAPE_CPU_CONV=im2col, or MIXTAPE_GEMM=blas"

using Geo = testing::ConvGeometry;
using testing::kConvGeometries;

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

TEST(ConvWeightGradDirect, SameBitsOnOneTwoAndThreeThreads) {
  MT_REQUIRE_KERNEL();
  // A team's worth of work (2^21 multiply-adds), two chunks of 11 images and a short one of 8, a
  // short pair block (75 pairs, 4 to a block).
  // One channel, 64 images: one block, 8 chunks: 1 thread runs the block split, 2 and 3 split the
  // chunks (run_by_chunks) — the same operations, so the same bits.
  // (Sized for the team: no geometry of the list is.)
  for (const Geo& geo : {Geo{"blocks split", 30, 25, 13, 13, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1},
                         Geo{"chunks split", 64, 1, 28, 28, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1}}) {
    SCOPED_TRACE(geo.what);
    const Inputs in = make_inputs(geo, 33);
    const std::vector<Tensor> got = testing::on_thread_counts({1, 2, 3}, [&] { return op(geo, in.x, in.gy); });
    EXPECT_TRUE(bit_equal(got[0], got[1]));
    EXPECT_TRUE(bit_equal(got[0], got[2]));
  }
}

TEST(ConvWeightGradDirect, SixteenBitStorageIsTheFp32KernelOnWidenedOperands) {
  MT_REQUIRE_KERNEL();
  int checked = 0;
  for (const Geo& geo : kConvGeometries) {
    if (geo.G != 1 || !cpu::conv_weight_grad_direct_applies(geo.shape())) continue;
    ++checked;
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
  EXPECT_GE(checked, 30);
}

TEST(ConvWeightGradDirect, OtherGeometriesKeepIm2colsBits) {
  MT_REQUIRE_KERNEL();
  int checked = 0;
  for (const Geo& geo : kConvGeometries) {
    if (geo.G == 1 && cpu::conv_weight_grad_direct_applies(geo.shape())) continue;
    ++checked;
    SCOPED_TRACE(geo.what);
    const Inputs in = make_inputs(geo, 35);
    const auto f = [&] {
      return conv2d_weight_grad(in.x, in.gy, geo.w_size(), geo.stride(), geo.padding(), geo.dilation(), geo.G);
    };
    EXPECT_TRUE(bit_equal(with_algo(cpu::ConvAlgo::Auto, f), with_algo(cpu::ConvAlgo::Im2col, f)));
  }
  EXPECT_GE(checked, 8);  // groups, column dilation, kernels 1 and 5 columns wide
  // The kernel's own test of the geometry; the 1-channel first layers it takes.
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
