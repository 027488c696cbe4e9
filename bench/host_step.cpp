// bench/host_step.cpp — the host's share of a CUDA training step, measured without a GPU (target
// bench_host_step; MIXTAPE_CUDA=EMULATOR builds only). It runs the CUDA emulator in launch-only
// mode (tests/cuda_emulator/emulator.h: kernels, cuBLAS/cuDNN calls and device copies are
// counted, not executed), so a step's wall time is mixtape's own per-op host work — dispatch,
// autograd, shape checks, descriptor set-up, launch glue — plus the emulator's bookkeeping of each
// launch, which a GPU's driver replaces with its own.
//
// The step is bench_gpu_step's resnet20_step/amp_fp16 (ResNet-20, batch 128, CIFAR shapes, SGD
// with momentum 0.9, autocast FP16, a GradScaler), made sync-free (GradScaler sync_free, a
// capturable optimizer: docs/CUDA.md, "A step with no host sync") because device memory holds
// unspecified bytes in this mode and nothing may decide on them. It prints:
//   - host µs per step: the stepping thread's CPU time (CLOCK_THREAD_CPUTIME_ID, so time the
//     machine gives other processes is left out), the median over --windows windows (default 7)
//     of --window-steps steps (default 20) after 3 warm-up steps; the wall time's median beside it;
//   - launch sites per step: mixtape's kernel launches, cuBLAS/cuDNN calls, device copies and
//     memsets, and host µs per launch site (host µs per step / launch sites per step);
//   - the emulator's own bookkeeping per submission (an empty one, timed), to subtract;
//   - per op (MIXTAPE_PROFILE's rows, timed by the host clock in one profiled step): calls,
//     launches and library calls per step, host self µs in the op's kernel, and the profiled
//     step's time outside op kernels (the profiler's own overhead included);
//   - per launch site: each kernel (by its parameter types) and library or runtime call, per step.
// Flags: --batch=N (default 128), --windows=N, --window-steps=N, --sites=N (rows of the last
// table, default 25; 0: all).
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "core/cuda_api.h"
#include "core/profiler.h"
#include "mixtape/mixtape.h"
#include "models/nn.h"
#include "ops/threads.h"
#include "tests/cuda_emulator/emulator.h"

using namespace mixtape;

namespace {

struct Flags {
  int64_t batch = 128;
  int windows = 7, window_steps = 20, sites = 25;
};

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      const std::string p = std::string(flag) + "=";
      return a.rfind(p, 0) == 0 ? argv[i] + p.size() : nullptr;
    };
    if (const char* v = value("--batch")) f.batch = std::atoll(v);
    else if (const char* v = value("--windows")) f.windows = std::atoi(v);
    else if (const char* v = value("--window-steps")) f.window_steps = std::atoi(v);
    else if (const char* v = value("--sites")) f.sites = std::atoi(v);
    else MT_CHECK(false, "bench_host_step: unknown flag '", a, "' (--batch, --windows, --window-steps, --sites)");
  }
  MT_CHECK(f.batch >= 1 && f.windows >= 1 && f.window_steps >= 1 && f.sites >= 0,
           "bench_host_step: --batch, --windows and --window-steps must be >= 1, --sites >= 0");
  return f;
}

