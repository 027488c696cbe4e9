// bench/gpu_step.cpp — GPU figures for scripts/gpu-check.sh (Google Benchmark; target bench_gpu_step):
//   gemm_f16/4096, gemm_f32/4096, gemm_f32_tf32/4096   4096^3 matmul, counter TFLOPS (2 n^3 / time)
//   gemm_bf16/4096, gemm_fp8_e4m3/4096                 the same in BF16, and the FP8 GEMM
//                                                     (cuda::fp8_gemm_nt: E4M3 x E4M3 -> BF16, FP32
//                                                     accumulation, per-tensor scales on the device);
//                                                     FP8 / BF16 TFLOPS is the FP8 speed-up. Below
//                                                     compute capability 8.9 the FP8 row is skipped
//                                                     (it would time the BF16 emulation)
//   smallcnn_step/{fp32,amp_fp16,amp_bf16}            one SGD training step, batch 128, 28x28x1
//   resnet20_step/{fp32,amp_fp16,amp_bf16}            one SGD training step, batch 128, 32x32x3
//   resnet20_b1024_step/{fp32,amp_fp16,amp_bf16}      the same at batch 1024: at 128 an H200 step is
//                                                     bound by launches, not by arithmetic
//   {smallcnn,resnet20,resnet20_b1024}_step/fp8       the same step under amp::Fp8Autocast(CUDA) with
//                                                     delayed scaling (HYBRID, history 1024, metas on
//                                                     the GPU): conv2d and linear on cuBLASLt's FP8
//                                                     matmul (conv2d by im2col), the rest BF16
//                                                     autocast; fp8 / amp_bf16 images_per_s is the
//                                                     FP8 step's speed-up (eager rows only)
//   resnet20_b1024_step/mxfp8                         the same under MXFP8BlockScaling (E4M3, blocks
//                                                     of 32): device block casts widened to BF16 on
//                                                     cuBLAS's BF16 GEMM, conv2d by im2col
//   <the step rows>_graph (with --graph)              the same step captured once as a CUDA graph
//                                                     (cuda::GraphedStep: 3 eager warm-up steps, the
//                                                     capture) and replayed: capturable SGD, a
//                                                     sync_free GradScaler
// A step row's time is the median over --windows timed windows (default 5) of the time per step,
// each window --window-steps steps (default 20) ended by one cuda::synchronize(), as
// bench/gpu_torch_step.py times PyTorch; its counters: images_per_s (batch / that time) and
// peak_bytes (the CUDA caching allocator's high-water mark of allocated bytes over the timed
// steps: reset after the warm-up, as bench/gpu_torch_step.py). cuDNN: benchmark mode off on both
// sides, deterministic algorithms here (mixtape's default). AMP modes: autocast on CUDA (FP16 with
// a GradScaler, BF16 without), FP32 parameters, as PyTorch's torch.autocast recipe. --batch N
// replaces every step row's batch (the emulator's smoke run). Without a usable GPU it prints
// "skipped: <reason>", writes an empty result file when --benchmark_out=FILE is given, and exits 0.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "amp/autocast.h"
#include "amp/fp8_autocast.h"
#include "amp/grad_scaler.h"
#include "core/cuda/graphed_step.h"
#include "core/cuda_api.h"
#include "mixtape/mixtape.h"
#include "models/nn.h"
#include "ops/cuda/fp8_gemm.h"
#include "ops/cuda/gemm.h"

using namespace mixtape;

