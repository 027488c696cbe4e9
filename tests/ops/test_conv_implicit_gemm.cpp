// tests/ops/test_conv_implicit_gemm.cpp — the implicit-GEMM convolution (ops/cpu/conv_implicit_gemm.h)
// that conv2d and conv2d_input_grad take for plane-shift geometry (unit strides, unit column
// dilation, "same" width, one group) in FP32 and BF16:
//   - against an FP64 reference (conv2d on the f64 tensors) within the FP32 summation bound
//     k u (|x| * |w|) (u = 2^-24), plus one BF16 step where the output is BF16, at every blocking
//     edge: channels below and past a tile (8 outputs, 32 pixels), planes smaller than a panel
//     (panels spanning many images), several depth slices (FP32 256, BF16 512), odd depth (BF16
//     pairs), other kernel sizes and row dilation;
//   - against im2col + GEMM (Override(Im2col)) within twice the bound;
//   - BF16 emulated: bit for bit the FP32 kernel on the widened inputs, rounded once (NaN too);
//   - the same bits on 1 and 2 OpenMP threads, on both BF16 paths;
//   - geometries it does not take (column dilation, groups) give im2col's bits exactly;
//   - the BF16 entries run the GEMM their names say, also where forced against bf16_gemm_kernel().
// (For FP32 rows of 16+ pixels conv2d itself now takes the direct kernel, which computes the same
// bits on this geometry: tests/ops/test_conv_direct.cpp; the kernel-level tests here call this one.)
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
#include "common/sum_bound.h"
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

struct Geo {
  int64_t N, C, H, W, O, kH, kW, pH, pW, dH;
  bool bias;
};
// Every case is plane-shift geometry: kW = 2 pW + 1, unit strides and column dilation.
const Geo kGeos[] = {
    {2, 3, 5, 6, 5, 3, 3, 1, 1, 1, true},      // tiny: O < 8, one panel spans both images
    {3, 1, 28, 28, 9, 3, 3, 1, 1, 1, true},    // K = 9 (odd), O = 9: a second, nearly empty A panel
    {2, 17, 7, 7, 33, 3, 3, 1, 1, 1, false},   // 49 pixels: panels straddle images; odd K = 153
    {1, 40, 6, 9, 16, 3, 3, 1, 1, 1, true},    // K = 360: two FP32 depth slices
    {2, 61, 4, 5, 8, 3, 3, 1, 1, 1, false},    // K = 549 (odd): two BF16 depth slices
    {5, 2, 1, 3, 3, 3, 3, 1, 1, 1, true},      // H = 1: only the middle kernel row reads the image
    {2, 4, 9, 8, 7, 5, 5, 2, 2, 1, true},      // 5x5
    {2, 3, 8, 7, 4, 3, 1, 1, 0, 2, false},     // 3x1, row dilation 2
    {2, 5, 6, 11, 6, 1, 3, 0, 1, 1, true},     // 1x3
    {2, 3, 9, 6, 5, 3, 3, 3, 1, 3, false},     // row dilation 3 with padding 3
    {4, 32, 14, 14, 64, 3, 3, 1, 1, 1, true},  // SmallCNN's conv2, smaller batch
    {2, 5, 6, 7, 17, 3, 3, 1, 1, 1, true},     // O = 17: AMX's full block with one row past 16
    {2, 9, 5, 5, 31, 3, 3, 1, 1, 1, false},    // O = 31 (and 16: the top tiles only, above)
};

std::string name_of(const Geo& g) {
  return "N" + std::to_string(g.N) + " C" + std::to_string(g.C) + " " + std::to_string(g.H) + "x" +
         std::to_string(g.W) + " O" + std::to_string(g.O) + " k" + std::to_string(g.kH) + "x" + std::to_string(g.kW) +
         " p" + std::to_string(g.pH) + "," + std::to_string(g.pW) + " dH" + std::to_string(g.dH);
}

struct Inputs {
  Tensor x, w, b;  // f32
};
Inputs make_inputs(const Geo& g, uint64_t seed) {
  Generator gen(seed);
  Inputs in;
  in.x = randn({g.N, g.C, g.H, g.W}, {}, &gen);
  in.w = randn({g.O, g.C, g.kH, g.kW}, {}, &gen);
  if (g.bias) in.b = randn({g.O}, {}, &gen);
  return in;
}
Tensor cast(const Tensor& t, DType dt) { return t.defined() ? t.to(dt) : Tensor(); }
Tensor abs_or_none(const Tensor& t) { return t.defined() ? abs(t) : Tensor(); }