double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e6 + double(ts.tv_nsec) * 1e-3;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  // Before the first CUDA call: the emulator reads its mode once.
  setenv("MIXTAPE_CUDA_EMULATOR_LAUNCH_ONLY", "1", 1);
  const Flags flags = parse(argc, argv);
  MT_CHECK(cuda::is_available(), "bench_host_step: no CUDA device: ", cuda::unavailable_reason());
  MT_CHECK(cuda_emulator::launch_only(), "bench_host_step: the emulator is not in launch-only mode");

  manual_seed(0);
  auto model = std::make_shared<models::ResNet>(20, 10, 3);
  model->to(Device::CUDA());
  optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  opt.set_capturable(true);
  amp::GradScaler scaler({.enabled = true, .sync_free = true});
  Generator g(1);
  const Tensor x = randn({flags.batch, 3, 32, 32}, {}, &g).to(Device::CUDA());
  const Tensor y = (rand({flags.batch}, {}, &g) * 10.0).to(DType::Int64).to(Device::CUDA());
  auto step = [&] {
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard ac(DeviceType::CUDA, DType::Float16);
      loss = cross_entropy(model->forward(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  };
  // The step runs no CPU kernel that threads help; OpenMP workers left spinning by the set-up's
  // CPU ops would compete with the measured thread for the machine's cores.
  set_num_threads(1);
  for (int i = 0; i < 3; ++i) step();  // optimizer state, cuDNN plans, the weight-cast cache
  cuda::synchronize();

  // Per window: this thread's CPU time per step (the headline: time the machine gave to other
  // processes is not in it, and on a shared machine that is most of the noise) and the wall time.
  std::vector<double> per_step, wall_per_step;
  for (int w = 0; w < flags.windows; ++w) {
    const double c0 = thread_cpu_us();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < flags.window_steps; ++i) step();
    cuda::synchronize();
    wall_per_step.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
                            flags.window_steps);
    per_step.push_back((thread_cpu_us() - c0) / flags.window_steps);
  }
  const double host_us = median(per_step);

  // One step counted per launch site (no profiler: the counts alone).
  cuda_emulator::reset_launch_sites();
  step();
  cuda::synchronize();
  const std::vector<cuda_emulator::LaunchSite> sites = cuda_emulator::launch_sites();
  uint64_t kernels = 0, others = 0;
  for (const auto& s : sites) (s.kernel ? kernels : others) += s.count;

  // One profiled step, timed by the host clock (the device timer's events would time nothing here).
  profiler::set_device_timer(DeviceType::CUDA, {});
  profiler::Report rep;
  double profiled_us = 0;
  {
    profiler::Profile on;
    const auto t0 = std::chrono::steady_clock::now();
    step();
    profiled_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    profiler::step();
    rep = profiler::report();
  }

  // The emulator's own share: an empty submission, timed (a kernel launch adds its argument copy).
  const int probes = 20000;
  const auto p0 = std::chrono::steady_clock::now();
  for (int i = 0; i < probes; ++i) cuda_emulator::enqueue(nullptr, [] {}, "bench_host_step probe");
  const double probe_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - p0).count() / probes;

  // The emulator's count and the profiler's are taken in different steps by different means:
  // equal, they confirm each other (and that every step launches the same).
  MT_CHECK(kernels > 0 && static_cast<int64_t>(kernels) == rep.total_launches(),
           "bench_host_step: the emulator counted ", kernels, " kernel launches in a step, the profiler ",
           rep.total_launches());
  std::printf("ResNet-20 AMP FP16 training step, batch %lld, CUDA emulator in launch-only mode\n",
              static_cast<long long>(flags.batch));
  std::printf("host us per step: %.1f CPU time of the stepping thread (median of %d windows of %d steps; min %.1f, "
              "max %.1f); wall time %.1f (median)\n",
              host_us, flags.windows, flags.window_steps, *std::min_element(per_step.begin(), per_step.end()),
              *std::max_element(per_step.begin(), per_step.end()), median(wall_per_step));
  const uint64_t total = kernels + others;
  std::printf("launch sites per step: %llu (%llu kernel launches, %llu library and runtime calls; profiler: %lld "
              "launches, %lld cuBLAS/cuDNN calls)\n",
              static_cast<unsigned long long>(total), static_cast<unsigned long long>(kernels),
              static_cast<unsigned long long>(others), static_cast<long long>(rep.total_launches()),
              static_cast<long long>(rep.total_library_calls()));
  std::printf("host us per launch site: %.2f\n", total ? host_us / double(total) : 0.0);
  std::printf("of which the emulator's bookkeeping: about %.2f us per submission (an empty one, timed), %.0f us "
              "per step\n\n",
              probe_us, probe_us * double(total));

  std::printf("per op (one profiled step, host clock):\n%-28s %-5s %6s %9s %9s %12s\n", "op", "dtype", "calls",
              "launches", "lib calls", "host self us");
  for (const profiler::OpRecord& r : rep.ops) {
    if (r.device != DeviceType::CUDA) continue;
    std::printf("%-28s %-5s %6lld %9lld %9lld %12.1f\n", r.op.c_str(), r.dtype.c_str(), static_cast<long long>(r.calls),
                static_cast<long long>(r.launches), static_cast<long long>(r.library_calls), r.self_ms * 1e3);
  }
  std::printf("%-28s %-5s %6s %9lld %9lld\n", "(launches outside ops)", "", "",
              static_cast<long long>(rep.launches_outside_ops), static_cast<long long>(rep.library_calls_outside_ops));
  const double self_us = rep.total_self_ms() * 1e3;
  std::printf("profiled step: %.1f us host, %.1f us in op kernels (self times above), %.1f us outside them "
              "(dispatch, autograd, autocast, module code, the profiler)\n\n",
              profiled_us, self_us, profiled_us - self_us);

  std::printf("per launch site (one step):\n%8s  %s\n", "count", "site");
  int shown = 0;
  for (const auto& s : sites) {
    if (flags.sites > 0 && shown++ == flags.sites) {
      std::printf("%8s  (%zu more sites)\n", "", sites.size() - static_cast<size_t>(flags.sites));
      break;
    }
    std::printf("%8llu  %s\n", static_cast<unsigned long long>(s.count), s.site.c_str());
  }
  return 0;
}
