// tests/ops/test_conv_direct.cpp — the direct FP32 convolution (ops/cpu/conv_direct_avx512.h) that
// conv2d takes for kernels 3 columns wide with column stride 1 or 2, beyond what
// tests/ops/test_kernel_entries.cpp derives for its entry (conv2d.fwd:direct_avx512):
//   - called directly (every element written), against an FP64 reference within the FP32
//     summation bound of its depth, on every geometry of tests/ops/conv_geometries.h it takes,
//     also those its entry leaves to the implicit GEMM (narrow "same" rows, one channel);
//   - on the implicit GEMM's geometry, bit for bit that kernel (the same FMA chain per output),
//     infinities, NaN and signed zeros included;
//   - the same bits on 1, 2 and 3 threads, a batch of one (rows split between threads) included;
//   - geometries it does not take.
#include <gtest/gtest.h>
#include <omp.h>

#include <limits>
#include <vector>

#include <mixtape/mixtape.h>

#include "common/bit_equal.h"
#include "common/on_thread_counts.h"
#include "common/sum_bound.h"
#include "ops/conv_geometries.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/conv_direct_avx512.h"
#include "ops/cpu/conv_implicit_gemm.h"
#include "ops/cpu/steering.h"

namespace mixtape {
namespace {

using testing::bit_equal;
using testing::within_sum_bound;

// False on CPUs without AVX-512 F/BW/VL and under MIXTAPE_CPU_CONV=im2col (the kernel refuses to run).
bool kernel_available() {
  return cpu::own_kernels_enabled() && cpu::conv_direct_applies({1, 1, 4, 4, 1, 3, 3, 1, 1, 1, 1, 1, 1, 4, 4});
}
#define MT_REQUIRE_KERNEL() \
  if (!kernel_available()) GTEST_SKIP() << "no AVX-512 F/BW/VL, or MIXTAPE_CPU_CONV=im2col, or MIXTAPE_GEMM=blas"

using Geo = testing::ConvGeometry;
using testing::kConvGeometries;

// The list's geometries the kernel takes.
std::vector<Geo> taken() {
  std::vector<Geo> v;
  for (const Geo& g : kConvGeometries)
    if (g.G == 1 && cpu::conv_direct_applies(g.shape())) v.push_back(g);
  return v;
}

Tensor op(const Geo& g, const Tensor& x, const Tensor& w, const Tensor& b) {
  return conv2d(x, w, b, g.stride(), g.padding(), g.dilation());
}

struct Inputs {
  Tensor x, w, b;  // f32
};
Inputs make_inputs(const Geo& g, uint64_t seed) {
  Generator gen(seed);
  Inputs in;
  in.x = randn(g.x_size(), {}, &gen);
  in.w = randn(g.w_size(), {}, &gen);
  if (g.bias) in.b = randn({g.O}, {}, &gen);
  return in;
}
Tensor f64(const Tensor& t) { return t.defined() ? t.to(DType::Float64) : Tensor(); }
Tensor abs_or_none(const Tensor& t) { return t.defined() ? abs(t) : Tensor(); }

Tensor direct(const Geo& g, const Inputs& in) {
  Tensor y = full(g.y_size(), std::numeric_limits<float>::quiet_NaN());  // every element written
  cpu::conv_direct_forward(g.shape(), static_cast<const float*>(in.x.data_ptr()),
                           static_cast<const float*>(in.w.data_ptr()),
                           in.b.defined() ? static_cast<const float*>(in.b.data_ptr()) : nullptr,
                           static_cast<float*>(y.data_ptr()));
  return y;
}

TEST(ConvDirect, KernelMatchesFp64OnEveryGeometryItTakes) {
  MT_REQUIRE_KERNEL();
  const std::vector<Geo> geos = taken();
  EXPECT_GE(geos.size(), 30u);
  for (const Geo& geo : geos) {
    SCOPED_TRACE(geo.what);
    const Inputs in = make_inputs(geo, 41);
    const Tensor ref = op(geo, f64(in.x), f64(in.w), f64(in.b));
    const Tensor absterms = op(geo, abs(f64(in.x)), abs(f64(in.w)), abs_or_none(f64(in.b)));
    EXPECT_TRUE(within_sum_bound(direct(geo, in), ref, absterms, geo.C * geo.kH * geo.kW, 1.0, 0));
  }
}

TEST(ConvDirect, OnPlaneShiftGeometryItIsTheImplicitGemmBitForBit) {
  MT_REQUIRE_KERNEL();
  int checked = 0;
  for (const Geo& geo : taken()) {
    if (!geo.plane_shift()) continue;
    SCOPED_TRACE(geo.what);
    Inputs in = make_inputs(geo, 42);
    // Specials reach some outputs: an infinity (inf * 0 from the padding is NaN), NaN, -0.
    float* x = static_cast<float*>(in.x.data_ptr());
    if (in.x.numel() > 20) {
      x[5] = std::numeric_limits<float>::infinity();
      x[11] = std::numeric_limits<float>::quiet_NaN();
    }
    static_cast<float*>(in.w.data_ptr())[0] = -0.0f;
    Tensor y = full(geo.y_size(), 0.0f);
    const cpu::ImplicitConvShape s{geo.N, geo.C, geo.H, geo.W, geo.O, geo.kH, 3, geo.pH, 1, geo.dH, geo.OH()};
    cpu::conv_implicit_gemm(s, x, static_cast<const float*>(in.w.data_ptr()),
                            in.b.defined() ? static_cast<const float*>(in.b.data_ptr()) : nullptr,
                            static_cast<float*>(y.data_ptr()));
    EXPECT_TRUE(bit_equal(direct(geo, in), y));
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

TEST(ConvDirect, SameBitsOnOneTwoAndThreeThreads) {
  MT_REQUIRE_KERNEL();
  // 2^21+ multiply-adds, so a team runs: eight images (images split), and one (rows split).
  // (Sized for the team: no geometry of the list is.)
  for (const Geo& geo : {Geo{"eight images", 8, 24, 16, 16, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, true},
                         Geo{"one image", 1, 32, 30, 30, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1, false}}) {
    SCOPED_TRACE(geo.what);
    const Inputs in = make_inputs(geo, 44);
    const std::vector<Tensor> got = testing::on_thread_counts({1, 2, 3}, [&] { return direct(geo, in); });
    EXPECT_TRUE(bit_equal(got[0], got[1]));
    EXPECT_TRUE(bit_equal(got[0], got[2]));
  }
}

TEST(ConvDirect, GeometriesItDoesNotTake) {
  MT_REQUIRE_KERNEL();
  EXPECT_FALSE(cpu::conv_direct_applies({1, 2, 9, 9, 4, 3, 3, 1, 3, 1, 1, 1, 1, 9, 3}));   // column stride 3
  EXPECT_FALSE(cpu::conv_direct_applies({1, 2, 9, 9, 4, 3, 5, 1, 1, 1, 2, 1, 1, 9, 9}));   // kernel width 5
  EXPECT_FALSE(cpu::conv_direct_applies({1, 2, 9, 9, 4, 3, 3, 1, 1, 1, 1, 1, 2, 9, 7}));   // column dilation
  EXPECT_FALSE(cpu::conv_direct_applies({1, 2, 9, 2000, 4, 3, 3, 1, 1, 1, 1, 1, 1, 9, 2000}));  // rows > 1024
  cpu::Override o(cpu::ConvAlgo::Im2col);
  EXPECT_FALSE(cpu::conv_direct_applies({1, 1, 4, 4, 1, 3, 3, 1, 1, 1, 1, 1, 1, 4, 4}));
}

}  // namespace
}  // namespace mixtape