Tensor conv(const Geo& g, const Tensor& x, const Tensor& w, const Tensor& b) {
  return conv2d(x, w, b, {1, 1}, {g.pH, g.pW}, {g.dH, 1});
}
Tensor with_algo(cpu::ConvAlgo a, const std::function<Tensor()>& f) {
  cpu::Override o(a);
  return f();
}
Tensor with_bf16(cpu::Bf16GemmPath p, const std::function<Tensor()>& f) {
  cpu::Override o(p);
  return f();
}

using testing::within_sum_bound;  // FP32 summation error of an FP64 reference
using testing::bit_equal;

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

TEST(ConvImplicitGemm, Fp32MatchesFp64AndIm2colAtEveryEdge) {
  MT_REQUIRE_KERNEL();
  for (const Geo& g : kGeos) {
    SCOPED_TRACE(name_of(g));
    const Inputs in = make_inputs(g, 11);
    const int64_t k = g.C * g.kH * g.kW;
    const Tensor ref = conv(g, cast(in.x, DType::Float64), cast(in.w, DType::Float64), cast(in.b, DType::Float64));
    const Tensor absprod =
        conv(g, abs(cast(in.x, DType::Float64)), abs(cast(in.w, DType::Float64)), abs_or_none(cast(in.b, DType::Float64)));
    const Tensor got = with_algo(cpu::ConvAlgo::Auto, [&] { return conv(g, in.x, in.w, in.b); });
    const Tensor old = with_algo(cpu::ConvAlgo::Im2col, [&] { return conv(g, in.x, in.w, in.b); });
    EXPECT_TRUE(within_sum_bound(got, ref, absprod, k, 1.0, 0));
    EXPECT_TRUE(within_sum_bound(got, old.to(DType::Float64), absprod, k, 2.0, 0));
  }
}

TEST(ConvImplicitGemm, KernelCalledDirectlyMatchesFp64) {
  // The kernel itself, not through conv2d: so this fails if conv2d stopped calling it and the
  // op-level tests above passed on im2col.
  MT_REQUIRE_KERNEL();
  for (const Geo& g : kGeos) {
    SCOPED_TRACE(name_of(g));
    const Inputs in = make_inputs(g, 12);
    const int64_t OH = g.H + 2 * g.pH - g.dH * (g.kH - 1);
    const cpu::ImplicitConvShape s{g.N, g.C, g.H, g.W, g.O, g.kH, g.kW, g.pH, g.pW, g.dH, OH};
    Tensor y = full({g.N, g.O, OH, g.W}, std::numeric_limits<float>::quiet_NaN());  // every element written
    cpu::conv_implicit_gemm(s, static_cast<const float*>(in.x.data_ptr()), static_cast<const float*>(in.w.data_ptr()),
                            in.b.defined() ? static_cast<const float*>(in.b.data_ptr()) : nullptr,
                            static_cast<float*>(y.data_ptr()));
    const Tensor ref = conv(g, cast(in.x, DType::Float64), cast(in.w, DType::Float64), cast(in.b, DType::Float64));
    const Tensor absprod =
        conv(g, abs(cast(in.x, DType::Float64)), abs(cast(in.w, DType::Float64)), abs_or_none(cast(in.b, DType::Float64)));
    EXPECT_TRUE(within_sum_bound(y, ref, absprod, g.C * g.kH * g.kW, 1.0, 0));
  }
}