namespace {

void gemm(benchmark::State& state, DType dt, bool tf32) {
  const int64_t n = state.range(0);
  cuda::set_allow_tf32(tf32);
  Generator g(0);
  const Tensor a = randn({n, n}, TensorOptions(DType::Float32), &g).to(Device::CUDA()).to(dt);
  const Tensor b = randn({n, n}, TensorOptions(DType::Float32), &g).to(Device::CUDA()).to(dt);
  matmul(a, b);  // warm-up: cuBLAS handle, heuristics, workspace
  cuda::synchronize();
  for (auto _ : state) {
    Tensor c = matmul(a, b);
    cuda::synchronize();
    benchmark::DoNotOptimize(c);
  }
  cuda::set_allow_tf32(false);
  state.counters["TFLOPS"] = benchmark::Counter(2.0 * double(n) * double(n) * double(n) * 1e-12,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

// The FP8 GEMM as the FP8 recipes run it: operands already cast (the casts are not timed), unit
// dequantising scales as device tensors, a BF16 result.
void gemm_fp8(benchmark::State& state) {
  const int64_t n = state.range(0);
  if (!cuda::fp8_gemm_native(0)) {
    state.SkipWithError("no FP8 tensor cores (compute capability < 8.9): the row would time the BF16 emulation");
    return;
  }
  Generator g(0);
  const Tensor a = to_float8(randn({n, n}, TensorOptions(DType::Float32), &g).to(Device::CUDA()), DType::Float8_e4m3fn);
  const Tensor b = to_float8(randn({n, n}, TensorOptions(DType::Float32), &g).to(Device::CUDA()), DType::Float8_e4m3fn);
  const Tensor one = ones({1}, TensorOptions(DType::Float32)).to(Device::CUDA());
  cuda::fp8_gemm_nt(a, b, one, one, DType::BFloat16);  // warm-up: cuBLASLt handle, heuristics, workspace
  cuda::synchronize();
  for (auto _ : state) {
    Tensor c = cuda::fp8_gemm_nt(a, b, one, one, DType::BFloat16);
    cuda::synchronize();
    benchmark::DoNotOptimize(c);
  }
  state.counters["TFLOPS"] = benchmark::Counter(2.0 * double(n) * double(n) * double(n) * 1e-12,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

enum class Mode { Fp32, AmpFp16, AmpBf16, Fp8, Mxfp8 };

// The step rows' timing (flags of this program, read before Google Benchmark's).
struct Timing {
  int window_steps = 20, windows = 5;
  int64_t batch = 0;  // 0: each row's own
};
Timing g_timing;

void train_step(benchmark::State& state, const std::string& model_name, Mode mode, int64_t batch, bool graphed) {
  if (g_timing.batch > 0) batch = g_timing.batch;
  manual_seed(0);
  std::shared_ptr<nn::Module> model;
  IntList in_shape;
  if (model_name == "smallcnn") {
    model = std::make_shared<models::SmallCNN>(10, 1);
    in_shape = {batch, 1, 28, 28};
  } else {
    model = std::make_shared<models::ResNet>(20, 10, 3);
    in_shape = {batch, 3, 32, 32};
  }
  model->to(Device::CUDA());
  optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  // Graphed: nothing in the step may read on the host (docs/CUDA.md, "A step with no host sync").
  if (graphed) opt.set_capturable(true);
  amp::GradScaler scaler({.enabled = mode == Mode::AmpFp16, .sync_free = graphed});
  const amp::DelayedScaling fp8_recipe;
  std::optional<amp::Fp8Metas> metas;
  if (mode == Mode::Fp8) metas.emplace(fp8_recipe, model->named_parameters());
  Generator g(1);
  const Tensor x = randn(in_shape, {}, &g).to(Device::CUDA());
  const Tensor y = (rand({batch}, {}, &g) * 10.0).to(DType::Int64).to(Device::CUDA());
  auto step = [&] {
    opt.zero_grad();
    Tensor loss;
    {
      std::optional<amp::AutocastGuard> ac;
      if (mode == Mode::AmpFp16) ac.emplace(DeviceType::CUDA, DType::Float16);
      if (mode == Mode::AmpBf16) ac.emplace(DeviceType::CUDA, DType::BFloat16);
      std::optional<amp::Fp8Autocast> fp8;
      if (mode == Mode::Fp8) fp8.emplace(fp8_recipe, &*metas, amp::Fp8AutocastOptions{}, DeviceType::CUDA);
      if (mode == Mode::Mxfp8) fp8.emplace(amp::MXFP8BlockScaling{}, nullptr, amp::Fp8AutocastOptions{}, DeviceType::CUDA);
      loss = cross_entropy(model->forward(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  };
  std::optional<cuda::GraphedStep> graph;
  if (graphed) graph.emplace(step);  // x and y are its static buffers: the same batch every step
  auto one = [&] {
    graph ? (*graph)() : step();
    profiler::step();  // MIXTAPE_PROFILE=1: the table's per-step column (eager rows only)
  };
  // Warm-up: optimizer state, cuDNN algorithm choices, allocator cache; graphed: the eager
  // warm-up steps, the capture and a replay.
  for (int i = 0; i < (graphed ? 4 : 1); ++i) one();
  cuda::synchronize();
  reset_peak_memory(Device::CUDA());  // this mode's steps only, not the earlier benchmarks'
  std::vector<double> per_step;
  for (auto _ : state) {
    for (int w = 0; w < g_timing.windows; ++w) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < g_timing.window_steps; ++i) one();
      cuda::synchronize();
      per_step.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                         g_timing.window_steps);
    }
    std::sort(per_step.begin(), per_step.end());
    const size_t n = per_step.size();
    const double median = n % 2 ? per_step[n / 2] : (per_step[n / 2 - 1] + per_step[n / 2]) / 2;
    state.SetIterationTime(median);
    state.counters["images_per_s"] = double(batch) / median;
  }
  if (graphed) MT_CHECK(graph->captured(), "bench_gpu_step: the graphed step was not captured");
  state.counters["peak_bytes"] = double(cuda::memory_stats(0).peak_bytes);
}

void register_all(bool graphs) {
  benchmark::RegisterBenchmark("gemm_f16", gemm, DType::Float16, false)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("gemm_f32", gemm, DType::Float32, false)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("gemm_f32_tf32", gemm, DType::Float32, true)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("gemm_bf16", gemm, DType::BFloat16, false)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("gemm_fp8_e4m3", gemm_fp8)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
  struct Row {
    const char* name;
    const char* model;
    int64_t batch;
  };
  for (bool graphed : {false, true}) {
    if (graphed && !graphs) continue;
    for (const Row& r : {Row{"smallcnn", "smallcnn", 128}, Row{"resnet20", "resnet20", 128}, Row{"resnet20_b1024", "resnet20", 1024}}) {
      const std::string name = std::string(r.name) + "_step/";
      for (auto [suffix, mode] : {std::pair{"fp32", Mode::Fp32}, std::pair{"amp_fp16", Mode::AmpFp16},
                                  std::pair{"amp_bf16", Mode::AmpBf16}, std::pair{"fp8", Mode::Fp8},
                                  std::pair{"mxfp8", Mode::Mxfp8}}) {
        if (graphed && mode == Mode::Fp8) continue;  // its scale update at region entry is not captured
        // MXFP8 (emulated through BF16 on every GPU) at the one batch the ratio is printed for.
        if (mode == Mode::Mxfp8 && (graphed || r.batch != 1024)) continue;
        // One Google Benchmark iteration holds every timed window; the reported time is their median.
        benchmark::RegisterBenchmark((name + suffix + (graphed ? "_graph" : "")).c_str(), train_step,
                                     std::string(r.model), mode, r.batch, graphed)
            ->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
      }
    }
  }
}

// Takes this program's own flags out of argv (before benchmark::Initialize sees them).
bool take_flags(int& argc, char** argv) {
  bool graphs = false;
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      const std::string f = flag;
      if (a.rfind(f + "=", 0) == 0) return argv[i] + f.size() + 1;
      return nullptr;
    };
    if (a == "--graph") {
      graphs = true;
    } else if (const char* v = value("--window-steps")) {
      g_timing.window_steps = std::atoi(v);
    } else if (const char* v = value("--windows")) {
      g_timing.windows = std::atoi(v);
    } else if (const char* v = value("--batch")) {
      g_timing.batch = std::atoll(v);
    } else {
      argv[out++] = argv[i];
      continue;
    }
  }
  argc = out;
  MT_CHECK(g_timing.window_steps >= 1 && g_timing.windows >= 1 && g_timing.batch >= 0,
           "bench_gpu_step: --window-steps and --windows must be >= 1, --batch >= 0");
  return graphs;
}

}  // namespace

int main(int argc, char** argv) {
  if (!cuda::is_available()) {
    std::printf("skipped: %s\n", cuda::unavailable_reason().c_str());
    for (int i = 1; i < argc; ++i)
      if (std::strncmp(argv[i], "--benchmark_out=", 16) == 0) std::ofstream(argv[i] + 16) << "{\"benchmarks\": []}\n";
    return 0;
  }
  const bool graphs = take_flags(argc, argv);
  register_all(graphs);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
