// bench/amp_step.cpp — one training step of a model in each precision mode: median step time
// (and spread) and peak allocated bytes (the allocator's statistics), side by side.
//
//   build/bench/amp_step [--model smallcnn|resnet20] [--batch 256] [--steps 5] [--threads 2] [--only MODE]
//
// Modes: fp32; amp-fp16 (autocast FP16, FP32 parameters, GradScaler); amp-bf16 (autocast
// BF16, no scaling needed); fp16-master (model.to(Float16) keeping BatchNorm in FP32, FP32
// master weights in the optimizer, autocast FP16, GradScaler). "peak" is the allocator's
// high-water mark during the step, everything included (parameters, optimizer state, batch);
// "peak over start" subtracts what was allocated when the step began (activations, gradients
// and temporaries only).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "mixtape/mixtape.h"

using namespace mixtape;

namespace {

struct Mode {
  const char* name;
  std::optional<DType> autocast;
  bool half_model;
  bool scaler;
  bool checkpoint;
};

struct Result {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  double cpu_ms = 0;  // median CPU time of the process (all threads) per step: robust when the machine is shared
  int64_t peak = 0, peak_over_start = 0;
};

double process_cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

std::shared_ptr<nn::Module> make_model(const std::string& name, bool checkpoint) {
  manual_seed(0);
  if (name == "smallcnn") return std::make_shared<models::SmallCNN>(10, 1);
  if (name == "resnet20") {
    auto m = std::make_shared<models::ResNet>(20, 10, 1);
    m->checkpoint_activations = checkpoint;
    return m;
  }
  MT_ERROR("amp_step: unknown --model ", name, " (smallcnn, resnet20)");
}

Result run(const std::string& model_name, const Mode& mode, int64_t batch, int steps) {
  auto model = make_model(model_name, mode.checkpoint);
  if (mode.half_model) model->to(DType::Float16);
  optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  amp::GradScaler scaler({.enabled = mode.scaler});
  Generator g(1);
  Tensor x = randn({batch, 1, 28, 28}, {}, &g);
  Tensor y = (rand({batch}, {}, &g) * 10.0).to(DType::Int64);
  std::vector<double> ms, cpu;
  Result r;
  for (int s = -1; s < steps; ++s) {  // step -1 warms up (creates optimizer state)
    opt.zero_grad();
    const int64_t start = memory_stats().current_bytes;
    reset_peak_memory();
    auto t0 = std::chrono::steady_clock::now();
    const double c0 = process_cpu_ms();
    Tensor loss;
    {
      std::optional<amp::AutocastGuard> ac;
      if (mode.autocast) ac.emplace(DeviceType::CPU, *mode.autocast);
      loss = cross_entropy(model->forward(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    auto t1 = std::chrono::steady_clock::now();
    const double c1 = process_cpu_ms();
    if (s < 0) continue;
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    cpu.push_back(c1 - c0);
    r.peak = std::max(r.peak, memory_stats().peak_bytes);
    r.peak_over_start = std::max(r.peak_over_start, memory_stats().peak_bytes - start);
  }
  std::sort(ms.begin(), ms.end());
  r.median_ms = ms[ms.size() / 2];
  std::sort(cpu.begin(), cpu.end());
  r.cpu_ms = cpu[cpu.size() / 2];
  r.min_ms = ms.front();
  r.max_ms = ms.back();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "smallcnn";
  int64_t batch = 256;
  int steps = 5, threads = 2;
  std::string only;  // run just this mode (profiling)
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--model") model = v;
    else if (a == "--batch") batch = std::stoll(v);
    else if (a == "--steps") steps = std::stoi(v);
    else if (a == "--threads") threads = std::stoi(v);
    else if (a == "--only") only = v;
    else {
      std::fprintf(stderr, "usage: amp_step [--model smallcnn|resnet20] [--batch N] [--steps N] [--threads N] [--only MODE]\n");
      return 2;
    }
  }
  set_num_threads(threads);
  std::vector<Mode> modes = {
      {"fp32", std::nullopt, false, false, false},
      {"amp-fp16", DType::Float16, false, true, false},
      {"amp-bf16", DType::BFloat16, false, false, false},
      {"fp16-master", DType::Float16, true, true, false},
  };
  if (model == "resnet20") {
    modes.push_back({"fp32+checkpoint", std::nullopt, false, false, true});
    modes.push_back({"amp-fp16+checkpoint", DType::Float16, false, true, true});
  }
  std::printf("%s, batch %lld, %d threads, median of %d steps\n", model.c_str(), static_cast<long long>(batch), threads,
              steps);
  std::printf("%-22s %10s %16s %8s %10s %8s %12s %8s %16s %8s\n", "mode", "step ms", "(min..max)", "x fp32", "cpu ms",
              "x fp32", "peak MiB", "x fp32", "over start MiB", "x fp32");
  Result base;
  try {
    for (const Mode& m : modes) {
      if (!only.empty() && only != m.name && std::strcmp(m.name, "fp32") != 0) continue;
      Result r = run(model, m, batch, steps);
      if (std::strcmp(m.name, "fp32") == 0) base = r;
      char range[64];
      std::snprintf(range, sizeof range, "(%.1f..%.1f)", r.min_ms, r.max_ms);
      std::printf("%-22s %10.1f %16s %8.2f %10.1f %8.2f %12.1f %8.2f %16.1f %8.2f\n", m.name, r.median_ms, range,
                  r.median_ms / base.median_ms, r.cpu_ms, r.cpu_ms / base.cpu_ms, r.peak / 1048576.0,
                  static_cast<double>(r.peak) / static_cast<double>(base.peak), r.peak_over_start / 1048576.0,
                  static_cast<double>(r.peak_over_start) / static_cast<double>(base.peak_over_start));
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "amp_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
