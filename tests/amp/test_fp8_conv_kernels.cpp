// tests/amp/test_fp8_conv_kernels.cpp — Fp8Autocast's conv2d on BF16 autocast's conv kernels
// (ops/conv_scaled.h, the kernel route of amp/fp8_ops.cpp), on every BF16 GEMM path this CPU has
// and a list of geometries that reaches every entry of conv2d's BF16 lists (tests/ops/conv_geometries.h):
//   - the epilogue factor: with alpha a power of two, the scaled forward and input gradient are
//     the BF16 ops' own results times alpha, bit for bit, on random operands (the factor is applied
//     to the FP32 sum before the one rounding; alpha = 1 is the BF16 op itself); the weight
//     gradient's FP32 sums round to the BF16 op's bits;
//   - the route against the reference FP8 path (im2col + FP8 GEMM + col2im, which Fp8Autocast
//     still takes for an FP32 output) on operands whose FP32 sums are exact: the same bits for the
//     output, the input, weight and bias gradients;
//   - the kernel trace: FP8's conv2d runs the entry BF16 autocast runs for the same shape.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/trace.h"
#include "mixtape/mixtape.h"
#include "ops/conv_geometries.h"
#include "ops/conv_args.h"
#include "ops/conv_scaled.h"
#include "ops/threads.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/steering.h"

using namespace mixtape;
using namespace mixtape::amp;

namespace {

using Geo = mixtape::testing::ConvGeometry;
// The shared list's one-group rows (Fp8Autocast's conv2d takes one group): they reach every entry
// of the BF16 lists (plane-shift convs the implicit GEMM or the channel pairs, strided ones the
// direct and pair kernels, one channel, O < 2 and 1-row kernels the other declines, dilation).
const std::vector<Geo>& kGeos() {
  static const std::vector<Geo> rows = [] {
    std::vector<Geo> r;
    for (const Geo& c : mixtape::testing::kConvGeometries)
      if (c.G == 1) r.push_back(c);
    return r;
  }();
  return rows;
}

std::vector<cpu::Bf16GemmPath> bf16_paths_here() {
  std::vector<cpu::Bf16GemmPath> k = {cpu::Bf16GemmPath::Emulated};
  if (cpu::can_run_bf16_native(cpu::cpu_features())) k.push_back(cpu::Bf16GemmPath::Avx512Bf16);
  if (cpu::can_run_bf16_amx(cpu::cpu_features_with_amx())) k.push_back(cpu::Bf16GemmPath::Amx);
  return k;
}
const char* path_name(cpu::Bf16GemmPath p) {
  return p == cpu::Bf16GemmPath::Amx ? "amx" : p == cpu::Bf16GemmPath::Avx512Bf16 ? "avx512bf16" : "emulated";
}

::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype())
    return ::testing::AssertionFailure() << a.describe() << " vs " << b.describe();
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  const size_t es = element_size(a.dtype());
  const auto* pa = static_cast<const unsigned char*>(ca.data_ptr());
  const auto* pb = static_cast<const unsigned char*>(cb.data_ptr());
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::memcmp(pa + i * es, pb + i * es, es) != 0) {
      const std::vector<float> va = ca.to_vector<float>(), vb = cb.to_vector<float>();
      return ::testing::AssertionFailure() << "element " << i << ": " << va[static_cast<size_t>(i)] << " vs "
                                           << vb[static_cast<size_t>(i)];
    }
  return ::testing::AssertionSuccess();
}

ConvGeom geom_of(const Geo& c) {
  return check_conv_geometry("conv2d", Shown::shape(c.x_size()), Shown::shape(c.w_size()), c.stride(), c.padding(),
                             c.dilation(), 1);
}

// Values from {0, +-1, +-1.5, +-2, +-3, +-4, +-6} times 2^e: exact in E5M2 and E4M3 after a
// power-of-two scale, with sums of their products exact in FP32 at these depths.
Tensor grid_values(const IntList& sizes, uint64_t seed, int e) {
  static const float kV[] = {0.0f, 1.0f, -1.0f, 1.5f, -1.5f, 2.0f, -2.0f, 3.0f, -3.0f, 4.0f, -4.0f, 6.0f, -6.0f};
  std::mt19937_64 rng(seed);
  Tensor t = Tensor::empty(sizes, TensorOptions(DType::Float32));
  float* p = t.data_ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = std::ldexp(kV[rng() % 13], e);
  return t;
}

