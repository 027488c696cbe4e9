// tests/ops/test_conv_input_grad_direct.cpp — the FP32 input gradient without col2im
// (ops/cpu/conv_input_grad_avx512.h) that conv2d_input_grad takes for kernels 3 columns wide with
// column stride 1 or 2 where it does not run the gradient as a forward conv (strided convs):
//   - called directly, against an FP64 reference within the FP32 summation bound (each input
//     pixel sums at most O kH 3 products), at every blocking edge: one and two vectors of input
//     channels and C not a multiple of 16 (four vectors: two blocks), pixel blocks of every length
//     the row split makes, row strides 1-3, padding past the kernel's reach, row dilation, kernel
//     heights 1 and 5, input rows and columns no tap reads (zero gradient there);
//   - conv2d_input_grad returns the kernel's bits for strided convs, within twice the bound of
//     col2im's;
//   - BF16 (the 16-bit overloads; the op on the emulated and AMX paths, and on vdpbf16ps with FP32
//     weights) and FP16 storage: bit for bit the FP32 kernel on the widened operands, rounded once;
//     native BF16 on vdpbf16ps is the output-channel-pair kernel's (tests/ops/test_conv_input_grad_pairs.cpp);
//   - the same bits on 1, 2 and 3 threads;
//   - geometries it does not take.
#include <gtest/gtest.h>
#include <omp.h>

#include <functional>
#include <limits>
#include <vector>

#include <mixtape/mixtape.h>

#include "common/bit_equal.h"
#include "common/on_thread_counts.h"
#include "common/sum_bound.h"
#include "ops/conv3_geometry.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/conv_implicit_gemm.h"
#include "ops/cpu/conv_input_grad_avx512.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/steering.h"

