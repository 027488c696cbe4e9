// tests/ops/test_kernel_choices.cpp — the kernel each recorded problem runs on stays the one recorded.
// tests/fixtures/kernel_choices.txt holds one MIXTAPE_TRACE=kernel line (without "[kernel] " and the
// skipped list) for every conv2d / matmul / linear (and batch_norm / max_pool2d / BF16 elementwise)
// problem that tests/ops, tests/models, bench/conv_ops and bench/train_throughput (SmallCNN,
// ResNet-8; fp32, fp16, bf16; batch 128) ran, under each steering
// tests/fixtures/record_kernel_choices.sh sets. A line's bracket names the steering it ran under
// ([bf16 amx|avx512bf16|emulated], [conv im2col], [gemm blas], [no avx512]); a line without "conv im2col" ran
// with the AVX-512 conv kernels on, one without "gemm blas" with the own AVX-512 float GEMM. Each line
// this CPU can reach is run again here under that steering (in-process overrides, whatever the
// environment says), at the lowest ISA level that reaches it that this CPU can emulate (an
// Override(IsaLevel) cap: an AMX machine replays the baseline, AVX-512, AVX512-BF16 and AMX lines
// each on its own level), and must print the same line: a refactor of the kernel lists that changes
// any choice (and so any bit or timing) fails it. Lines that need what this CPU lacks (AMX,
// AVX512-BF16, AVX-512) are left out and counted in the output; the test fails when no line could be
// replayed.
// Regenerate after a deliberate change with tests/fixtures/record_kernel_choices.sh.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "common/torch_fixture.h"
#include "core/profiler.h"
#include "core/trace.h"
#include "mixtape/mixtape.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/conv_implicit_gemm.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/isa.h"
#include "ops/cpu/loops.h"
#include "ops/cpu/sgemm_avx512.h"
#include "ops/cpu/steering.h"

