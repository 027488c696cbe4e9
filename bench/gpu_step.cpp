// bench/gpu_step.cpp — GPU figures for scripts/gpu-check.sh (Google Benchmark; target bench_gpu_step):
//   gemm_f16/4096, gemm_f32/4096, gemm_f32_tf32/4096   4096^3 matmul, counter TFLOPS (2 n^3 / time)
//   smallcnn_step/{fp32,amp_fp16,amp_bf16}            one SGD training step, batch 128, 28x28x1
//   resnet20_step/{fp32,amp_fp16,amp_bf16}            one SGD training step, batch 128, 32x32x3
//   resnet20_b1024_step/{fp32,amp_fp16,amp_bf16}      the same at batch 1024: at 128 an H200 step is
//                                                     bound by launches, not by arithmetic
// Step counters: images_per_s and peak_bytes (the CUDA caching allocator's high-water mark of
// allocated bytes over the timed steps: reset after the warm-up step, as bench/gpu_torch_step.py). Every timed iteration ends with cuda::synchronize(), so times are device
// times as seen by the host. AMP modes: autocast on CUDA (FP16 with a GradScaler, BF16 without),
// FP32 parameters, as PyTorch's torch.autocast recipe.
// Without a usable GPU it prints "skipped: <reason>", writes an empty result file when
// --benchmark_out=FILE is given, and exits 0.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <utility>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "core/cuda_api.h"
#include "mixtape/mixtape.h"
#include "models/nn.h"
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

enum class Mode { Fp32, AmpFp16, AmpBf16 };

void train_step(benchmark::State& state, const std::string& model_name, Mode mode, int64_t batch) {
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
  amp::GradScaler scaler({.enabled = mode == Mode::AmpFp16});
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
      loss = cross_entropy(model->forward(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    profiler::step();  // MIXTAPE_PROFILE=1: the table's per-step column
  };
  step();  // warm-up: optimizer state, cuDNN algorithm choices, allocator cache
  cuda::synchronize();
  reset_peak_memory(Device::CUDA());  // this mode's steps only, not the earlier benchmarks'
  for (auto _ : state) {
    step();
    cuda::synchronize();
  }
  state.counters["images_per_s"] =
      benchmark::Counter(double(batch), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak_bytes"] = double(cuda::memory_stats(0).peak_bytes);
}

void register_all() {
  benchmark::RegisterBenchmark("gemm_f16", gemm, DType::Float16, false)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("gemm_f32", gemm, DType::Float32, false)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("gemm_f32_tf32", gemm, DType::Float32, true)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
  struct Row {
    const char* name;
    const char* model;
    int64_t batch;
  };
  for (const Row& r : {Row{"smallcnn", "smallcnn", 128}, Row{"resnet20", "resnet20", 128}, Row{"resnet20_b1024", "resnet20", 1024}}) {
    const std::string name = std::string(r.name) + "_step/";
    for (auto [suffix, mode] : {std::pair{"fp32", Mode::Fp32}, std::pair{"amp_fp16", Mode::AmpFp16}, std::pair{"amp_bf16", Mode::AmpBf16}}) {
      benchmark::RegisterBenchmark((name + suffix).c_str(), train_step, std::string(r.model), mode, r.batch)
          ->UseRealTime()->Unit(benchmark::kMillisecond);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (!cuda::is_available()) {
    std::printf("skipped: %s\n", cuda::unavailable_reason().c_str());
    for (int i = 1; i < argc; ++i)
      if (std::strncmp(argv[i], "--benchmark_out=", 16) == 0) std::ofstream(argv[i] + 16) << "{\"benchmarks\": []}\n";
    return 0;
  }
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
