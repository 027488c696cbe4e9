// optim/lr_scheduler.h — learning-rate schedules that write each param group's lr, stepped once
// per optimizer step (or epoch): StepLR and CosineAnnealingLR exactly as PyTorch 1.13 computes them
// (its recursive "chainable" forms, so the lrs are bit-identical to torch's), and WarmupCosine
// (linear warmup, then cosine decay; HuggingFace's get_cosine_schedule_with_warmup plus an eta_min).
//
// Skipped AMP steps (GradScaler addition (a), docs/amp-behaviours.md behaviour 30):
// step(optimizer_stepped) with false leaves the schedule where it is, so the steps the GradScaler
// skips while it calibrates the loss scale do not consume the warmup or the decay:
//   sched.step(scaler.step(opt));
// With a sync_free GradScaler, step() returns true for every step, skipped or not (the device
// decides), so the schedule advances on skipped steps too (docs/CUDA.md, "A step with no host
// sync"). With a capturable optimizer, step() also writes the new lrs to the device.
//
// Like PyTorch, construction records each group's current lr as its base lr and performs the
// initial step (last_epoch 0), which may already set the lr (WarmupCosine starts at 0).
// The scheduler holds a reference to the optimizer, which must outlive it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/state_dict.h"
#include "optim/optimizer.h"

namespace mixtape::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances the schedule by one and writes the new lrs into the optimizer's groups; with
  // optimizer_stepped = false (a skipped AMP step) does nothing.
  void step(bool optimizer_stepped = true);
  const std::vector<double>& get_last_lr() const { return last_lr_; }  // one per param group
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  int64_t last_epoch() const { return last_epoch_; }

  // Keys: last_epoch (i64), base_lrs.<g>, last_lr.<g> (f64), and the schedule's own
  // hyperparameters (f64 or i64 0-d tensors). Loading validates every key first and restores all
  // of them (hyperparameters included, as PyTorch); the optimizer's lrs come from its own state.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& sd);

 protected:
  LRScheduler(Optimizer& optimizer, std::string name);
  // Call at the end of the derived constructor (virtual get_lr needs the derived object).
  void initial_step();
  // The lrs for last_epoch_ (already advanced); may read the groups' current lrs.
  virtual std::vector<double> get_lr() const = 0;
  // The schedule's hyperparameters, by name: int64 ones (step counts) and double ones.
  virtual std::vector<std::pair<std::string, int64_t*>> int_params() = 0;
  virtual std::vector<std::pair<std::string, double*>> double_params() = 0;
  virtual void check_params() const = 0;  // throws on invalid hyperparameters

  Optimizer& optimizer_;
  std::string name_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = -1;
};

// lr = base_lr * gamma^(floor(last_epoch / step_size)), computed as PyTorch does: multiplied by
// gamma at every multiple of step_size.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  std::vector<double> get_lr() const override;
  std::vector<std::pair<std::string, int64_t*>> int_params() override { return {{"step_size", &step_size_}}; }
  std::vector<std::pair<std::string, double*>> double_params() override { return {{"gamma", &gamma_}}; }
  void check_params() const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// eta_min + (base_lr - eta_min) * (1 + cos(pi * t / T_max)) / 2, in PyTorch's recursive form
// (after T_max it rises again, period 2 T_max, as PyTorch's does).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);

 protected:
  std::vector<double> get_lr() const override;
  std::vector<std::pair<std::string, int64_t*>> int_params() override { return {{"T_max", &T_max_}}; }
  std::vector<std::pair<std::string, double*>> double_params() override { return {{"eta_min", &eta_min_}}; }
  void check_params() const override;

 private:
  int64_t T_max_;
  double eta_min_;
};

// Per optimizer step t = last_epoch:
//   t < warmup_steps:  lr = base_lr * (t / warmup_steps)            (0 at t = 0)
//   otherwise:         progress = min(1, (t - warmup_steps) / max(1, total_steps - warmup_steps))
//                      lr = eta_min + (base_lr - eta_min) * (0.5 * (1 + cos(pi * progress)))
// With eta_min = 0 this is HuggingFace's get_cosine_schedule_with_warmup (a LambdaLR), bit for bit;
// after total_steps the lr stays at eta_min.
class WarmupCosine : public LRScheduler {
 public:
  WarmupCosine(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps, double eta_min = 0.0);

 protected:
  std::vector<double> get_lr() const override;
  std::vector<std::pair<std::string, int64_t*>> int_params() override {
    return {{"warmup_steps", &warmup_steps_}, {"total_steps", &total_steps_}};
  }
  std::vector<std::pair<std::string, double*>> double_params() override { return {{"eta_min", &eta_min_}}; }
  void check_params() const override;

 private:
  int64_t warmup_steps_;
  int64_t total_steps_;
  double eta_min_;
};

}  // namespace mixtape::optim