namespace mixtape {
namespace {

using testing::bit_equal;
using testing::within_sum_bound;
using Geo = testing::Conv3;  // the bias flag unused here

// False on CPUs without AVX-512 F/BW/VL and under MIXTAPE_CPU_CONV=im2col (the kernel refuses to run),
// and under MIXTAPE_GEMM=blas (conv2d keeps its GEMM paths there).
bool kernel_available() {
  return cpu::own_kernels_enabled() &&
         cpu::conv_input_grad_direct_applies({1, 1, 4, 4, 1, 3, 3, 2, 2, 1, 1, 1, 1, 2, 2});
}
#define MT_REQUIRE_KERNEL() \
  if (!kernel_available()) GTEST_SKIP() << "no AVX-512 F/BW/VL, or MIXTAPE_CPU_CONV=im2col, or MIXTAPE_GEMM=blas"

const Geo kGeos[] = {
    {2, 16, 28, 28, 32, 3, 2, 2, 1, 1, 1, false, "ResNet-8's 16 -> 32 stride 2: one vector, blocks of 7"},
    {2, 32, 14, 14, 64, 3, 2, 2, 1, 1, 1, false, "ResNet-8's 32 -> 64 stride 2: two vectors, 7-pixel rows"},
    {2, 64, 9, 9, 8, 3, 2, 2, 1, 1, 1, false, "four vectors: two two-vector blocks"},
    {3, 17, 9, 11, 5, 3, 1, 1, 1, 1, 1, false, "C = 17: two vectors, the second one channel; stride 1"},
    {1, 40, 8, 49, 6, 3, 1, 2, 1, 1, 1, false, "C = 40: one-vector blocks; 25-pixel rows"},
    {2, 4, 10, 26, 7, 3, 3, 2, 0, 2, 2, false, "row stride 3, dilation 2, pW past reach; unread rows and columns"},
    {2, 6, 5, 40, 8, 5, 1, 2, 2, 1, 1, false, "5 rows, column stride 2"},
    {2, 3, 1, 3, 16, 3, 1, 1, 1, 1, 1, false, "H = 1"},
    {2, 8, 6, 11, 12, 1, 2, 1, 0, 1, 1, false, "1x3 kernel, row stride 2"},
    {2, 4, 7, 4, 5, 3, 2, 2, 0, 0, 1, false, "no padding: 1-pixel rows; the last row and column unread"},
};

Tensor op(const Geo& g, const Tensor& gy, const Tensor& w) {
  return conv2d_input_grad(gy, w, g.x_size(), g.stride(), g.padding(), g.dilation());
}

struct Inputs {
  Tensor gy, w;  // f32
};
Inputs make_inputs(const Geo& g, uint64_t seed) {
  Generator gen(seed);
  return {randn(g.y_size(), {}, &gen), randn(g.w_size(), {}, &gen)};
}

Tensor direct(const Geo& g, const Inputs& in) {
  Tensor gx = full(g.x_size(), std::numeric_limits<float>::quiet_NaN());  // every element written
  cpu::conv_input_grad_direct(g.shape(), static_cast<const float*>(in.gy.data_ptr()),
                              static_cast<const float*>(in.w.data_ptr()), static_cast<float*>(gx.data_ptr()));
  return gx;
}
Tensor with_algo(cpu::ConvAlgo a, const std::function<Tensor()>& f) {
  cpu::Override o(a);
  return f();
}

TEST(ConvInputGradDirect, KernelMatchesFp64AtEveryEdge) {
  MT_REQUIRE_KERNEL();
  for (const Geo& g : kGeos) {
    SCOPED_TRACE(g.what);
    ASSERT_TRUE(cpu::conv_input_grad_direct_applies(g.shape()));
    const Inputs in = make_inputs(g, 51);
    const Tensor gy64 = in.gy.to(DType::Float64), w64 = in.w.to(DType::Float64);
    const Tensor ref = op(g, gy64, w64), absterms = op(g, abs(gy64), abs(w64));
    EXPECT_TRUE(within_sum_bound(direct(g, in), ref, absterms, g.O * g.kH * 3, 1.0, 0));
  }
}

TEST(ConvInputGradDirect, TheOpReturnsTheKernelsBitsForStridedConvsWithinTheBoundOfCol2im) {
  MT_REQUIRE_KERNEL();
  int strided = 0;
  for (const Geo& g : kGeos) {
    SCOPED_TRACE(g.what);
    const Inputs in = make_inputs(g, 52);
    const Tensor got = with_algo(cpu::ConvAlgo::Auto, [&] { return op(g, in.gy, in.w); });
    const Tensor old = with_algo(cpu::ConvAlgo::Im2col, [&] { return op(g, in.gy, in.w); });
    if (g.sH > 1 || g.sW > 1) {  // unit strides run as a forward conv instead
      EXPECT_TRUE(bit_equal(got, direct(g, in)));
      ++strided;
    }
    const Tensor gy64 = in.gy.to(DType::Float64), w64 = in.w.to(DType::Float64);
    EXPECT_TRUE(within_sum_bound(got, old.to(DType::Float64), op(g, abs(gy64), abs(w64)), g.O * g.kH * 3, 2.0, 0));
  }
  EXPECT_GE(strided, 7);
}

TEST(ConvInputGradDirect, SixteenBitStorageIsTheFp32KernelOnWidenedOperandsRoundedOnce) {
  MT_REQUIRE_KERNEL();
  std::vector<cpu::Bf16GemmPath> paths{cpu::Bf16GemmPath::Emulated};
  if (cpu::can_run_bf16_native(cpu::cpu_features())) paths.push_back(cpu::Bf16GemmPath::Avx512Bf16);
  if (cpu::can_run_bf16_amx(cpu::cpu_features_with_amx())) paths.push_back(cpu::Bf16GemmPath::Amx);
  for (const Geo& g : kGeos) {
    if (g.sH == 1 && g.sW == 1) continue;  // unit strides run as a forward conv
    SCOPED_TRACE(g.what);
    const Inputs in = make_inputs(g, 54);
    for (DType dt : {DType::BFloat16, DType::Float16}) {
      const Tensor gy = in.gy.to(dt), w = in.w.to(dt);
      const Tensor f32 = direct(g, {gy.to(DType::Float32), w.to(DType::Float32)}).to(dt);
      // The 16-bit overloads themselves (every element written), then the op on each path.
      Tensor got = full(g.x_size(), std::numeric_limits<float>::quiet_NaN()).to(dt);
      const Tensor wf = w.to(DType::Float32);
      if (dt == DType::BFloat16) {
        const auto* gp = static_cast<const BFloat16*>(gy.data_ptr());
        cpu::conv_input_grad_direct(g.shape(), gp, static_cast<const BFloat16*>(w.data_ptr()),
                                    static_cast<BFloat16*>(got.data_ptr()));
        EXPECT_TRUE(bit_equal(got, f32)) << "BF16 weights";
        got.fill_(std::numeric_limits<float>::quiet_NaN());
        cpu::conv_input_grad_direct(g.shape(), gp, static_cast<const float*>(wf.data_ptr()),
                                    static_cast<BFloat16*>(got.data_ptr()));
      } else {
        cpu::conv_input_grad_direct(g.shape(), static_cast<const Half*>(gy.data_ptr()),
                                    static_cast<const float*>(wf.data_ptr()), static_cast<Half*>(got.data_ptr()));
      }
      EXPECT_TRUE(bit_equal(got, f32)) << dtype_name(dt) << " with FP32 weights";
      for (cpu::Bf16GemmPath path : paths) {
        cpu::Override o(path);
        Tensor want = f32;
        if (dt == DType::BFloat16 && g.O >= 2 && cpu::conv_input_grad_pairs_applies(g.shape())) {
          // Native BF16 takes the pair kernel: only the route is checked here; its numbers are
          // tests/ops/test_conv_input_grad_pairs.cpp's (against FP64).
          want = full(g.x_size(), std::numeric_limits<float>::quiet_NaN()).to(dt);
          cpu::conv_input_grad_pairs(g.shape(), static_cast<const BFloat16*>(gy.data_ptr()),
                                     static_cast<const BFloat16*>(w.data_ptr()), static_cast<BFloat16*>(want.data_ptr()));
        }
        EXPECT_TRUE(bit_equal(op(g, gy, w), want)) << dtype_name(dt) << " path " << static_cast<int>(path);
        if (dt == DType::Float16) break;  // FP16 has one CPU path
      }
    }
  }
}

TEST(ConvInputGradDirect, SameBitsOnOneTwoAndThreeThreads) {
  MT_REQUIRE_KERNEL();
  const Geo g{5, 24, 16, 16, 40, 3, 2, 2, 1, 1, 1, false, ""};  // 2^21+ multiply-adds: a team runs
  const Inputs in = make_inputs(g, 53);
  const std::vector<Tensor> got = testing::on_thread_counts({1, 2, 3}, [&] { return direct(g, in); });
  EXPECT_TRUE(bit_equal(got[0], got[1]));
  EXPECT_TRUE(bit_equal(got[0], got[2]));
}

TEST(ConvInputGradDirect, GeometriesItDoesNotTake) {
  MT_REQUIRE_KERNEL();
  EXPECT_FALSE(cpu::conv_input_grad_direct_applies({1, 2, 9, 9, 4, 3, 3, 1, 3, 1, 1, 1, 1, 9, 3}));  // column stride 3
  EXPECT_FALSE(cpu::conv_input_grad_direct_applies({1, 2, 9, 9, 4, 3, 5, 2, 2, 1, 2, 1, 1, 5, 5}));  // width 5
  EXPECT_FALSE(cpu::conv_input_grad_direct_applies({1, 2, 9, 9, 4, 3, 3, 2, 2, 1, 1, 1, 2, 5, 4}));  // column dilation
  cpu::Override o(cpu::ConvAlgo::Im2col);
  EXPECT_FALSE(cpu::conv_input_grad_direct_applies({1, 1, 4, 4, 1, 3, 3, 2, 2, 1, 1, 1, 1, 2, 2}));
}

}  // namespace
}  // namespace mixtape