TEST(ConvImplicitGemm, Bf16EmulatedIsTheFp32KernelOnWidenedInputsRounded) {
  MT_REQUIRE_KERNEL();
  for (const Geo& g : kGeos) {
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

TEST(ConvImplicitGemm, Bf16NativeMatchesFp64WithinTheBound) {
  MT_REQUIRE_KERNEL();
  if (!native_available()) GTEST_SKIP() << "no AVX512_BF16 here";
  for (cpu::Bf16GemmPath p : bf16_paths(false))
    for (const Geo& g : kGeos) {
      SCOPED_TRACE(name_of(g) + " on " + path_name(p));
      const Inputs in = make_inputs(g, 14);
      const Tensor xb = in.x.to(DType::BFloat16), wb = in.w.to(DType::BFloat16), bb = cast(in.b, DType::BFloat16);
      const Tensor x64 = xb.to(DType::Float64), w64 = wb.to(DType::Float64), b64 = cast(bb, DType::Float64);
      const Tensor ref = conv(g, x64, w64, b64), absprod = conv(g, abs(x64), abs(w64), abs_or_none(b64));
      const Tensor got = with_bf16(p, [&] { return conv(g, xb, wb, bb); });
      const Tensor old = with_bf16(p, [&] { return with_algo(cpu::ConvAlgo::Im2col, [&] { return conv(g, xb, wb, bb); }); });
      EXPECT_TRUE(within_sum_bound(got, ref, absprod, g.C * g.kH * g.kW, 1.0, 1.0));
      EXPECT_TRUE(within_sum_bound(got, old.to(DType::Float64), absprod, g.C * g.kH * g.kW, 2.0, 2.0));
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
  for (const Geo& g : kGeos) {
    if (g.C * g.kH * g.kW > 512) continue;
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
  const Geo g{4, 32, 14, 14, 64, 3, 3, 1, 1, 1, true};
  const Inputs in = make_inputs(g, 22);
  const Tensor xb = in.x.to(DType::BFloat16), wb = in.w.to(DType::BFloat16), bb = cast(in.b, DType::BFloat16);
  const auto f = [&] { return conv(g, xb, wb, bb); };
  EXPECT_FALSE(same_bits(with_bf16(cpu::Bf16GemmPath::Amx, f), with_bf16(cpu::Bf16GemmPath::Avx512Bf16, f)));
}

TEST(ConvImplicitGemm, InputGradAsAConvMatchesFp64) {
  // Unit strides and "same" padding: conv2d_input_grad runs as the forward conv of gy with the
  // flipped, transposed weight on this kernel, O > C included (SmallCNN's 32 -> 64).
  MT_REQUIRE_KERNEL();
  for (const Geo& g : kGeos) {
    if (g.pH > (g.kH - 1) * g.dH) continue;
    SCOPED_TRACE(name_of(g));
    const Inputs in = make_inputs(g, 15);
    const IntList st{1, 1}, pd{g.pH, g.pW}, dl{g.dH, 1};
    const IntList xs{g.N, g.C, g.H, g.W};
    const Tensor y = conv(g, in.x, in.w, Tensor());
    Generator gen(16);
    const Tensor gy = randn(y.sizes(), {}, &gen);
    const Tensor ref = conv2d_input_grad(gy.to(DType::Float64), in.w.to(DType::Float64), xs, st, pd, dl);
    const Tensor absprod = conv2d_input_grad(abs(gy.to(DType::Float64)), abs(in.w.to(DType::Float64)), xs, st, pd, dl);
    const int64_t k = g.O * g.kH * g.kW;
    const Tensor got = with_algo(cpu::ConvAlgo::Auto, [&] { return conv2d_input_grad(gy, in.w, xs, st, pd, dl); });
    EXPECT_TRUE(within_sum_bound(got, ref, absprod, k, 1.0, 0));
    for (cpu::Bf16GemmPath p : bf16_paths(true)) {
      const Tensor gb = gy.to(DType::BFloat16), wb = in.w.to(DType::BFloat16);
      const Tensor r16 = conv2d_input_grad(gb.to(DType::Float64), wb.to(DType::Float64), xs, st, pd, dl);
      const Tensor a16 = conv2d_input_grad(abs(gb.to(DType::Float64)), abs(wb.to(DType::Float64)), xs, st, pd, dl);
      const Tensor g16 = with_bf16(p, [&] { return conv2d_input_grad(gb, wb, xs, st, pd, dl); });
      EXPECT_TRUE(within_sum_bound(g16, r16, a16, k, 1.0, 1.0)) << path_name(p);
    }
  }
}

TEST(ConvImplicitGemm, SameBitsOnOneAndTwoThreads) {
  MT_REQUIRE_KERNEL();
  // Big enough for the kernel to use a team (2^21 multiply-adds), with a ragged last panel.
  const Geo g{6, 24, 13, 13, 20, 3, 3, 1, 1, 1, true};
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
  // Column dilation and groups are not plane-shift geometry, nor the direct kernels' (3-wide convs
  // with unit column dilation and one group: tests/ops/test_conv_direct.cpp and
  // test_conv_direct_bf16.cpp, which also take strided BF16 convs on AVX512-BF16): conv2d runs
  // im2col + GEMM for them whatever the switch says, in FP32 and in BF16.
  MT_REQUIRE_KERNEL();
  Generator gen(19);
  const Tensor x = randn({2, 4, 9, 8}, {}, &gen), w = randn({6, 4, 3, 3}, {}, &gen);
  const Tensor wg = randn({6, 2, 3, 3}, {}, &gen);
  const std::function<Tensor()> cases[] = {
      [&] { return conv2d(x, w, Tensor(), {1, 1}, {1, 2}, {1, 2}); },
      [&] { return conv2d(x, wg, Tensor(), {1, 1}, {1, 1}, {1, 1}, 2); },
      [&] { return conv2d(x.to(DType::BFloat16), w.to(DType::BFloat16), Tensor(), {1, 1}, {1, 2}, {1, 2}); },
      [&] { return conv2d(x.to(DType::BFloat16), wg.to(DType::BFloat16), Tensor(), {2, 2}, {1, 1}, {1, 1}, 2); },
  };
  for (const auto& f : cases) {
    EXPECT_TRUE(same_bits(with_algo(cpu::ConvAlgo::Auto, f), with_algo(cpu::ConvAlgo::Im2col, f)));
  }
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
