// tests/ops/test_kernel_entries.cpp — every entry of every CPU kernel list (ops/cpu/kernel_table.h's
// registry: conv2d's three passes, batch norm, max pooling, the BF16 elementwise rows) run on every
// geometry of the one list (tests/ops/conv_geometries.h) that it accepts, forced by
// cpu::Override(KernelSpec), with the entry's own contract:
//   - conv2d (at each ISA level this CPU can be capped at, ops/cpu/isa.h: f32 below AVX512-BF16, bf16
//     with the level's BF16 GEMM path: emulated, vdpbf16ps, AMX): within the FP32 summation bound
//     of an FP64 reference (tests/common/sum_bound.h; plus one rounding to BF16), and where two
//     entries claim the same bits (direct_avx512 and implicit_gemm_avx512 on "same" convs), bit
//     for bit each other;
//   - batch norm, max pooling, elementwise rows (capped at baseline, and with AVX-512): bit for bit
//     the list's generic entry.
// Forward convs add a bias where the geometry has one. Each conv entry's output block is the one
// just freed full of NaN, so an element it never writes fails the bound.
// An entry that declines a geometry is skipped there; one this CPU cannot run declines everywhere.
// A new kernel is tested here as soon as its list holds it: the test asks the registry for names.
#include <gtest/gtest.h>

#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <mixtape/mixtape.h>

#include "common/bit_equal.h"
#include "common/sum_bound.h"
#include "ops/conv_geometries.h"
#include "core/trace.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/conv_implicit_gemm.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/isa.h"
#include "ops/cpu/kernel_table.h"
#include "ops/cpu/steering.h"

