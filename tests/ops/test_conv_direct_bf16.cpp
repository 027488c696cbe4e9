// tests/ops/test_conv_direct_bf16.cpp — the direct BF16 convolution on vdpbf16ps
// (ops/cpu/conv_direct_avx512.h, channel pairs) that conv2d takes for BF16 operands where BF16
// GEMMs run on AVX512-BF16, beyond what tests/ops/test_kernel_entries.cpp derives for its entry
// (conv2d.fwd:pairs_avx512bf16):
//   - called directly (every element written), against an FP64 reference of the BF16 operands
//     within the FP32 summation bound of its depth plus the one rounding to BF16, on every
//     geometry of tests/ops/conv_geometries.h it takes, also those its entry leaves to the
//     implicit GEMM (narrow "same" rows) and one channel (the last pair's high half zero);
//   - the same bits on 1, 2 and 3 threads, a batch of one (rows split between threads, with a
//     bias: the element-by-element store) included;
//   - infinities and NaN reach the same outputs through conv2d as on the emulated path.
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

using Geo = testing::ConvGeometry;
using testing::kConvGeometries;

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

TEST(ConvDirectBf16, KernelMatchesFp64OnEveryGeometryItTakes) {
  MT_REQUIRE_KERNEL();
  int checked = 0;
  for (const Geo& geo : kConvGeometries) {
    if (geo.G != 1 || !cpu::conv_pairs_applies(geo.shape())) continue;
    ++checked;
    SCOPED_TRACE(geo.what);
    const Inputs in = make_inputs(geo, 51);
    const Tensor ref = op(geo, f64(in.x), f64(in.w), f64(in.b));
    const Tensor absterms = op(geo, abs(f64(in.x)), abs(f64(in.w)), abs_or_none(f64(in.b)));
    // The FP32 sum of exact products (bound of its depth), then one rounding to BF16.
    EXPECT_TRUE(within_sum_bound(direct(geo, in), ref, absterms, geo.C * geo.kH * geo.kW, 1.0, 1));
  }
  EXPECT_GE(checked, 30);
}

TEST(ConvDirectBf16, SameBitsOnOneTwoAndThreeThreads) {
  MT_REQUIRE_KERNEL();
  // 2^21+ multiply-adds, so a team runs: eight images (images split), and one (rows split).
  // (Sized for the team: no geometry of the list is.)
  for (const Geo& geo : {Geo{"eight images", 8, 24, 16, 16, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, true},
                         Geo{"one image, C odd, a bias", 1, 33, 30, 30, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1, true}}) {
    SCOPED_TRACE(geo.what);
    const Inputs in = make_inputs(geo, 52);
    const std::vector<Tensor> got = testing::on_thread_counts({1, 2, 3}, [&] { return direct(geo, in); });
    EXPECT_TRUE(bit_equal(got[0], got[1]));
    EXPECT_TRUE(bit_equal(got[0], got[2]));
  }
}

TEST(ConvDirectBf16, InfinitiesAndNanReachTheOutputsTheEmulatedPathGives) {
  MT_REQUIRE_KERNEL();
  const Geo& geo = testing::conv_geometry("ResNet-8 layer1 (28x28)");
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
