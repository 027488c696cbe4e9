// tests/ops/test_conv_implicit_gemm.cpp — the implicit-GEMM convolution (ops/cpu/conv_implicit_gemm.h)
// that conv2d and conv2d_input_grad take for plane-shift geometry (unit strides, unit column
// dilation, "same" width, one group) in FP32 and BF16. Its entries' numbers (FP32, vdpbf16ps and
// AMX against FP64, the input gradient run as a conv) are tests/ops/test_kernel_entries.cpp's, on
// every plane-shift geometry of tests/ops/conv_geometries.h; here what those do not derive:
//   - BF16 emulated: bit for bit the FP32 kernel on the widened inputs, rounded once (NaN too);
//   - AMX: bit for bit im2col + the AMX GEMM where the depth is one GEMM slice;
//   - the same bits on 1 and 2 OpenMP threads, on both BF16 paths;
//   - geometries no AVX-512 conv kernel takes (column dilation, groups, kernels not 3 wide) give
//     im2col's bits exactly whatever the switch says;
//   - the BF16 entries run the GEMM their names say, also where forced against bf16_gemm_kernel().
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include <mixtape/mixtape.h>

#include "common/bit_equal.h"
#include "ops/conv_geometries.h"
#include "ops/cpu/conv_implicit_gemm.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/steering.h"