TEST(Fp8ConvKernels, ThePowerOfTwoEpilogueFactorScalesTheBf16OpsBitsOnEveryEntry) {
  Generator gen(5);
  for (cpu::Bf16GemmPath path : bf16_paths_here()) {
    const cpu::Override on(path);
    for (const Geo& c : kGeos()) {
      const ConvGeom g = geom_of(c);
      const Tensor x = randn(c.x_size(), {}, &gen).to(DType::BFloat16);
      const Tensor w = randn(c.w_size(), {}, &gen).to(DType::BFloat16);
      const Tensor gy = randn(c.y_size(), {}, &gen).to(DType::BFloat16);
      const std::string at = std::string(c.what) + " on " + path_name(path);
      EXPECT_TRUE(same_bits(conv2d_bf16_scaled(x, w, Tensor(), g, 1.0f),
                            conv2d(x, w, Tensor(), c.stride(), c.padding(), c.dilation())))
          << at;
      EXPECT_TRUE(same_bits(conv2d_bf16_scaled(x, w, Tensor(), g, 0.25f),
                            conv2d(x, w, Tensor(), c.stride(), c.padding(), c.dilation()) * 0.25))
          << at;
      EXPECT_TRUE(same_bits(conv2d_input_grad_bf16_scaled(gy, w, g, 8.0f),
                            conv2d_input_grad(gy, w, c.x_size(), c.stride(), c.padding(), c.dilation()) * 8.0))
          << at;
      EXPECT_TRUE(same_bits(conv2d_weight_grad_bf16_sums(x, gy, g).to(DType::BFloat16),
                            conv2d_weight_grad(x, gy, c.w_size(), c.stride(), c.padding(), c.dilation())))
          << at;
    }
  }
}

// With a bias and a factor that is not a power of two, each output is the FP32 product rounded on
// its own, then the bias added: bf16(f32(f32(s alpha) + b)), never one fused rounding, on every
// forward entry, and the same whether a batch of one splits its rows between threads or not.
TEST(Fp8ConvKernels, TheFactorRoundsBeforeTheBiasOnEveryEntryAndThreadCount) {
  const float alpha = 0x1.948a66p-7f;
  const int threads_before = get_num_threads();
  for (cpu::Bf16GemmPath path : bf16_paths_here()) {
    const cpu::Override on(path);
    uint64_t seed = 700;
    for (const Geo& c : kGeos()) {
      const ConvGeom g = geom_of(c);
      const Tensor x = grid_values(c.x_size(), ++seed, -2), w = grid_values(c.w_size(), ++seed, 0);
      Generator gen(seed);
      const Tensor b = randn({c.O}, {}, &gen);
      // The sums are exact (grid values), so any order gives s; the f32 conv is the reference's s.
      const Tensor s = conv2d(x, w, Tensor(), c.stride(), c.padding(), c.dilation()).contiguous();
      Tensor want = Tensor::empty(s.sizes(), TensorOptions(DType::Float32));
      const float* ps = s.data_ptr<float>();
      const float* pb = b.data_ptr<float>();
      float* pw = want.data_ptr<float>();
      const int64_t plane = s.size(2) * s.size(3);
      for (int64_t i = 0; i < s.numel(); ++i) {
        const volatile float prod = ps[i] * alpha;  // rounded here: no contraction with the add
        pw[i] = prod + pb[(i / plane) % c.O];
      }
      for (int t : {1, 2}) {
        set_num_threads(t);
        const Tensor got = conv2d_bf16_scaled(x.to(DType::BFloat16), w.to(DType::BFloat16), b, g, alpha);
        EXPECT_TRUE(same_bits(got, want.to(DType::BFloat16)))
            << c.what << " on " << path_name(path) << ", " << t << " thread(s)";
      }
    }
  }
  set_num_threads(threads_before);
}

struct StepResult {
  Tensor y, gx, gw, gb;
};
// One FP8 conv2d step: BF16 input (it needs a gradient), FP32 weight and bias, gradient gy.
StepResult fp8_step(const Geo& c, const Fp8Recipe& recipe, DType out, const Tensor& x0, const Tensor& w0, const Tensor& b0,
             const Tensor& gy) {
  const Tensor x = x0.to(DType::BFloat16).requires_grad_(), w = w0.clone().requires_grad_();
  const Tensor b = c.bias ? b0.clone().requires_grad_() : Tensor();
  Tensor y;
  {
    Fp8Autocast fp8(recipe, nullptr, {.output_dtype = out});
    y = conv2d(x, w, b, c.stride(), c.padding(), c.dilation());
  }
  y.backward(gy.to(out));
  return {y.detach(), x.grad(), w.grad(), c.bias ? b.grad() : Tensor()};
}