namespace mixtape {
namespace {

using testing::bit_equal;
using testing::within_sum_bound;

using Geometry = testing::ConvGeometry;
using testing::kConvGeometries;

// The kernel the last traced line of `op_pass` names ("" when none).
std::string kernel_of(const std::string& trace, const std::string& op_pass) {
  std::string k;
  std::istringstream ls(trace);
  const std::string prefix = "[kernel] " + op_pass + " ";
  for (std::string l; std::getline(ls, l);) {
    if (l.rfind(prefix, 0) != 0) continue;
    k = l.substr(l.find(" -> ") + 4);
    if (const size_t sk = k.find(" ("); sk != std::string::npos) k.erase(sk);
  }
  return k;
}

// Runs `call` with `op_pass:name` forced: the result, or nullopt where the entry declines or the
// list for this dtype does not hold it (the trace then names another entry).
template <typename F>
std::optional<TensorList> forced(const std::string& op_pass, const std::string& name, F&& call) {
  cpu::Override force(cpu::KernelSpec{op_pass + ":" + name});
  std::string trace;
  TensorList out;
  try {
    ScopedTrace t(static_cast<uint32_t>(TraceKind::Kernel), &trace);
    out = call();
  } catch (const std::exception& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("does not apply to this problem"), std::string::npos) << op_pass << ":" << name << ": " << m;
    return std::nullopt;
  }
  const std::string ran = kernel_of(trace, op_pass);
  if (ran != name && ran.rfind(name + ".", 0) != 0) return std::nullopt;  // as_conv.<forward kernel>
  return out;
}

Tensor f64(const Tensor& t) { return t.to(DType::Float64); }

enum class Pass { Fwd, Dgrad, Wgrad };
struct ConvCase {
  Pass pass;
  const char* op_pass;
};
const ConvCase kPasses[] = {{Pass::Fwd, "conv2d.fwd"}, {Pass::Dgrad, "conv2d.dgrad"}, {Pass::Wgrad, "conv2d.wgrad"}};

// Pass p of geometry g on x (fwd, wgrad), w (fwd, dgrad), gy (dgrad, wgrad), b (fwd, where g has a bias).
Tensor conv_pass(Pass p, const Geometry& g, const Tensor& x, const Tensor& w, const Tensor& gy, const Tensor& b) {
  if (p == Pass::Fwd) return conv2d(x, w, g.bias ? b : Tensor(), g.stride(), g.padding(), g.dilation(), g.G);
  if (p == Pass::Dgrad) return conv2d_input_grad(gy, w, g.x_size(), g.stride(), g.padding(), g.dilation(), g.G);
  return conv2d_weight_grad(x, gy, g.w_size(), g.stride(), g.padding(), g.dilation(), g.G);
}
IntList out_size(Pass p, const Geometry& g) {
  return p == Pass::Fwd ? g.y_size() : p == Pass::Dgrad ? g.x_size() : g.w_size();
}
// The number of products each output sums.
int64_t depth(Pass p, const Geometry& g) {
  if (p == Pass::Fwd) return g.C / g.G * g.kH * g.kW;
  if (p == Pass::Dgrad) return g.O / g.G * g.kH * g.kW;
  return g.N * g.OH() * g.OW();
}

// The ISA levels this CPU can be capped at (ops/cpu/isa.h; up to the cap in force), lowest first.
std::vector<cpu::IsaLevel> emulable_levels() {
  std::vector<cpu::IsaLevel> v;
  using L = cpu::IsaLevel;
  for (L l : {L::Baseline, L::Avx512, L::Avx512Bf16, L::Amx})
    if (l <= cpu::isa_cap() && cpu::isa_hardware_has(l)) v.push_back(l);
  return v;
}
// The steerings a conv entry can meet: each ISA level this CPU can emulate, with the BF16 GEMM path
// that level adds (FP32 convs differ only between baseline and AVX-512, BF16 ones at every level).
struct Step {
  cpu::IsaLevel cap;
  cpu::Bf16GemmPath bf16;
  bool f32;
};
std::vector<Step> steps() {
  std::vector<Step> v;
  for (cpu::IsaLevel l : emulable_levels()) {
    const bool low = l <= cpu::IsaLevel::Avx512;
    v.push_back({l,
                 low                          ? cpu::Bf16GemmPath::Emulated
                 : l == cpu::IsaLevel::Amx ? cpu::Bf16GemmPath::Amx
                                              : cpu::Bf16GemmPath::Avx512Bf16,
                 low});
  }
  return v;
}

TEST(KernelEntries, EveryConvEntryOnEveryGeometryItTakes) {
  std::map<std::string, int> ran;  // op.pass dtype:name -> geometries
  for (const Geometry& g : kConvGeometries) {
    Generator gen(0x600d + static_cast<uint64_t>(g.C * 131 + g.H));
    const Tensor x = randn(g.x_size(), {}, &gen), w = randn(g.w_size(), {}, &gen), gy = randn(g.y_size(), {}, &gen);
    const Tensor b = randn({g.O}, {}, &gen);
    for (const ConvCase& c : kPasses) {
      for (int bf16 = 0; bf16 < 2; ++bf16) {
        const DType dt = bf16 ? DType::BFloat16 : DType::Float32;
        const Tensor xd = x.to(dt), wd = w.to(dt), gyd = gy.to(dt), bd = b.to(dt);
        // The FP64 reference on the same (rounded) operands, and the same sums of |terms|.
        const Tensor ref = conv_pass(c.pass, g, f64(xd), f64(wd), f64(gyd), f64(bd));
        const Tensor absterms = conv_pass(c.pass, g, abs(f64(xd)), abs(f64(wd)), abs(f64(gyd)), abs(f64(bd)));
        for (const Step& step : steps()) {
          if (!bf16 && !step.f32) continue;
          cpu::Override cap(step.cap);
          cpu::Override steer(step.bf16);  // also for f32: MIXTAPE_CPU_BF16 may name a level above the cap
          const char* path_name = cpu::isa_level_name(step.cap);
          std::map<std::string, Tensor> results;
          for (const std::string& name : cpu::kernel_names(c.op_pass)) {
            const auto out = forced(c.op_pass, name, [&] {
              // The block just freed is the next of its size the allocator hands out (malloc's
              // and the CPU cache's LIFO): an output element the entry never writes reads NaN,
              // not the previous entry's value.
              full(out_size(c.pass, g), std::numeric_limits<float>::quiet_NaN(), TensorOptions(dt));
              return TensorList{conv_pass(c.pass, g, xd, wd, gyd, bd)};
            });
            if (!out) continue;
            const std::string tag = std::string(c.op_pass) + " " + (bf16 ? "bf16 " : "f32 ") + path_name + ":" + name;
            ++ran[tag];
            EXPECT_TRUE(within_sum_bound((*out)[0], ref, absterms, depth(c.pass, g), 1.0, bf16 ? 1 : 0))
                << tag << " on " << g.what;
            results[name] = (*out)[0];
          }
          // The direct kernel and the implicit GEMM claim the same FMA chain per output.
          if (!bf16 && c.pass == Pass::Fwd && results.count("direct_avx512") && results.count("implicit_gemm_avx512")) {
            EXPECT_TRUE(bit_equal(results["direct_avx512"], results["implicit_gemm_avx512"])) << g.what;
          }
        }
      }
    }
  }
  for (const auto& [tag, n] : ran) std::cout << "[ KernelEntries ] " << tag << ": " << n << " geometries\n";
  // The references end every list and take every geometry.
  const int all = static_cast<int>(std::size(kConvGeometries));
  for (const char* level : {"baseline", "avx512"}) {
    if (level == std::string("avx512") && !cpu::isa_avx512()) continue;
    EXPECT_EQ(ran[std::string("conv2d.fwd f32 ") + level + ":im2col_gemm"], all) << level;
    EXPECT_EQ(ran[std::string("conv2d.dgrad f32 ") + level + ":gemm_col2im"], all) << level;
    EXPECT_EQ(ran[std::string("conv2d.wgrad f32 ") + level + ":im2col_gemm"], all) << level;
    EXPECT_EQ(ran[std::string("conv2d.wgrad bf16 ") + level + ":im2col_gemm"], all) << level;
  }
  // The entries whose kernels' own files no longer call them (their geometries are in the list):
  // each still takes at least as many geometries as those files held (where the environment
  // leaves the AVX-512 conv kernels on: not under MIXTAPE_GEMM=blas or MIXTAPE_CPU_CONV=im2col).
  if (cpu::isa_avx512() && cpu::own_kernels_enabled() && cpu::conv_kernels_enabled()) {
    EXPECT_GE(ran["conv2d.fwd f32 avx512:implicit_gemm_avx512"], 13);
    EXPECT_GE(ran["conv2d.dgrad f32 avx512:direct_avx512"], 10);
    EXPECT_GE(ran["conv2d.dgrad f32 avx512:as_conv"], 13);
    EXPECT_GE(ran["conv2d.wgrad f32 avx512:direct_avx512"], 11);
  }
  // Capped at baseline, the AVX-512 entries decline every geometry.
  for (const auto& [tag, n] : ran)
    if (tag.find(" baseline:") != std::string::npos) {
      EXPECT_EQ(tag.find("avx512"), std::string::npos) << tag << " ran on a CPU capped at baseline";
    }
}

// Every entry of `op_pass` on `call`, bit for bit the generic entry's result (each output).
template <typename F>
void entries_match_generic(const std::string& op_pass, const std::string& what, std::map<std::string, int>& ran,
                           F&& call) {
  const auto generic = forced(op_pass, "generic", call);
  ASSERT_TRUE(generic.has_value()) << op_pass << " generic declined " << what;
  for (const std::string& name : cpu::kernel_names(op_pass)) {
    if (name == "generic") continue;
    const auto out = forced(op_pass, name, call);
    if (!out) continue;
    ++ran[op_pass + ":" + name];
    ASSERT_EQ(out->size(), generic->size());
    for (size_t i = 0; i < out->size(); ++i)
      EXPECT_TRUE(bit_equal((*out)[i], (*generic)[i])) << op_pass << ":" << name << " output " << i << " on " << what;
  }
}

// Run at every level this CPU can emulate (capped below AVX-512, only the baseline entries take a problem).
TEST(KernelEntries, NormPoolAndElementwiseEntriesGiveTheGenericBits) {
  for (cpu::IsaLevel level : emulable_levels()) {
    // These lists ask only isa_avx512(): the higher levels run what avx512 runs.
    if (level == cpu::IsaLevel::Avx512Bf16 || level == cpu::IsaLevel::Amx) continue;
    cpu::Override cap(level);
    std::map<std::string, int> ran;
    struct Window {
      IntList k, s, p, d;
      bool ceil;
    };
    const Window windows[] = {{{2, 2}, {2, 2}, {0, 0}, {1, 1}, false},
                              {{2, 2}, {2, 2}, {0, 0}, {1, 1}, true},
                              {{3, 3}, {2, 2}, {1, 1}, {1, 1}, false},
                              {{3, 3}, {1, 1}, {1, 1}, {2, 2}, false}};
    for (const Geometry& g : kConvGeometries) {
      // The weight-gradient chunking geometries (7 to 41 images) hold no edge of these lists,
      // whose kernels split channels, rows and elements: they would only cost time.
      if (g.N * g.C * g.H * g.W > 40000) continue;
      Generator gen(0xbead + static_cast<uint64_t>(g.C * 7 + g.W));
      const Tensor x32 = randn(g.x_size(), {}, &gen), g32 = randn(g.x_size(), {}, &gen);
      for (DType dt : {DType::Float32, DType::BFloat16, DType::Float16, DType::Float64}) {
        const Tensor x = x32.to(dt), gx = g32.to(dt);
        const Tensor xs = x.reshape({g.N, g.C, g.H * g.W}), gs = gx.reshape({g.N, g.C, g.H * g.W});
        if (g.N * g.H * g.W > 1) {
          entries_match_generic("batch_norm.fwd", g.what, ran, [&] {
            const Tensor rm = zeros({g.C}), rv = ones({g.C});
            return TensorList{batch_norm(xs, rm, rv, ones({g.C}), zeros({g.C}), true), rm, rv};
          });
          entries_match_generic("batch_norm.bwd", g.what, ran, [&] {
            auto [dx, dw, db] =
                batch_norm_backward(gs, xs, ones({g.C}), full({g.C}, 0.25f), full({g.C}, 1.5f), true, 1e-5);
            return TensorList{dx, dw, db};
          });
        }
        for (const Window& win : windows) {
          if (g.H + 2 * win.p[0] < win.d[0] * (win.k[0] - 1) + 1 || g.W + 2 * win.p[1] < win.d[1] * (win.k[1] - 1) + 1)
            continue;
          entries_match_generic("max_pool2d.fwd", g.what, ran, [&] {
            auto [y, idx] = max_pool2d_with_indices(x, win.k, win.s, win.p, win.d, win.ceil);
            return TensorList{y, idx};
          });
          entries_match_generic("max_pool2d.fwd", g.what, ran, [&] {  // the tap codes it keeps for backward
            return dispatch(*find_op("max_pool2d"), {x},
                            {{"kernel_size", win.k}, {"stride", win.s}, {"padding", win.p}, {"dilation", win.d},
                             {"ceil_mode", win.ceil}});
          });
          entries_match_generic("max_pool2d.bwd", g.what, ran, [&] {
            Tensor xl = x.detach().requires_grad_(true);
            const Tensor y = max_pool2d(xl, win.k, win.s, win.p, win.d, win.ceil);
            y.backward(ones(y.sizes()).to(dt));
            return TensorList{xl.grad()};
          });
        }
      }
      const Tensor a = x32.to(DType::BFloat16), b = g32.to(DType::BFloat16);
      const Tensor bt = b.transpose(2, 3).contiguous().transpose(2, 3);  // same values, strided rows
      // One op a call: forced() reads the call's last trace line.
      const std::vector<std::function<Tensor()>> ops = {
          [&] { return add(a, b); },  [&] { return sub(a, b); },       [&] { return mul(a, b); },
          [&] { return div(a, b); },  [&] { return relu(a); },         [&] { return relu_grad(a, b); },
          [&] { return add(a, bt); }, [&] { return relu(bt); },        [&] { return mul(a, Scalar(0.5)); },
          [&] { return sub(a, b.slice(3, 0, 1)); }};
      for (const auto& op : ops)
        entries_match_generic("elementwise.fwd", g.what, ran, [&] { return TensorList{op()}; });
    }
    for (const auto& [tag, n] : ran) {
      std::cout << "[ KernelEntries ] " << cpu::isa_level_name(level) << " " << tag << ": " << n << " runs\n";
      if (level == cpu::IsaLevel::Baseline) {
        EXPECT_EQ(tag.find("avx512"), std::string::npos) << tag << " ran on a CPU capped at baseline";
      }
    }
  }
}

}  // namespace
}  // namespace mixtape
