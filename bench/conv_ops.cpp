// bench/conv_ops.cpp — the three CPU convolution ops (conv2d, conv2d_input_grad,
// conv2d_weight_grad) on the shapes of SmallCNN's and ResNet-8's training step, batch 128, FP32
// and BF16: per-op times, and with --ab the implicit-GEMM path against im2col + GEMM in the same
// process, interleaved (docs/CPU.md, "Convolution"; bench/notes.md has the measurements).
// bench/torch_conv_ops.py times PyTorch's same ops on the same shapes.
//
//   build/bench/conv_ops [--threads 2] [--rounds 7] [--min-ms 150] [--filter SUBSTR] [--ab]
//
// Each round times every (shape, dtype, op) case for at least --min-ms (calibrated loop, after one
// untimed call) and prints one line per case with the median over rounds of the per-call time. With
// --ab each case is timed twice per round, back to back, once on each path (A = im2col + GEMM,
// B = the default choice), in alternating order, and the line adds the median of the per-round
// ratios A/B (above 1: B is faster) with their min..max. A shared 2-core VM drifts by up to 1.5x
// within minutes: only ratios measured in one run mean much.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "mixtape/mixtape.h"
#include "ops/cpu/conv_implicit_gemm.h"
#include "ops/cpu/steering.h"
#include "ops/threads.h"

using namespace mixtape;

namespace {

struct Shape {
  const char* name;
  int64_t N, C, H, W, O, k, stride, pad;
  bool bias, input_grad;
};

const Shape kShapes[] = {
    {"scnn.conv1 1->32 28x28", 128, 1, 28, 28, 32, 3, 1, 1, true, false},
    {"scnn.conv2 32->64 14x14", 128, 32, 14, 14, 64, 3, 1, 1, true, true},
    {"r8.conv1 1->16 28x28", 128, 1, 28, 28, 16, 3, 1, 1, false, false},
    {"r8.l1 16->16 28x28", 128, 16, 28, 28, 16, 3, 1, 1, false, true},
    {"r8.l2a 16->32 28x28 s2", 128, 16, 28, 28, 32, 3, 2, 1, false, true},
    {"r8.l2b 32->32 14x14", 128, 32, 14, 14, 32, 3, 1, 1, false, true},
    {"r8.l3a 32->64 14x14 s2", 128, 32, 14, 14, 64, 3, 2, 1, false, true},
    {"r8.l3b 64->64 7x7", 128, 64, 7, 7, 64, 3, 1, 1, false, true},
    {"r8.ds2 16->32 1x1 28x28 s2", 128, 16, 28, 28, 32, 1, 2, 0, false, true},
    {"r8.ds3 32->64 1x1 14x14 s2", 128, 32, 14, 14, 64, 1, 2, 0, false, true},
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Seconds per call of fn, looped for at least min_s after one untimed call.
double time_per_call(const std::function<void()>& fn, double min_s) {
  fn();
  int64_t iters = 1;
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < iters; ++i) fn();
    const double s = seconds_since(t0);
    if (s >= min_s) return s / double(iters);
    iters = s <= 0 ? iters * 10 : std::max<int64_t>(iters + 1, int64_t(double(iters) * 1.3 * min_s / s));
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Case {
  std::string name;
  std::function<void()> run;
  std::vector<double> a, b;  // seconds per call on each path (b only with --ab)
};

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, rounds = 7;
  double min_ms = 150;
  bool ab = false;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "conv_ops: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--threads") threads = std::atoi(next());
    else if (a == "--rounds") rounds = std::atoi(next());
    else if (a == "--min-ms") min_ms = std::atof(next());
    else if (a == "--filter") filter = next();
    else if (a == "--ab") ab = true;
    else {
      std::fprintf(stderr, "usage: conv_ops [--threads N] [--rounds R] [--min-ms MS] [--filter SUBSTR] [--ab]\n");
      return 2;
    }
  }
  set_num_threads(threads);
  manual_seed(0);
  Generator gen(1);
  std::vector<Case> cases;
  for (const Shape& s : kShapes)
    for (DType dt : {DType::Float32, DType::BFloat16}) {
      const std::string base = std::string(s.name) + (dt == DType::Float32 ? " f32 " : " bf16 ");
      Tensor x = randn({s.N, s.C, s.H, s.W}, {}, &gen).to(dt);
      Tensor w = (randn({s.O, s.C, s.k, s.k}, {}, &gen) * 0.1).to(dt);
      Tensor b = s.bias ? randn({s.O}, {}, &gen).to(dt) : Tensor();
      const IntList st{s.stride, s.stride}, pd{s.pad, s.pad};
      Tensor y = conv2d(x, w, b, st, pd);
      Tensor gy = randn(y.sizes(), {}, &gen).to(dt);
      const IntList xs = x.sizes(), ws = w.sizes();
      cases.push_back({base + "fwd", [=] { (void)conv2d(x, w, b, st, pd); }, {}, {}});
      if (s.input_grad)
        cases.push_back({base + "igrad", [=] { (void)conv2d_input_grad(gy, w, xs, st, pd); }, {}, {}});
      cases.push_back({base + "wgrad", [=] { (void)conv2d_weight_grad(x, gy, ws, st, pd); }, {}, {}});
      if (s.bias) cases.push_back({base + "bgrad", [=] { (void)sum(gy, {0, 2, 3}); }, {}, {}});
    }
  if (!filter.empty())
    cases.erase(std::remove_if(cases.begin(), cases.end(),
                               [&](const Case& c) { return c.name.find(filter) == std::string::npos; }),
                cases.end());
  const double min_s = min_ms / 1000.0;
  for (int r = 0; r < rounds; ++r)
    for (Case& c : cases) {
      if (!ab) {
        c.a.push_back(time_per_call(c.run, min_s));
        continue;
      }
      for (int k = 0; k < 2; ++k) {
        const bool use_b = (k == 0) == (r % 2 == 1);  // alternate which path goes first
        cpu::Override o(use_b ? cpu::ConvAlgo::Auto : cpu::ConvAlgo::Im2col);
        (use_b ? c.b : c.a).push_back(time_per_call(c.run, min_s));
      }
    }
  std::printf("conv_ops: %d threads, %d rounds, >= %.0f ms per timing, batch 128%s\n", threads, rounds, min_ms,
              ab ? "; A = im2col + GEMM, B = default (implicit GEMM where it applies)" : "");
  for (const Case& c : cases) {
    if (!ab) {
      std::printf("%-40s %9.1f us\n", c.name.c_str(), median(c.a) * 1e6);
      continue;
    }
    std::vector<double> ratio;
    for (size_t i = 0; i < c.a.size(); ++i) ratio.push_back(c.a[i] / c.b[i]);
    std::printf("%-40s A %9.1f us  B %9.1f us  A/B %5.2fx (%.2f..%.2f)\n", c.name.c_str(), median(c.a) * 1e6,
                median(c.b) * 1e6, median(ratio), *std::min_element(ratio.begin(), ratio.end()),
                *std::max_element(ratio.begin(), ratio.end()));
  }
  return 0;
}