TEST(Fp8ConvKernels, TheKernelRouteGivesTheReferencePathsBitsWhereItsSumsAreExact) {
  // A BF16 output takes the kernel route; an FP32 one the reference path (im2col, the FP8 GEMM,
  // col2im), whose exact results round once to the same BF16.
  for (cpu::Bf16GemmPath path : bf16_paths_here()) {
    const cpu::Override on(path);
    for (Fp8Format format : {Fp8Format::Hybrid, Fp8Format::E4M3}) {
      const Fp8Recipe recipe = CurrentScaling{format, true};
      uint64_t seed = 100;
      for (const Geo& c : kGeos()) {
        const Tensor x = grid_values(c.x_size(), ++seed, -2), w = grid_values(c.w_size(), ++seed, 0);
        const Tensor b = grid_values({c.O}, ++seed, 3), gy = grid_values(c.y_size(), ++seed, -5);
        const StepResult route = fp8_step(c, recipe, DType::BFloat16, x, w, b, gy);
        const StepResult ref = fp8_step(c, recipe, DType::Float32, x, w, b, gy);
        const std::string at = std::string(c.what) + " on " + path_name(path);
        EXPECT_TRUE(same_bits(route.y, ref.y.to(DType::BFloat16))) << at;
        EXPECT_TRUE(same_bits(route.gx, ref.gx)) << at;
        EXPECT_TRUE(same_bits(route.gw, ref.gw)) << at;
        if (c.bias) {
          EXPECT_TRUE(same_bits(route.gb, ref.gb)) << at;
        }
      }
    }
  }
}

// The kernel names of the trace's conv2d lines, in order.
std::vector<std::string> conv_kernels(const std::string& trace) {
  std::vector<std::string> k;
  std::istringstream ls(trace);
  for (std::string l; std::getline(ls, l);) {
    if (l.rfind("[kernel] conv2d.", 0) != 0) continue;
    const size_t arrow = l.find(" -> ");
    const size_t end = l.find(' ', arrow + 4);
    k.push_back(l.substr(0, l.find(' ', 9)) + " " + l.substr(arrow + 4, end - arrow - 4));
  }
  return k;
}

TEST(Fp8ConvKernels, Fp8Conv2dRunsTheEntriesBf16AutocastRuns) {
  for (cpu::Bf16GemmPath path : bf16_paths_here()) {
    const cpu::Override on(path);
    for (const Geo& c : kGeos()) {
      Generator gen(7);
      const Tensor x0 = randn(c.x_size(), {}, &gen), w0 = randn(c.w_size(), {}, &gen), b0 = randn({c.O}, {}, &gen);
      auto traced = [&](bool fp8) {
        const Tensor x = x0.to(DType::BFloat16).requires_grad_(), w = w0.clone().requires_grad_();
        const Tensor b = c.bias ? b0.clone().requires_grad_() : Tensor();
        std::string captured;
        {
          ScopedTrace trace(static_cast<uint32_t>(TraceKind::Kernel), &captured);
          Tensor y;
          if (fp8) {
            Fp8Autocast region(CurrentScaling{});
            y = conv2d(x, w, b, c.stride(), c.padding(), c.dilation());
          } else {
            AutocastGuard region(DeviceType::CPU, DType::BFloat16);
            y = conv2d(x, w, b, c.stride(), c.padding(), c.dilation());
          }
          y.sum().backward();
        }
        return captured;
      };
      const std::string fp8 = traced(true), bf16 = traced(false);
      const std::vector<std::string> kf = conv_kernels(fp8), kb = conv_kernels(bf16);
      EXPECT_EQ(kf.size(), 3u) << fp8;  // conv2d.fwd, conv2d.dgrad, conv2d.wgrad
      EXPECT_EQ(kf, kb) << c.what << " on " << path_name(path) << "\nFP8:\n" << fp8 << "BF16:\n" << bf16;
      EXPECT_NE(fp8.find(" fp8 -> "), std::string::npos) << fp8;
    }
  }
}

}  // namespace
