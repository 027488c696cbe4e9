// tests/amp/sync_free_run.h — one short AMP training run, with the GradScaler in its default mode
// or sync_free (a capturable optimizer), on any device: what tests/amp/test_grad_scaler_sync_free.cpp
// (CPU) and tests/cuda_ops/test_amp_sync_free.cpp (CUDA) compare bit for bit. A 16-bit MLP with
// FP32 masters, a growth interval of 2 (the scale grows), one step whose loss is inf on purpose
// (skipped, backoff), optionally a clip of the unscaled gradients, an optional LR change.
#pragma once
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "mixtape/mixtape.h"

namespace mixtape::testing::sync_free {

struct Trajectory {
  std::vector<double> scales;     // after every update() (sync_free: read by poll())
  std::vector<int64_t> trackers;
  std::vector<int64_t> skipped;   // skipped steps so far, after every update()
  std::vector<Tensor> params, masters, state;  // on the CPU at the end
  std::vector<int64_t> counts;    // every parameter's update count at the end
};

enum class Opt { SgdMomentum, AdamW };

inline Trajectory run(Device dev, bool sync_free, Opt which, bool clip, DType dt = DType::Float16, int steps = 6) {
  Generator gen(2024);
  auto param = [&](IntList shape) {
    return to_device((randn(shape, TensorOptions(DType::Float32), &gen) * 0.3).to(dt), dev).requires_grad_(true);
  };
  std::vector<Tensor> ps = {param({16, 8}), param({16}), param({4, 16}), param({4})};
  std::vector<std::unique_ptr<optim::Optimizer>> holder;
  if (which == Opt::SgdMomentum)
    holder.push_back(std::make_unique<optim::SGD>(ps, optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .dampening = 0.1}));
  else
    holder.push_back(std::make_unique<optim::AdamW>(ps, optim::AdamWOptions{.lr = 1e-2}));
  optim::Optimizer& opt = *holder[0];
  if (sync_free) opt.set_capturable(true);
  amp::GradScaler scaler(amp::GradScalerOptions{.init_scale = 256.0, .growth_interval = 2, .sync_free = sync_free});
  const Tensor x = to_device(randn({8, 8}, TensorOptions(DType::Float32), &gen), dev);
  const Tensor y =
      to_device(tensor_from(std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3}, {8}, TensorOptions(DType::Int64)), dev);
  Trajectory t;
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    Tensor h = relu(linear(x.to(dt), ps[0], ps[1]));
    Tensor loss = cross_entropy(linear(h, ps[2], ps[3]).to(DType::Float32), y);
    if (step == 3) loss = loss * std::numeric_limits<double>::infinity();  // overflow on purpose
    scaler.scale(loss).backward();
    if (clip) {
      scaler.unscale_(opt);
      if (sync_free)
        optim::clip_grad_norm_on_device_(ps, 0.5);
      else
        optim::clip_grad_norm_(ps, 0.5);
    }
    if (step == 4) opt.param_groups()[0].set_lr(opt.param_groups()[0].lr() * 0.5);
    scaler.step(opt);
    scaler.update();
    if (sync_free) scaler.poll();
    t.scales.push_back(scaler.get_scale());
    t.trackers.push_back(scaler.get_growth_tracker());
    t.skipped.push_back(scaler.skipped_steps());
  }
  for (const Tensor& p : ps) {
    t.params.push_back(to_device(p.detach(), Device::CPU()));
    t.masters.push_back(to_device(opt.master(p), Device::CPU()));
    t.counts.push_back(opt.step_count(p));
    for (const char* n : {"momentum_buffer", "exp_avg", "exp_avg_sq"}) {
      const Tensor s = opt.state(p, n);
      if (s.defined()) t.state.push_back(to_device(s, Device::CPU()));
    }
  }
  return t;
}

}  // namespace mixtape::testing::sync_free