namespace mixtape {
namespace {

bool kernel_available() {
  cpu::Override o(cpu::ConvAlgo::Auto);
  return cpu::conv_kernels_enabled();
}
bool native_available() { return cpu::can_run_bf16_native(cpu::cpu_features()); }
bool amx_available() { return cpu::can_run_bf16_amx(cpu::cpu_features_with_amx()); }
// The BF16 paths this CPU can run: emulated always, each native kernel where the CPU has it.
std::vector<cpu::Bf16GemmPath> bf16_paths(bool with_emulated) {
  std::vector<cpu::Bf16GemmPath> v;
  if (with_emulated) v.push_back(cpu::Bf16GemmPath::Emulated);
  if (native_available()) v.push_back(cpu::Bf16GemmPath::Avx512Bf16);
  if (amx_available()) v.push_back(cpu::Bf16GemmPath::Amx);
  return v;
}
const char* path_name(cpu::Bf16GemmPath p) {
  return p == cpu::Bf16GemmPath::Amx ? "amx" : p == cpu::Bf16GemmPath::Avx512Bf16 ? "avx512bf16" : "emulated";
}
#define MT_REQUIRE_KERNEL() \
  if (!kernel_available()) GTEST_SKIP() << "this CPU lacks AVX-512 F/BW/VL: conv2d stays on im2col + GEMM"

using Geo = testing::ConvGeometry;
using testing::kConvGeometries;
std::string name_of(const Geo& g) { return g.what; }

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
Tensor cast(const Tensor& t, DType dt) { return t.defined() ? t.to(dt) : Tensor(); }

Tensor conv(const Geo& g, const Tensor& x, const Tensor& w, const Tensor& b) {
  return conv2d(x, w, b, g.stride(), g.padding(), g.dilation(), g.G);
}
Tensor with_algo(cpu::ConvAlgo a, const std::function<Tensor()>& f) {
  cpu::Override o(a);
  return f();
}
Tensor with_bf16(cpu::Bf16GemmPath p, const std::function<Tensor()>& f) {
  cpu::Override o(p);
  return f();
}

using testing::bit_equal;

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

TEST(ConvImplicitGemm, Bf16EmulatedIsTheFp32KernelOnWidenedInputsRounded) {
  MT_REQUIRE_KERNEL();
  for (const Geo& g : kConvGeometries) {
    if (!g.plane_shift()) continue;
    SCOPED_TRACE(name_of(g));
    Inputs in = make_inputs(g, 13);
    Tensor xb = in.x.to(DType::BFloat16), wb = in.w.to(DType::BFloat16), bb = cast(in.b, DType::BFloat16);
    if (g.N * g.C * g.H * g.W > 7) {  // a NaN and an infinity reach some outputs: the rounding's NaN rule
      xb.view({-1}).narrow(0, 3, 1).fill_(std::numeric_limits<float>::quiet_NaN());
      xb.view({-1}).narrow(0, 6, 1).fill_(std::numeric_limits<float>::infinity());
    }
    const Tensor got = with_bf16(cpu::Bf16GemmPath::Emulated, [&] { return conv(g, xb, wb, bb); });
    const Tensor f32 = conv(g, xb.to(DType::Float32), wb.to(DType::Float32), cast(bb, DType::Float32));
    EXPECT_TRUE(same_bits(got, f32.to(DType::BFloat16)));
  }
}

// On AMX each output element is one tdpbf16ps chain over the whole depth, plus the bias, rounded
// once: for a depth of at most one GEMM slice (512) that is exactly what im2col + the AMX GEMM
// computes (one slice from +0, added onto the bias-filled output with fma(1, b, t) = b + t), so
// the two agree bit for bit — every packing edge (ragged panels, odd and tiny K, O not a multiple
// of 32, straddled images) checked exactly. Deeper convs differ by the GEMM's slicing only.
TEST(ConvImplicitGemm, AmxEqualsIm2colPlusTheAmxGemmWhereTheDepthIsOneSlice) {
  MT_REQUIRE_KERNEL();
  if (!amx_available()) GTEST_SKIP() << "no AMX here";
  int checked = 0;
  for (const Geo& g : kConvGeometries) {
    if (!g.plane_shift() || g.C * g.kH * g.kW > 512) continue;
    SCOPED_TRACE(name_of(g));
    const Inputs in = make_inputs(g, 21);
    const Tensor xb = in.x.to(DType::BFloat16), wb = in.w.to(DType::BFloat16), bb = cast(in.b, DType::BFloat16);
    const auto f = [&] { return conv(g, xb, wb, bb); };
    const Tensor implicit = with_bf16(cpu::Bf16GemmPath::Amx, [&] { return with_algo(cpu::ConvAlgo::Auto, f); });
    const Tensor im2col = with_bf16(cpu::Bf16GemmPath::Amx, [&] { return with_algo(cpu::ConvAlgo::Im2col, f); });
    EXPECT_TRUE(same_bits(implicit, im2col));
    ++checked;
  }
  EXPECT_GE(checked, 8);
  // And the AMX kernel is not the vdpbf16ps one (other sums): SmallCNN's conv2.
  const Geo& g = testing::conv_geometry("SmallCNN conv2 (N 4)");
  const Inputs in = make_inputs(g, 22);
  const Tensor xb = in.x.to(DType::BFloat16), wb = in.w.to(DType::BFloat16), bb = cast(in.b, DType::BFloat16);
  const auto f = [&] { return conv(g, xb, wb, bb); };
  EXPECT_FALSE(same_bits(with_bf16(cpu::Bf16GemmPath::Amx, f), with_bf16(cpu::Bf16GemmPath::Avx512Bf16, f)));
}

TEST(ConvImplicitGemm, SameBitsOnOneAndTwoThreads) {
  MT_REQUIRE_KERNEL();
  // Big enough for the kernel to use a team (2^21 multiply-adds), with a ragged last panel.
  const Geo g{"team-sized", 6, 24, 13, 13, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, true};  // no geometry of the list is
  const Inputs in = make_inputs(g, 17);
  const int saved = omp_get_max_threads();
  for (DType dt : {DType::Float32, DType::BFloat16})
    for (cpu::Bf16GemmPath p : bf16_paths(true)) {
      cpu::Override bo(p);
      const Tensor x = in.x.to(dt), w = in.w.to(dt), b = in.b.to(dt);
      Generator gen(18);
      const Tensor gy = randn({g.N, g.O, g.H, g.W}, {}, &gen).to(dt);
      auto run = [&](int t) {
        omp_set_num_threads(t);
        return TensorList{conv(g, x, w, b), conv2d_input_grad(gy, w, x.sizes(), {1, 1}, {1, 1})};
      };
      const TensorList one = run(1), two = run(2);
      omp_set_num_threads(saved);
      for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(same_bits(one[i], two[i])) << "output " << i << ", " << path_name(p);
    }
}

TEST(ConvImplicitGemm, OtherGeometriesKeepIm2colsBits) {
  // Column dilation, groups and kernels not 3 columns wide are neither plane-shift geometry nor
  // the direct kernels' (tests/ops/test_conv_direct.cpp and test_conv_direct_bf16.cpp, which also
  // take strided BF16 convs on AVX512-BF16): conv2d runs im2col + GEMM for them whatever the
  // switch says, in FP32 and in BF16.
  MT_REQUIRE_KERNEL();
  int checked = 0;
  for (const Geo& g : kConvGeometries) {
    if (g.plane_shift() || (g.G == 1 && g.kW == 3 && g.dW == 1)) continue;
    SCOPED_TRACE(name_of(g));
    const Inputs in = make_inputs(g, 19);
    for (DType dt : {DType::Float32, DType::BFloat16}) {
      const auto f = [&] { return conv(g, in.x.to(dt), in.w.to(dt), cast(in.b, dt)); };
      EXPECT_TRUE(same_bits(with_algo(cpu::ConvAlgo::Auto, f), with_algo(cpu::ConvAlgo::Im2col, f))) << dtype_name(dt);
    }
    ++checked;
  }
  EXPECT_GE(checked, 8);
}

// conv2d.fwd's implicit_gemm_avx512bf16 runs vdpbf16ps, as its name says, even forced on a process
// whose BF16 GEMMs run on AMX: the bits it gives where vdpbf16ps is the BF16 GEMM, not the AMX
// entry's. The products 1, 2^30, 0, -2^30 (a 1x1 conv over 4 channels) tell the two orders apart:
// vdpbf16ps adds them into one FP32 chain, pair by pair, where 1 + 2^30 drops the 1 (sum 0); AMX
// sums the even and the odd depths apart (1 + 0, 2^30 - 2^30: sum 1).
TEST(ConvImplicitGemm, ForcedAvx512Bf16EntryRunsVdpbf16psUnderAmx) {
  MT_REQUIRE_KERNEL();
  if (!amx_available()) GTEST_SKIP() << "needs AMX (elsewhere the native BF16 GEMM is vdpbf16ps anyway)";
  cpu::Override own(cpu::FloatGemm::Auto), conv(cpu::ConvAlgo::Auto);  // whatever MIXTAPE_GEMM/_CPU_CONV say
  const double big = 32768.0;  // 2^15, exact in BF16
  const Tensor x = (ones({1, 4, 4, 4}) * tensor(std::vector<double>{1, big, 1, big}, {1, 4, 1, 1})).to(DType::BFloat16);
  const Tensor w = tensor(std::vector<double>{1, big, 0, -big}, {1, 4, 1, 1}).to(DType::BFloat16);
  auto run = [&](cpu::Bf16GemmPath path, const char* entry) {
    cpu::Override p(path);
    cpu::Override force(cpu::KernelSpec{std::string("conv2d.fwd:") + entry});
    // Captured: a forced choice is no list's own, so its line must not reach a MIXTAPE_TRACE=kernel
    // recording (tests/fixtures/record_kernel_choices.sh), whose lines are replayed unforced.
    std::string trace;
    ScopedTrace t(static_cast<uint32_t>(TraceKind::Kernel), &trace);
    Tensor y = conv2d(x, w, Tensor(), {1, 1}, {0, 0});
    EXPECT_NE(trace.find(std::string(" -> ") + entry), std::string::npos) << trace;
    return y;
  };
  const Tensor vdp = run(cpu::Bf16GemmPath::Avx512Bf16, "implicit_gemm_avx512bf16");
  EXPECT_TRUE(bit_equal(run(cpu::Bf16GemmPath::Amx, "implicit_gemm_avx512bf16"), vdp));
  EXPECT_FALSE(bit_equal(run(cpu::Bf16GemmPath::Amx, "implicit_gemm_amx"), vdp)) << vdp;
}

TEST(ConvImplicitGemm, OverrideTurnsTheKernelOffAndNests) {
  {
    cpu::Override a(cpu::ConvAlgo::Im2col);
    EXPECT_FALSE(cpu::conv_kernels_enabled());
    {
      cpu::Override b(cpu::ConvAlgo::Auto);
      EXPECT_EQ(cpu::conv_kernels_enabled(), kernel_available());
    }
    EXPECT_FALSE(cpu::conv_kernels_enabled());
  }
}

TEST(ConvImplicitGemm, BadInputStillGetsTheOpsErrors) {
  Generator gen(20);
  const Tensor x = randn({2, 3, 5, 5}, {}, &gen), w = randn({4, 2, 3, 3}, {}, &gen);
  EXPECT_THROW(conv2d(x, w, Tensor(), {1, 1}, {1, 1}), Error);  // channel mismatch
  EXPECT_THROW(conv2d(x, randn({4, 3, 3, 3}, {}, &gen).to(DType::BFloat16), Tensor(), {1, 1}, {1, 1}), Error);
}

}  // namespace
}  // namespace mixtape