namespace mixtape {
namespace {

struct Recorded {
  std::string line, op_pass, dtype, bf16, conv, gemm;
  bool no_avx512 = false;                 // [no avx512]
  std::map<std::string, std::string> f;  // N=, k3x3, g1, op=add, strides=2x2x2, ...
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
      r.f[tok.substr(0, e)] = tok.substr(e + 1);
    else
      r.f[tok.substr(0, 1)] = tok.substr(1);
  }
  std::istringstream ts(tags);
  for (std::string t; std::getline(ts, t, ',');) {
    if (t.front() == ' ') t.erase(0, 1);
    if (t.rfind("bf16 ", 0) == 0) r.bf16 = t.substr(5);
    else if (t == "conv im2col") r.conv = "im2col";
    else if (t == "gemm blas") r.gemm = "blas";
    else if (t == "no avx512") r.no_avx512 = true;
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

// 16 BF16 values that strided_loop walks with `stride` bytes apart (0: one value, broadcast).
Tensor bf16_row(int64_t stride) {
  const int64_t e = stride / 2;
  if (e == 0) return zeros_of({1}, DType::BFloat16);
  return zeros_of({16 * e}, DType::BFloat16).slice(0, 0, 16 * e, e);
}

// The elementwise op a recorded line names, on operands with the recorded row strides.
void run_elementwise(const Recorded& r) {
  const std::string op = r.f.at("op"), st = r.f.at("strides");
  std::vector<int64_t> s;
  if (st != "scalar") {
    std::istringstream is(st);
    for (std::string x; std::getline(is, x, 'x');) s.push_back(std::stoll(x));
  }
  const bool scalar = st == "scalar";
  ASSERT_TRUE(scalar || s.size() == 2 || s.size() == 3) << r.line;
  // Outputs are fresh and dense: stride 2, or 0 for a single element.
  ASSERT_TRUE(scalar || s[0] == 2 || (s[0] == 0 && s[1] == 0)) << r.line;
  if (op == "relu") {
    (void)relu(bf16_row(s[1]));
    return;
  }
  const Tensor a = scalar ? zeros_of({16}, DType::BFloat16) : bf16_row(s[1]);
  const Tensor b = scalar ? Tensor() : bf16_row(s[2]);
  if (op == "add") (void)(scalar ? add(a, Scalar(2.0)) : add(a, b));
  else if (op == "sub") (void)(scalar ? sub(a, Scalar(2.0)) : sub(a, b));
  else if (op == "mul") (void)(scalar ? mul(a, Scalar(2.0)) : mul(a, b));
  else if (op == "div") (void)(scalar ? div(a, Scalar(2.0)) : div(a, b));
  else if (op == "relu_grad" && !scalar) (void)relu_grad(a, b);
  else ADD_FAILURE() << "no replay for elementwise op " << op << " in: " << r.line;
}

// Runs the recorded problem once and returns the line its kernel trace printed.
std::string rerun(const Recorded& r) {
  std::optional<cpu::Override> bf16;
  if (r.bf16 == "emulated") bf16.emplace(cpu::Bf16GemmPath::Emulated);
  else if (r.bf16 == "avx512bf16") bf16.emplace(cpu::Bf16GemmPath::Avx512Bf16);
  else if (r.bf16 == "amx") bf16.emplace(cpu::Bf16GemmPath::Amx);
  cpu::Override conv(r.conv == "im2col" ? cpu::ConvAlgo::Im2col : cpu::ConvAlgo::Auto);
  cpu::Override gemm(r.gemm == "blas" ? cpu::FloatGemm::Blas : cpu::FloatGemm::Auto);
  const DType dt = dtype_of(r.dtype);
  std::string captured;
  {
    ScopedTrace trace(static_cast<uint32_t>(TraceKind::Kernel), &captured);
    auto v = [&](const char* k) { return two(r.f.at(k)).first; };
    auto v2 = [&](const char* k) { return two(r.f.at(k)).second; };
    if (r.op_pass.rfind("batch_norm.", 0) == 0) {
      // Eval mode: valid for every recorded shape (training needs more than one value per
      // channel); the choice does not depend on it.
      const int64_t N = v("N"), C = v("C"), S = v("S");
      const Tensor x = zeros_of({N, C, S}, dt);
      if (r.op_pass == "batch_norm.fwd")
        (void)batch_norm(x, zeros({C}), ones({C}), Tensor(), Tensor(), false);
      else
        (void)batch_norm_backward(x, x, Tensor(), zeros({C}), ones({C}), false, 1e-5);
    } else if (r.op_pass.rfind("max_pool2d.", 0) == 0) {
      const IntList k{v("k"), v2("k")}, st{v("s"), v2("s")}, pd{v("p"), v2("p")}, dl{v("d"), v2("d")};
      Tensor x = zeros_of({v("N"), v("C"), v("H"), v("W")}, dt);
      const bool ceil = v("ceil") != 0;
      if (r.op_pass == "max_pool2d.fwd") {
        (void)max_pool2d(x, k, st, pd, dl, ceil);
      } else {
        x.requires_grad_(true);
        max_pool2d(x, k, st, pd, dl, ceil).sum().backward();
      }
    } else if (r.op_pass == "elementwise.fwd") {
      run_elementwise(r);
    } else if (r.op_pass.rfind("conv2d.", 0) == 0) {
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
  // The last line of the recorded op.pass (making the operands, a backward's other ops and
  // views may trace lines of their own).
  std::string last;
  const std::string prefix = "[kernel] " + r.op_pass + " ";
  std::istringstream ls(captured);
  for (std::string l; std::getline(ls, l);)
    if (l.rfind(prefix, 0) == 0) last = l.substr(9);
  if (const size_t sk = last.find(" (skipped: "); sk != std::string::npos) last.erase(sk);
  return last;
}

// What a CPU can run, as far as the recorded steering goes.
struct CpuCan {
  bool amx, avx512bf16, own_gemm, conv_kernels, avx512;
  bool operator==(const CpuCan&) const = default;
};
// This CPU's answers (under the ISA cap in force), from the same functions the kernel lists ask.
CpuCan this_cpu() {
  cpu::Override on(cpu::ConvAlgo::Auto);
  return {cpu::can_run_bf16_amx(cpu::cpu_features_with_amx()), cpu::can_run_bf16_native(cpu::cpu_features()),
          cpu::sgemm_avx512_available(), cpu::conv_kernels_enabled(), cpu::isa_avx512()};
}
// What a CPU of ISA level `l` can run.
CpuCan cpu_at(cpu::IsaLevel l) {
  const bool avx = l >= cpu::IsaLevel::Avx512;
  return {l >= cpu::IsaLevel::Amx, l >= cpu::IsaLevel::Avx512Bf16, avx, avx, avx};
}
constexpr cpu::IsaLevel kLevels[] = {cpu::IsaLevel::Baseline, cpu::IsaLevel::Avx512, cpu::IsaLevel::Avx512Bf16,
                                     cpu::IsaLevel::Amx};
// The levels this CPU can be capped at (those it runs, up to the cap in force), lowest first.
std::vector<cpu::IsaLevel> emulable_levels() {
  std::vector<cpu::IsaLevel> v;
  for (cpu::IsaLevel l : kLevels)
    if (l <= cpu::isa_cap() && cpu::isa_hardware_has(l)) v.push_back(l);
  return v;
}

// Batch norm, max pooling and the elementwise rows: lists that steer on isa_avx512() alone, so their
// lines carry [no avx512] or nothing (no BF16 path, no conv or GEMM tag: they run no GEMM).
bool steers_on_isa_alone(const Recorded& r) {
  return r.op_pass.rfind("batch_norm.", 0) == 0 || r.op_pass.rfind("max_pool2d.", 0) == 0 ||
         r.op_pass == "elementwise.fwd";
}

// What a CPU lacks to reach a line's steering ("" when it can replay it).
std::string missing_for(const Recorded& r, const CpuCan& can) {
  // Lines without [no avx512] ran with AVX-512, lines with it only on CPUs without (or capped below
  // it: their trace says so).
  if (steers_on_isa_alone(r)) {
    if (!r.no_avx512 && !can.avx512) return "AVX-512 F/BW/VL";
    if (r.no_avx512 && can.avx512) return "a CPU without AVX-512";
    return "";
  }
  if (r.bf16 == "amx" && !can.amx) return "AMX";
  if (r.bf16 == "avx512bf16" && !can.avx512bf16) return "AVX512-BF16";
  if (r.gemm != "blas" && !can.own_gemm) return "AVX-512 (own float GEMM)";
  // Only a conv line's bracket says whether the conv kernels were on (matmul and linear name no conv).
  if (r.op_pass.rfind("conv2d.", 0) == 0 && r.conv != "im2col" && !can.conv_kernels)
    return "AVX-512 F/BW/VL (conv kernels)";
  return "";
}

std::vector<Recorded> recorded_lines() {
  std::vector<Recorded> v;
  std::ifstream in(testing::torch_fixture_path("kernel_choices.txt"));
  EXPECT_TRUE(in) << testing::torch_fixture_path("kernel_choices.txt");
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') v.push_back(parse(line));
  return v;
}

TEST(KernelChoices, EveryRecordedProblemRunsItsRecordedKernel) {
  const std::vector<Recorded> lines = recorded_lines();
  const std::vector<cpu::IsaLevel> levels = emulable_levels();
  const CpuCan top = this_cpu();
  std::map<cpu::IsaLevel, std::vector<const Recorded*>> at;  // each line at the lowest level reaching it
  std::map<std::string, int> left_out;                       // what the CPU lacks -> lines
  for (const Recorded& r : lines) {
    bool placed = false;
    for (cpu::IsaLevel l : levels) {
      if (!missing_for(r, cpu_at(l)).empty()) continue;
      at[l].push_back(&r);
      placed = true;
      break;
    }
    if (!placed) ++left_out[missing_for(r, top)];
  }
  int replayed = 0;
  std::string per_level;
  for (const auto& [level, rs] : at) {
    cpu::Override cap(level);
    EXPECT_EQ(this_cpu(), cpu_at(level)) << "capped at " << cpu::isa_level_name(level);
    for (const Recorded* r : rs) {
      ++replayed;
      const std::string now = rerun(*r);
      EXPECT_EQ(now, r->line) << "the kernel choice moved: recorded\n  " << r->line << "\nbut this build chose\n  "
                              << now << "\n(capped at " << cpu::isa_level_name(level)
                              << "; a deliberate change re-records with tests/fixtures/record_kernel_choices.sh)";
    }
    per_level += std::string(per_level.empty() ? "" : ", ") + std::to_string(rs.size()) + " at " +
                 cpu::isa_level_name(level);
  }
  std::string summary = "replayed " + std::to_string(replayed) + " of " + std::to_string(lines.size()) +
                        " recorded lines (" + per_level + ")";
  for (const auto& [what, n] : left_out) summary += "; left out " + std::to_string(n) + " needing " + what;
  std::cout << "[ KernelChoices ] " << summary << "\n";
  RecordProperty("kernel_choices", summary);
  EXPECT_GT(lines.size(), 100u) << "the recording is missing or truncated";
  EXPECT_GT(replayed, 0) << "no recorded line can run on this CPU: " << summary;
}

// Every class of CPU CI may run on finds lines of its own in the recording, and each richer class
// reaches more: a CPU without AVX-512 replays the generic lines (BF16 widened, convs on im2col,
// GEMMs on BLAS; norm, pooling and elementwise lines tagged [no avx512], on no AVX-512 entry),
// Skylake-X adds the AVX-512 ones, Zen 4/5 the vdpbf16ps ones, Sapphire Rapids AMX's.
TEST(KernelChoices, EachCpuClassReachesItsOwnPartOfTheRecording) {
  const std::vector<Recorded> lines = recorded_lines();
  // x86-64 without AVX-512, AVX-512 without AVX512-BF16 (Skylake-X), AVX512-BF16 without AMX
  // (Zen 4/5), AMX (Sapphire Rapids, the recording's own CPU, capped for the lower ones).
  size_t previous = 0;
  std::vector<bool> reached(lines.size(), false);
  for (cpu::IsaLevel level : kLevels) {
    const CpuCan can = cpu_at(level);
    size_t n = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
      const Recorded& r = lines[i];
      if (!missing_for(r, can).empty()) continue;
      ++n;
      reached[i] = true;
      if (steers_on_isa_alone(r)) {
        // Without AVX-512 these lists run their generic or SSE2 entries, never an AVX-512 one.
        EXPECT_EQ(r.no_avx512, !can.avx512) << r.line;
        if (!can.avx512) {
          EXPECT_EQ(r.line.substr(r.line.find(" -> ")).find("avx512"), std::string::npos) << r.line;
        }
      } else if (!can.own_gemm) {
        EXPECT_EQ(r.gemm, "blas") << r.line;
        if (r.dtype == "bf16") {
          EXPECT_EQ(r.bf16, "emulated") << r.line;
        }
      }
    }
    std::cout << "[ KernelChoices ] a CPU with amx=" << can.amx << " avx512bf16=" << can.avx512bf16
              << " avx512=" << can.own_gemm << " replays " << n << " lines\n";
    EXPECT_GT(n, previous) << "a CPU with amx=" << can.amx << " avx512bf16=" << can.avx512bf16
                           << " avx512=" << can.own_gemm << " reaches no more recorded lines than the class before";
    previous = n;
  }
  // The recording's own CPU, capped at each level, records every line.
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_TRUE(reached[i]) << "no CPU class reaches " << lines[i].line;
  for (const char* tagged : {" [no avx512] ", " [bf16 emulated, conv im2col, gemm blas] ", " [bf16 amx"}) {
    size_t n = 0;
    for (const Recorded& r : lines) n += r.line.find(tagged) != std::string::npos;
    EXPECT_GT(n, 0u) << "the recording has no line with" << tagged;
  }
}


// The trace line of one call, "[kernel] " cut.
template <typename F>
std::string traced(F&& call) {
  std::string captured;
  {
    ScopedTrace trace(static_cast<uint32_t>(TraceKind::Kernel), &captured);
    call();
  }
  std::string last;
  std::istringstream ls(captured);
  for (std::string l; std::getline(ls, l);) last = l;
  return last.rfind("[kernel] ", 0) == 0 ? last.substr(9) : last;
}

// matmul and linear walk cpu::gemm's list (sgemm_avx512, then the BLAS reference) and the trace
// names the entry that ran and why the ones before it declined.
TEST(KernelChoices, GemmListNamesItsChoiceAndWhatItSkipped) {
  const Tensor a = zeros({8, 8}), b = zeros({8, 8}), w = zeros({40, 8});
  {
    cpu::Override blas(cpu::FloatGemm::Blas);
    EXPECT_EQ(traced([&] { (void)matmul(a, b); }),
              "matmul.fwd f32 B=1 M=8 K=8 N=8 [gemm blas] -> blas_sgemm (skipped: sgemm_avx512: own float GEMM off "
              "(MIXTAPE_GEMM=blas or no AVX-512))");
  }
  cpu::Override own(cpu::FloatGemm::Auto);
  if (cpu::sgemm_avx512_available()) {
    EXPECT_EQ(traced([&] { (void)matmul(a, b); }),
              "matmul.fwd f32 B=1 M=8 K=8 N=8 -> blas_sgemm (skipped: sgemm_avx512: C has fewer than 16 rows or "
              "columns (OpenBLAS's small-matrix kernels suit it))");
    EXPECT_EQ(traced([&] { (void)linear(zeros({32, 8}), w); }), "linear.fwd f32 M=32 K=8 N=40 -> sgemm_avx512");
  } else {
    EXPECT_EQ(traced([&] { (void)linear(zeros({32, 8}), w); }),
              "linear.fwd f32 M=32 K=8 N=40 [gemm blas] -> blas_sgemm (skipped: sgemm_avx512: own float GEMM off "
              "(MIXTAPE_GEMM=blas or no AVX-512))");
  }
  EXPECT_EQ(traced([&] { (void)linear(zeros({4, 8}, TensorOptions(DType::Float64)), w.to(DType::Float64)); }),
            std::string("linear.fwd f64 M=4 K=8 N=40") + (cpu::sgemm_avx512_available() ? "" : " [gemm blas]") +
                " -> blas_dgemm");
  if (cpu::can_run_bf16_native(cpu::cpu_features())) {
    cpu::Override vdp(cpu::Bf16GemmPath::Avx512Bf16);
    EXPECT_EQ(traced([&] { (void)matmul(a.to(DType::BFloat16), b.to(DType::BFloat16)); }),
              "matmul.fwd bf16 B=1 M=8 K=8 N=8 [bf16 avx512bf16] -> bgemm_avx512bf16 (skipped: bgemm_amx: BF16 GEMMs "
              "not on AMX (MIXTAPE_CPU_BF16, or no AMX))");
  }
}


// The message of the Error `call` throws ("" when it throws none).
template <typename F>
std::string error_of(F&& call) {
  try {
    call();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

Tensor conv_f32(int64_t stride) {
  return conv2d(zeros({1, 4, 16, 16}), zeros({8, 4, 3, 3}), Tensor(), {stride, stride}, {1, 1});
}

// MIXTAPE_CPU_KERNEL (here its in-process twin, cpu::Override(KernelSpec)) runs the forced entry where it takes
// the problem, ahead of the entries before it; a list without that name (another dtype's) is left
// to its own choice.
TEST(KernelChoices, ForcedKernelRunsWhereItApplies) {
  const std::string free_conv = traced([] { (void)conv_f32(1); });
  const Tensor a = zeros({32, 32});
  {
    cpu::Override force(cpu::KernelSpec{"conv2d.fwd:im2col_gemm,matmul.fwd:blas_sgemm,linear.fwd:blas_sgemm"});
    const std::string conv = traced([] { (void)conv_f32(1); });
    EXPECT_EQ(conv.substr(conv.find(" -> ")), " -> im2col_gemm") << conv;
    const std::string mm = traced([&] { (void)matmul(a, a); });
    EXPECT_EQ(mm.substr(mm.find(" -> ")), " -> blas_sgemm") << mm;
    const std::string lin = traced([&] { (void)linear(a, a); });
    EXPECT_EQ(lin.substr(lin.find(" -> ")), " -> blas_sgemm") << lin;
  }
  {
    cpu::Override bf16_only(cpu::KernelSpec{"conv2d.fwd:pairs_avx512bf16"});  // not in the f32 list
    EXPECT_EQ(traced([] { (void)conv_f32(1); }), free_conv);
  }
  EXPECT_EQ(traced([] { (void)conv_f32(1); }), free_conv);  // the force ended with its scope
}

// A forced entry that declines the problem is refused, naming the op.pass, the entry and the
// reason its declines() gives; nothing else runs in its place.
TEST(KernelChoices, ForcedKernelThatDeclinesIsRefusedWithItsReason) {
  {
    cpu::Override force(cpu::KernelSpec{"conv2d.fwd:implicit_gemm_avx512"});
    const std::string e = error_of([] { (void)conv_f32(2); });
    EXPECT_NE(e.find("conv2d.fwd: the forced kernel implicit_gemm_avx512 (MIXTAPE_CPU_KERNEL=conv2d.fwd:"
                     "implicit_gemm_avx512) does not apply to this problem: not plane-shift geometry"),
              std::string::npos)
        << e;
  }
  {
    cpu::Override force(cpu::KernelSpec{"matmul.fwd:sgemm_avx512"});
    const std::string e = error_of([] { (void)matmul(zeros({8, 8}), zeros({8, 8})); });
    const std::string why = cpu::sgemm_avx512_available() ? "C has fewer than 16 rows or columns"
                                                          : "own float GEMM off";
    EXPECT_NE(e.find("matmul.fwd: the forced kernel sgemm_avx512"), std::string::npos) << e;
    EXPECT_NE(e.find(why), std::string::npos) << e;
  }
}

TEST(KernelChoices, InvalidForcedKernelIsRefusedNamingTheAcceptedValues) {
  auto refused = [](const std::string& spec) { return error_of([&] { cpu::Override f(cpu::KernelSpec{spec}); }); };
  EXPECT_NE(refused("conv2d.fwd").find("MIXTAPE_CPU_KERNEL: expected <op.pass>:<name>[,...]"), std::string::npos);
  const std::string op = refused("conv3d.fwd:im2col_gemm");
  EXPECT_NE(op.find("unknown op.pass 'conv3d.fwd'"), std::string::npos) << op;
  EXPECT_NE(op.find("batch_norm.bwd, batch_norm.fwd, conv2d.dgrad, conv2d.fwd, conv2d.wgrad, elementwise.fwd, "
                    "linear.fwd, matmul.fwd, max_pool2d.bwd, max_pool2d.fwd"),
            std::string::npos)
      << op;
  const std::string name = refused("conv2d.wgrad:nope");
  EXPECT_NE(name.find("conv2d.wgrad has no kernel 'nope'"), std::string::npos) << name;
  EXPECT_NE(name.find("its kernels: direct_avx512, im2col_gemm, pairs_avx512bf16"), std::string::npos) << name;
  EXPECT_NE(refused("conv2d.fwd:im2col_gemm,conv2d.fwd:direct_avx512").find("conv2d.fwd forced twice"),
            std::string::npos);
  EXPECT_EQ(refused(""), "");  // forces nothing
}


// MIXTAPE_PROFILE's table (here a profiler::Profile) has a row per op, dtype and kernel list entry
// that ran, and names it; ops without kernel lists show "-".
TEST(KernelChoices, ProfileRowsNameTheKernelThatRan) {
  profiler::Profile on;
  {
    cpu::Override force(cpu::KernelSpec{"conv2d.fwd:im2col_gemm,matmul.fwd:blas_sgemm"});
    (void)conv_f32(1);
    (void)conv_f32(1);
    (void)matmul(zeros({32, 32}), zeros({32, 32}));
  }
  const std::string free_line = traced([] { (void)conv_f32(1); });  // the list's own choice, once
  // The kernel's name, without the entries it skipped (a CPU without AVX-512, or capped below it,
  // skips the AVX-512 ones).
  std::string free_kernel = free_line.substr(free_line.find(" -> ") + 4);
  free_kernel.erase(std::min(free_kernel.size(), free_kernel.find(" (skipped: ")));
  (void)relu(zeros({4}));
  const profiler::Report r = profiler::report();
  auto calls = [&](const std::string& op, const std::string& kernel) {
    int64_t n = 0;
    for (const auto& row : r.ops)
      if (row.op == op && row.dtype == "f32" && row.kernel == kernel) n += row.calls;
    return n;
  };
  EXPECT_EQ(calls("conv2d", "im2col_gemm"), free_kernel == "im2col_gemm" ? 3 : 2) << free_line << "\n" << r.table();
  if (free_kernel != "im2col_gemm") {
    EXPECT_EQ(calls("conv2d", free_kernel), 1) << r.table();
  }
  EXPECT_EQ(calls("matmul", "blas_sgemm"), 1) << r.table();
  EXPECT_EQ(calls("relu", ""), 1) << r.table();
  const std::string t = r.table();
  EXPECT_NE(t.find("kernel"), std::string::npos) << t;
  // Rows are ordered by self time, which varies (a sanitizer build puts another conv row first):
  // look for the row, not at a position.
  auto has_row = [&](const std::string& op, const std::string& kernel_cell) {
    std::istringstream lines(t);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind(op + " ", 0) == 0 && line.find(kernel_cell) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(has_row("conv2d", " im2col_gemm ")) << t;
  EXPECT_TRUE(has_row("relu", " - ")) << t;
}


// The BF16 elementwise rows choose their kernel once a call, from row_strides(), before the loop:
// those must be the strides strided_loop hands to every row, for every layout (dense, broadcast
// rows and columns, transposed, sliced, one element, empty).
TEST(KernelChoices, RowStridesAreTheStridesEveryRowGets) {
  const Tensor m = zeros({6, 10});
  const std::vector<std::pair<Tensor, Tensor>> cases = {
      {zeros({4, 5}), zeros({4, 5})},          {zeros({4, 5}), zeros({5})},
      {zeros({4, 5}), zeros({4, 1})},          {m.transpose(0, 1), zeros({10, 6})},
      {m.slice(1, 0, 10, 2), zeros({6, 5})},   {zeros({1}), zeros({7, 1, 3})},
      {zeros({3, 1, 2}), zeros({1, 4, 1})},    {zeros({2, 0, 3}), zeros({3})},
      {zeros({}), zeros({})},                  {m.slice(0, 1, 5).slice(1, 2, 9), zeros({4, 7})}};
  for (const auto& [a, b] : cases) {
    const IntList shape = broadcast_shapes(a.sizes(), b.sizes(), "test");
    const Tensor out = zeros(shape);
    const cpu::StridedOperands<3> ops{
        {static_cast<char*>(out.data_ptr()), static_cast<char*>(a.data_ptr()), static_cast<char*>(b.data_ptr())},
        {cpu::broadcast_byte_strides(out, shape), cpu::broadcast_byte_strides(a, shape),
         cpu::broadcast_byte_strides(b, shape)}};
    const std::array<int64_t, 3> chosen = cpu::row_strides(shape, ops);
    std::atomic<int> rows{0}, differ{0};
    cpu::strided_loop<3>(shape, ops, [&](std::array<char*, 3>, std::array<int64_t, 3> st, int64_t) {
      ++rows;
      if (st != chosen) ++differ;
    });
    EXPECT_EQ(differ.load(), 0) << a.describe() << " and " << b.describe() << ": " << rows.load() << " rows";
  }
  // An empty shape with a broadcast operand reaches the coalesced loop, which divided by its zero
  // extent (SIGFPE) before it returned early.
  EXPECT_EQ(add(zeros({2, 0, 3}), zeros({3})).sizes(), (IntList{2, 0, 3}));
}

// Batch norm, max pooling and the BF16 elementwise rows name their choice, and MIXTAPE_CPU_KERNEL
// steers them: a forced generic entry runs (the same bits: test_batch_norm_avx512, test_bf16_rows), a
// forced entry that declines is refused with its reason.
TEST(KernelChoices, NormPoolAndElementwiseListsAreTracedAndForceable) {
  const bool avx = cpu::isa_avx512();
  const std::string tag = avx ? "" : " [no avx512]";
  const Tensor x = zeros({2, 3, 8, 8});
  EXPECT_EQ(traced([&] { (void)max_pool2d(x, {2, 2}); }),
            "max_pool2d.fwd f32 N=2 C=3 H=8 W=8 k2 s2 p0 d1 ceil=0" + tag + " -> " +
                (avx ? "2x2_avx512" : "2x2_sse2 (skipped: 2x2_avx512: no AVX-512 F/BW/VL (isa_avx512))"));
  EXPECT_EQ(traced([&] { (void)max_pool2d(x, {3, 3}, {1, 1}, {1, 1}); }),
            "max_pool2d.fwd f32 N=2 C=3 H=8 W=8 k3 s1 p1 d1 ceil=0" + tag +
                " -> generic (skipped: 2x2_avx512: not a 2x2 window of stride 2 without padding or dilation inside "
                "the plane; 2x2_sse2: not a 2x2 window of stride 2 without padding or dilation inside the plane)");
  const Tensor h = zeros({4, 3, 5});
  EXPECT_EQ(traced([&] { (void)batch_norm(h, zeros({3}), ones({3}), Tensor(), Tensor(), false); }),
            "batch_norm.fwd f32 N=4 C=3 S=5" + tag + " -> " +
                (avx ? "avx512" : "generic (skipped: avx512: no AVX-512 F/BW/VL (isa_avx512))"));
  EXPECT_EQ(traced([&] { (void)batch_norm(h.to(DType::Float64), zeros({3}), ones({3}), Tensor(), Tensor(), false); }),
            "batch_norm.fwd f64 N=4 C=3 S=5" + tag + " -> generic");
  const Tensor b = zeros_of({4, 16}, DType::BFloat16);
  EXPECT_EQ(traced([&] { (void)add(b, b); }),
            "elementwise.fwd bf16 op=add strides=2x2x2" + tag + " -> " +
                (avx ? "rows_avx512" : "generic (skipped: rows_avx512: no AVX-512 F/BW/VL (isa_avx512))"));
  EXPECT_EQ(traced([&] { (void)relu(b.transpose(0, 1)); }),
            "elementwise.fwd bf16 op=relu strides=2x32" + tag +
                " -> generic (skipped: bits_avx512: rows not contiguous (an inner stride is not 2 bytes); bits: rows "
                "not contiguous (an inner stride is not 2 bytes))");
  EXPECT_EQ(traced([&] { (void)mul(b, Scalar(2.0)); }),
            "elementwise.fwd bf16 op=mul strides=scalar" + tag +
                " -> generic (skipped: rows_avx512: an operand is a wrapped scalar (the block loop reads it in f32))");
  {
    cpu::Override force(cpu::KernelSpec{"max_pool2d.fwd:generic,batch_norm.fwd:generic,elementwise.fwd:generic"});
    const std::string pool = traced([&] { (void)max_pool2d(x, {2, 2}); });
    EXPECT_EQ(pool.substr(pool.find(" -> ")), " -> generic") << pool;
    const std::string bn = traced([&] { (void)batch_norm(h, zeros({3}), ones({3}), Tensor(), Tensor(), false); });
    EXPECT_EQ(bn.substr(bn.find(" -> ")), " -> generic") << bn;
    const std::string rows = traced([&] { (void)relu(b); });
    EXPECT_EQ(rows.substr(rows.find(" -> ")), " -> generic") << rows;
  }
  {
    cpu::Override force(cpu::KernelSpec{"max_pool2d.fwd:2x2_sse2"});
    const std::string e = error_of([&] { (void)max_pool2d(x, {3, 3}); });
    EXPECT_NE(e.find("max_pool2d.fwd: the forced kernel 2x2_sse2 (MIXTAPE_CPU_KERNEL=max_pool2d.fwd:2x2_sse2) does "
                     "not apply to this problem: not a 2x2 window"),
              std::string::npos)
        << e;
  }
  // A BF16 relu recorded for backward (it keeps a bit mask) traces one line whichever entry runs.
  for (const char* spec : {"", "elementwise.fwd:bits", "elementwise.fwd:generic"}) {
    std::optional<cpu::Override> force;
    if (*spec != '\0') force.emplace(cpu::KernelSpec{spec});
    const Tensor leaf = zeros_of({4, 16}, DType::BFloat16).requires_grad_();
    std::string captured;
    {
      ScopedTrace trace(static_cast<uint32_t>(TraceKind::Kernel), &captured);
      (void)relu(leaf);
    }
    size_t lines = 0;
    for (size_t at = captured.find("op=relu"); at != std::string::npos; at = captured.find("op=relu", at + 1)) ++lines;
    EXPECT_EQ(lines, 1u) << spec << ":\n" << captured;
  }
  {
    cpu::Override force(cpu::KernelSpec{"elementwise.fwd:bits"});
    const std::string e = error_of([&] { (void)relu(b.transpose(0, 1)); });
    EXPECT_NE(e.find("elementwise.fwd: the forced kernel bits"), std::string::npos) << e;
    EXPECT_NE(e.find("rows not contiguous"), std::string::npos) << e;
  }
}

// MIXTAPE_CPU_ISA's in-process twin makes the ISA answers those of the capped CPU, for exactly its
// scope, and never lifts a cap: a level above the one in force (or above this CPU's) is refused,
// naming the variable and why.
TEST(KernelChoices, IsaCapAnswersAsTheCappedCpuAndOnlyLowers) {
  const CpuCan free = this_cpu();
  for (cpu::IsaLevel level : emulable_levels()) {
    {
      cpu::Override cap(level);
      EXPECT_EQ(cpu::isa_cap(), level);
      EXPECT_EQ(this_cpu(), cpu_at(level)) << cpu::isa_level_name(level);
      EXPECT_EQ(cpu::isa_avx512bf16(), level >= cpu::IsaLevel::Avx512Bf16);
      EXPECT_EQ(cpu::isa_amx(), level >= cpu::IsaLevel::Amx);
      EXPECT_EQ(cpu::bf16_native_gemm(), level >= cpu::IsaLevel::Avx512Bf16);
      const Tensor b = zeros_of({32, 32}, DType::BFloat16);
      const std::string bf16 = traced([&] { (void)matmul(b, b); });
      const char* path = level == cpu::IsaLevel::Amx          ? "[bf16 amx"
                         : level == cpu::IsaLevel::Avx512Bf16 ? "[bf16 avx512bf16"
                                                              : "[bf16 emulated";
      EXPECT_NE(bf16.find(path), std::string::npos) << bf16;
      for (cpu::IsaLevel above : kLevels) {
        if (above <= level) continue;
        const std::string e = error_of([&] { cpu::Override lift(above); });
        EXPECT_NE(e.find(std::string("MIXTAPE_CPU_ISA=") + cpu::isa_level_name(above) + ": "), std::string::npos) << e;
        EXPECT_NE(e.find(std::string("capped at ") + cpu::isa_level_name(level)), std::string::npos) << e;
      }
    }
    EXPECT_EQ(this_cpu(), free) << "the cap ended with its scope";
  }
  for (cpu::IsaLevel level : kLevels) {
    if (cpu::isa_hardware_has(level)) continue;
    const std::string e = error_of([&] { cpu::Override cap(level); });
    EXPECT_NE(e.find("this CPU cannot run that level, it lacks "), std::string::npos) << e;
  }
}


// In a death test's child (a fresh process: the variable is read once per process): sets
// MIXTAPE_CPU_ISA and exits 10 + the IsaLevel isa_cap() answers, or 3 with the error on stderr.
[[noreturn]] void cap_from_env(const char* value) {
  setenv("MIXTAPE_CPU_ISA", value, 1);
  try {
    std::exit(10 + static_cast<int>(cpu::isa_cap()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::exit(3);
  }
}

TEST(KernelChoices, MixtapeCpuIsaCapsOrNamesWhatTheCpuLacks) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // re-executes the binary: nothing read yet
  EXPECT_EXIT(cap_from_env(""), ::testing::ExitedWithCode(10 + static_cast<int>(cpu::IsaLevel::Amx)), "");
  EXPECT_EXIT(cap_from_env("bogus"), ::testing::ExitedWithCode(3),
              "MIXTAPE_CPU_ISA: expected 'baseline', 'avx512', 'avx512bf16' or 'amx', got 'bogus'");
  for (cpu::IsaLevel l : kLevels) {
    const std::string name = cpu::isa_level_name(l);
    if (cpu::isa_hardware_has(l))
      EXPECT_EXIT(cap_from_env(name.c_str()), ::testing::ExitedWithCode(10 + static_cast<int>(l)), "") << name;
    else
      EXPECT_EXIT(cap_from_env(name.c_str()), ::testing::ExitedWithCode(3),
                  std::string("MIXTAPE_CPU_ISA=").append(name).append(": this CPU cannot run that level, it lacks "))
          << name;
  }
}

}  // namespace
}  // namespace mixtape
