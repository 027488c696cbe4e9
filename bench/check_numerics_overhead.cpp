// bench/check_numerics_overhead.cpp — what the NaN locator (MIXTAPE_CHECK_NUMERICS,
// core/numerics_check.h) costs on a SmallCNN training step: rounds with the check off and on
// alternate in one run; the figure is the ratio of the median per-step times.
//
//   build/bench/check_numerics_overhead [fp32|fp16] [--batch 64] [--rounds 14] [--steps 4]
//
// One step: forward (in an FP16 autocast region for fp16), cross entropy, backward through a
// GradScaler (disabled for fp32), SGD with momentum. Seeded randn images, fixed labels.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "mixtape/mixtape.h"

using namespace mixtape;

int main(int argc, char** argv) {
  bool fp16 = false;
  int64_t batch = 64;
  int rounds = 14, steps = 4;  // rounds alternate off, on, off, ...
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "fp16" || a == "fp32") {
      fp16 = a == "fp16";
    } else if ((a == "--batch" || a == "--rounds" || a == "--steps") && i + 1 < argc) {
      const long v = std::strtol(argv[++i], nullptr, 10);
      const long least = a == "--rounds" ? 2 : 1;  // one round off and one on, at least
      if (v < least) {
        std::fprintf(stderr, "check_numerics_overhead: %s must be at least %ld, got %s\n", a.c_str(), least, argv[i]);
        return 2;
      }
      if (a == "--rounds") rounds = static_cast<int>(v);
      if (a == "--steps") steps = static_cast<int>(v);
      if (a == "--batch") batch = v;
    } else {
      std::fprintf(stderr, "usage: check_numerics_overhead [fp32|fp16] [--batch N] [--rounds N] [--steps N]\n");
      return 2;
    }
  }
  manual_seed(0);
  models::SmallCNN model(10, 1);
  optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  amp::GradScaler scaler({.enabled = fp16});
  const Tensor x = randn({batch, 1, 28, 28});
  const Tensor y = tensor_from<int64_t>(std::vector<int64_t>(static_cast<size_t>(batch), 3), {batch},
                                        TensorOptions(DType::Int64));
  auto step = [&] {
    Tensor loss;
    {
      amp::AutocastGuard autocast(DeviceType::CPU, DType::Float16, fp16);
      loss = cross_entropy(model(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    opt.zero_grad();
  };
  for (int i = 0; i < 3; ++i) step();  // warm-up: optimizer state, the allocator's cache
  std::vector<double> off, on;
  for (int r = 0; r < rounds; ++r) {
    const bool check = r % 2 == 1;
    numerics::set_enabled(check);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    (check ? on : off).push_back(ms / steps);
  }
  numerics::set_enabled(false);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("%s SmallCNN, batch %lld: step %.2f ms off, %.2f ms on (medians of %zu rounds x %d steps each): "
              "%.2fx; findings %zu\n",
              fp16 ? "FP16 AMP" : "FP32", static_cast<long long>(batch), median(off), median(on), on.size(), steps,
              median(on) / median(off), numerics::findings().size());
  return 0;
}
