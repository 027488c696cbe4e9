// tests/ops/test_kernel_choices.cpp — the kernel each recorded problem runs on stays the one recorded.
// tests/fixtures/kernel_choices.txt holds one MIXTAPE_TRACE=kernel line (without "[kernel] " and the
// skipped list) for every conv2d / matmul / linear problem that tests/ops, tests/models, bench/conv_ops
// and bench/train_throughput (SmallCNN, ResNet-8; fp32, fp16, bf16; batch 128) ran, recorded on an
// AVX-512 CPU with AVX512-BF16 and AMX (a Sapphire Rapids Xeon). Each line is run again here, with
// the steering its bracket names ([bf16 emulated], [conv im2col]), and must print the same line: a refactor of the
// kernel lists that changes any choice (and so any bit or timing) fails it. Regenerate after a
// deliberate change with tests/fixtures/record_kernel_choices.sh.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <sstream>

#include "common/torch_fixture.h"
#include "core/trace.h"
#include "mixtape/mixtape.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/conv_implicit_gemm.h"
#include "ops/cpu/cpu_features.h"

namespace mixtape {
namespace {

struct Recorded {
  std::string line, op_pass, dtype, bf16, conv;
  std::map<std::string, std::pair<int64_t, int64_t>> f;  // N=, k3x3, g1, ...
};

std::pair<int64_t, int64_t> two(const std::string& v) {
  const size_t x = v.find('x');
  if (x == std::string::npos) return {std::stoll(v), std::stoll(v)};
  return {std::stoll(v.substr(0, x)), std::stoll(v.substr(x + 1))};
}

Recorded parse(const std::string& line) {
  Recorded r;
  r.line = line;
  const std::string problem = line.substr(0, line.find(" -> "));
  std::string head = problem, tags;
  if (const size_t b = problem.find(" ["); b != std::string::npos) {
    head = problem.substr(0, b);
    tags = problem.substr(b + 2, problem.size() - b - 3);
  }
  std::istringstream is(head);
  is >> r.op_pass >> r.dtype;
  for (std::string tok; is >> tok;) {
    if (const size_t e = tok.find('='); e != std::string::npos)
      r.f[tok.substr(0, e)] = two(tok.substr(e + 1));
    else
      r.f[tok.substr(0, 1)] = two(tok.substr(1));
  }
  std::istringstream ts(tags);
  for (std::string t; std::getline(ts, t, ',');) {
    if (t.front() == ' ') t.erase(0, 1);
    if (t.rfind("bf16 ", 0) == 0) r.bf16 = t.substr(5);
    else if (t == "conv im2col") r.conv = "im2col";
    else ADD_FAILURE() << "unknown steering [" << t << "] in: " << line;
  }
  return r;
}

DType dtype_of(const std::string& s) {
  if (s == "f32") return DType::Float32;
  if (s == "f64") return DType::Float64;
  if (s == "f16") return DType::Float16;
  if (s == "bf16") return DType::BFloat16;
  ADD_FAILURE() << "unknown dtype " << s;
  return DType::Float32;
}

Tensor zeros_of(const IntList& sizes, DType dt) { return zeros(sizes).to(dt); }

// Runs the recorded problem once and returns the line its kernel trace printed.
std::string rerun(const Recorded& r) {
  std::optional<cpu::Bf16GemmOverride> bf16;
  if (r.bf16 == "emulated") bf16.emplace(cpu::Bf16GemmPath::Emulated);
  else if (r.bf16 == "avx512bf16") bf16.emplace(cpu::Bf16GemmPath::Avx512Bf16);
  else if (r.bf16 == "amx") bf16.emplace(cpu::Bf16GemmPath::Amx);
  cpu::ConvAlgoOverride conv(r.conv == "im2col" ? cpu::ConvAlgo::Im2col : cpu::ConvAlgo::Auto);
  const DType dt = dtype_of(r.dtype);
  std::string captured;
  {
    ScopedTrace trace(static_cast<uint32_t>(TraceKind::Kernel), &captured);
    auto v = [&](const char* k) { return r.f.at(k).first; };
    auto v2 = [&](const char* k) { return r.f.at(k).second; };
    if (r.op_pass.rfind("conv2d.", 0) == 0) {
      const int64_t N = v("N"), C = v("C"), H = v("H"), W = v("W"), O = v("O"), G = v("g");
      const IntList st{v("s"), v2("s")}, pd{v("p"), v2("p")}, dl{v("d"), v2("d")};
      const int64_t kH = v("k"), kW = v2("k");
      const int64_t OH = (H + 2 * pd[0] - dl[0] * (kH - 1) - 1) / st[0] + 1;
      const int64_t OW = (W + 2 * pd[1] - dl[1] * (kW - 1) - 1) / st[1] + 1;
      const IntList xs{N, C, H, W}, ws{O, C / G, kH, kW}, ys{N, O, OH, OW};
      if (r.op_pass == "conv2d.fwd")
        (void)conv2d(zeros_of(xs, dt), zeros_of(ws, dt), Tensor(), st, pd, dl, G);
      else if (r.op_pass == "conv2d.dgrad")
        (void)conv2d_input_grad(zeros_of(ys, dt), zeros_of(ws, dt), xs, st, pd, dl, G);
      else
        (void)conv2d_weight_grad(zeros_of(xs, dt), zeros_of(ys, dt), ws, st, pd, dl, G);
    } else if (r.op_pass == "matmul.fwd") {
      const int64_t B = v("B"), M = v("M"), K = v("K"), Nn = v("N");
      (void)matmul(zeros_of({B, M, K}, dt), zeros_of({B, K, Nn}, dt));
    } else if (r.op_pass == "linear.fwd") {
      (void)linear(zeros_of({v("M"), v("K")}, dt), zeros_of({v("N"), v("K")}, dt));
    } else {
      ADD_FAILURE() << "unknown op.pass " << r.op_pass;
    }
  }
  // The last line is the recorded op's (zeros(...).to() may trace nothing, but be safe).
  std::string last;
  std::istringstream ls(captured);
  for (std::string l; std::getline(ls, l);) last = l;
  const std::string prefix = "[kernel] ";
  if (last.rfind(prefix, 0) == 0) last.erase(0, prefix.size());
  if (const size_t sk = last.find(" (skipped: "); sk != std::string::npos) last.erase(sk);
  return last;
}

TEST(KernelChoices, EveryRecordedProblemRunsItsRecordedKernel) {
  // The choices depend on the CPU: AVX-512 runs the own kernels, AMX is the BF16 default.
  if (!(cpu::can_run_bf16_amx(cpu::cpu_features_with_amx()) && cpu::own_float_gemm()))
    GTEST_SKIP() << "the recording is of an AVX-512 CPU with AVX512-BF16 and AMX, MIXTAPE_GEMM unset";
  std::ifstream in(testing::torch_fixture_path("kernel_choices.txt"));
  ASSERT_TRUE(in) << testing::torch_fixture_path("kernel_choices.txt");
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    ++n;
    EXPECT_EQ(rerun(parse(line)), line);
  }
  EXPECT_GT(n, 100);
}

}  // namespace
}  // namespace mixtape
