// examples/amp_speed.cpp — both halves of mixed precision's promise, measured on this machine:
// one SmallCNN training step (batch 128: forward, loss, backward, SGD) in FP32, under BF16
// autocast and under Fp8Autocast (delayed, current and MXFP8 scaling), its time, its peak memory
// and the bytes its forward saves for backward, and which BF16 kernel did the multiplying.
//
//   build/examples/amp_speed [--threads N] [--rounds 5] [--steps 4]
//   MIXTAPE_CPU_BF16=emulated build/examples/amp_speed     # what a CPU without AVX512_BF16 gets
//
// Why BF16 is faster here: on a CPU with AVX512_BF16 the convolutions and linear layers multiply
// BF16 pairs with vdpbf16ps (32 products per instruction into FP32 accumulators, twice the FP32
// FMA's rate) and move half the bytes; elsewhere BF16 is storage only and the GEMMs widen to FP32
// (docs/CPU.md, "BF16 GEMM"). Why it is smaller: every activation saved for backward is 2 bytes
// instead of 4 (the weights, their gradients and the optimizer's state stay FP32).
// Timing: the two modes alternate, `steps` steps each per round (the machine's speed drifts, so
// both are measured in the same minutes), and each mode's figure is its median round. Peak memory
// is the allocator's high-water mark over one step, everything included (weights, gradients,
// momentum, the batch, activations); "saved MiB" is what the allocator holds after the forward
// and loss beyond what it held before (the tape's saved tensors, the loss). FP8 saves each
// GEMM's input as one byte per value (docs/FP8.md); its other ops follow BF16 autocast. The images are random: a step's cost does not depend on them.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <vector>

#include "mixtape/mixtape.h"
#include "ops/cpu/cpu_features.h"

using namespace mixtape;

namespace {

struct Mode {
  const char* name;
  std::optional<DType> autocast;
  std::optional<amp::Fp8Recipe> fp8;  // Fp8Autocast with this recipe (autocast unset)
  std::vector<double> round_ms;  // mean step time of each round
  int64_t peak_bytes = 0;
  int64_t saved_bytes = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0, rounds = 5, steps = 4;
  CLI::App app{"Times one SmallCNN training step in FP32 and under BF16 autocast, with peak memory"};
  app.add_option("--threads", threads, "CPU threads (0 = all)");
  app.add_option("--rounds", rounds, "rounds; each times --steps steps of each mode")->check(CLI::Range(1, 1000));
  app.add_option("--steps", steps, "steps per mode per round")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  try {
    if (threads > 0) set_num_threads(threads);
    constexpr int64_t kBatch = 128;
    manual_seed(0);
    models::SmallCNN model(10, 1);
    model.train();
    optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
    Generator g(1);
    const Tensor images = randn({kBatch, 1, 28, 28}, {}, &g);
    const Tensor labels = (rand({kBatch}, {}, &g) * 10.0).to(DType::Int64);  // classes 0..9

    // One training step; autocast covers forward and loss, as in torch.autocast. BF16 needs no
    // loss scaling: it has FP32's exponent range.
    // FP8 (E4M3 forward, E5M2 gradients, HYBRID) needs no GradScaler here either: delayed and
    // current scaling choose per-tensor scales, MXFP8 per-block ones (docs/FP8.md).
    amp::Fp8Metas metas(amp::DelayedScaling{}, model.named_parameters());
    auto step = [&](Mode& m) {
      opt.zero_grad();
      Tensor loss;
      const int64_t before = memory_stats().current_bytes;
      {
        std::optional<amp::AutocastGuard> guard;
        std::optional<amp::Fp8Autocast> fp8;
        if (m.autocast) guard.emplace(DeviceType::CPU, *m.autocast);
        if (m.fp8) fp8.emplace(*m.fp8, std::holds_alternative<amp::DelayedScaling>(*m.fp8) ? &metas : nullptr);
        loss = cross_entropy(model.forward(images), labels);
      }
      m.saved_bytes = memory_stats().current_bytes - before;
      loss.backward();
      opt.step();
    };

    std::vector<Mode> modes = {{"FP32", std::nullopt},
                               {"BF16 autocast", DType::BFloat16},
                               {"FP8 delayed", std::nullopt, amp::DelayedScaling{}},
                               {"FP8 current", std::nullopt, amp::CurrentScaling{}},
                               {"MXFP8", std::nullopt, amp::MXFP8BlockScaling{}}};
    for (Mode& m : modes) {
      for (int i = 0; i < 2; ++i) step(m);  // warm-up: momentum buffers, the allocator's cache
      reset_peak_memory();
      step(m);
      m.peak_bytes = memory_stats().peak_bytes;
    }
    for (int r = 0; r < rounds; ++r)
      for (Mode& m : modes) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int s = 0; s < steps; ++s) step(m);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        m.round_ms.push_back(ms / steps);
      }

    std::printf("SmallCNN training step, batch %lld, %d threads\n", static_cast<long long>(kBatch),
                get_num_threads());
    std::printf("BF16 GEMM (conv2d, linear, matmul): %s\n", cpu::bf16_gemm_description().c_str());
    std::printf("%-14s %10s %10s %12s %10s %10s\n", "mode", "step ms", "images/s", "peak MiB", "saved MiB",
                "vs BF16");
    for (const Mode& m : modes) {
      const double ms = median(m.round_ms);
      // The median over rounds of this mode's speed relative to BF16's in the same round.
      std::vector<double> ratio;
      for (size_t r = 0; r < m.round_ms.size(); ++r) ratio.push_back(modes[1].round_ms[r] / m.round_ms[r]);
      std::printf("%-14s %10.1f %10.0f %12.1f %10.2f %9.2fx\n", m.name, ms, 1e3 * kBatch / ms,
                  m.peak_bytes / 1048576.0, m.saved_bytes / 1048576.0, median(ratio));
    }
    const double speed = median(modes[0].round_ms) / median(modes[1].round_ms);
    const double memory = static_cast<double>(modes[1].peak_bytes) / static_cast<double>(modes[0].peak_bytes);
    std::printf("BF16 vs FP32: %.2fx the speed, %.2fx the peak memory (median of %d rounds of %d steps)\n", speed,
                memory, rounds, steps);
    for (size_t i = 2; i < modes.size(); ++i)
      std::printf("%s vs BF16: %.2fx the saved bytes\n", modes[i].name,
                  static_cast<double>(modes[i].saved_bytes) / static_cast<double>(modes[1].saved_bytes));
  } catch (const Error& e) {
    std::fprintf(stderr, "amp_speed: %s\n", e.what());
    return 1;
  }
  return 0;
}
