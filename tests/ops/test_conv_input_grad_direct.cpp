// tests/ops/test_conv_input_grad_direct.cpp — the FP32 input gradient without col2im
// (ops/cpu/conv_input_grad_avx512.h) that conv2d_input_grad takes for kernels 3 columns wide with
// column stride 1 or 2 where it does not run the gradient as a forward conv (strided convs). Its
// numbers against FP64 are tests/ops/test_kernel_entries.cpp's (conv2d.dgrad:direct_avx512, on
// every geometry of tests/ops/conv_geometries.h it takes); here what those do not derive:
//   - BF16 (the 16-bit overloads; the op on the emulated and AMX paths, and on vdpbf16ps with FP32
//     weights) and FP16 storage: bit for bit the FP32 kernel on the widened operands, rounded once;
//     native BF16 on vdpbf16ps is the output-channel-pair kernel's (tests/ops/test_conv_input_grad_pairs.cpp);
//   - the same bits on 1, 2 and 3 threads;
//   - geometries it does not take.
#include <gtest/gtest.h>
#include <omp.h>

#include <limits>
#include <vector>

#include <mixtape/mixtape.h>

#include "common/bit_equal.h"
#include "common/on_thread_counts.h"
#include "ops/conv_geometries.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/conv_implicit_gemm.h"
#include "ops/cpu/conv_input_grad_avx512.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/steering.h"

namespace mixtape {
namespace {

using testing::bit_equal;
using Geo = testing::ConvGeometry;
using testing::kConvGeometries;

// False on CPUs without AVX-512 F/BW/VL and under MIXTAPE_CPU_CONV=im2col (the kernel refuses to run),
// and under MIXTAPE_GEMM=blas (conv2d keeps its GEMM paths there).
bool kernel_available() {
  return cpu::own_kernels_enabled() &&
         cpu::conv_input_grad_direct_applies({1, 1, 4, 4, 1, 3, 3, 2, 2, 1, 1, 1, 1, 2, 2});
}
#define MT_REQUIRE_KERNEL() \
  if (!kernel_available()) GTEST_SKIP() << "no AVX-512 F/BW/VL, or MIXTAPE_CPU_CONV=im2col, or MIXTAPE_GEMM=blas"

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
TEST(ConvInputGradDirect, SixteenBitStorageIsTheFp32KernelOnWidenedOperandsRoundedOnce) {
  MT_REQUIRE_KERNEL();
  std::vector<cpu::Bf16GemmPath> paths{cpu::Bf16GemmPath::Emulated};
  if (cpu::can_run_bf16_native(cpu::cpu_features())) paths.push_back(cpu::Bf16GemmPath::Avx512Bf16);
  if (cpu::can_run_bf16_amx(cpu::cpu_features_with_amx())) paths.push_back(cpu::Bf16GemmPath::Amx);
  int checked = 0;
  for (const Geo& g : kConvGeometries) {
    // Unit strides run as a forward conv.
    if ((g.sH == 1 && g.sW == 1) || g.G != 1 || !cpu::conv_input_grad_direct_applies(g.shape())) continue;
    ++checked;
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
  EXPECT_GE(checked, 15);
}

TEST(ConvInputGradDirect, SameBitsOnOneTwoAndThreeThreads) {
  MT_REQUIRE_KERNEL();
  // 2^21+ multiply-adds: a team runs (no geometry of the list is that big).
  const Geo g{"team-sized", 5, 24, 16, 16, 40, 3, 3, 2, 2, 1, 1, 1, 1, 1};
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
