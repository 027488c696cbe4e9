// amp/grad_scaler.h — amp::GradScaler, dynamic loss scaling: PyTorch's torch.amp.GradScaler
// (defaults, READY -> UNSCALED -> STEPPED stages per optimizer, errors, state_dict keys) plus
// mixtape's four additions.
// Invariant: an optimizer whose gradients hold an inf/NaN is not stepped, so its parameters,
// masters and state stay bit-identical; the scale, the tracker, the inverse scale and found_inf
// live on the loss's device, and step()'s read of found_inf is an ordinary iteration's one host sync.
// The algorithm, with numbers, the additions and the stage errors: docs/AMP.md, "GradScaler: the
// algorithm"; the behaviours and their tests: docs/amp-behaviours.md 15-31.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/state_dict.h"
#include "core/tensor.h"
#include "optim/optimizer.h"

namespace mixtape::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;    // 2^16; stored as float(init_scale)
  double growth_factor = 2.0;     // > 1
  double backoff_factor = 0.5;    // in (0, 1)
  int64_t growth_interval = 2000; // clean update()s before growing, >= 1
  bool enabled = true;
  std::optional<double> min_scale;  // off: only the floor 2^-126 (PyTorch has none); addition (c)
  // A step with no host sync (docs/CUDA.md, "A step with no host sync"): step() hands found_inf
  // and the inverse scale to a capturable optimizer (optim::Optimizer::set_capturable), whose
  // kernels skip on the device; update() runs on the device only. What the host knew at once
  // (get_scale, the tracker, skipped steps) it learns from poll(). Same scale trajectory and
  // parameters as the default mode, bit for bit.
  bool sync_free = false;
};

// What poll() read: the scaler's state after the last update() (sync_free mode).
struct ScalerPoll {
  int64_t updates;              // update() calls so far
  double scale;                 // the scale now
  int64_t growth_tracker;
  int64_t skipped_steps;        // iterations with inf/NaN so far
  int64_t consecutive_skipped;  // skipped update()s since the last clean one
};

// PyTorch's OptState: where one optimizer is in the current iteration.
enum class OptState : uint8_t { READY = 0, UNSCALED = 1, STEPPED = 2 };
const char* opt_state_name(OptState s);

// One update(): `iteration` counts update() calls from 0; `scale` is the scale the iteration's
// gradients were scaled by; `skipped` whether an optimizer found inf/NaN (and skipped its step).
struct ScaleRecord {
  int64_t iteration;
  double scale;
  bool skipped;
};

class GradScaler {
 public:
  // Errors (whether enabled or not): growth_factor <= 1, backoff_factor outside (0, 1),
  // growth_interval < 1, init_scale not a finite float32 >= 2^-126 (the one rule for a scale:
  // docs/AMP.md, "The scale's range"), min_scale not positive/finite.
  explicit GradScaler(GradScalerOptions options = {});
  GradScaler(const GradScaler&) = delete;  // two scalers must not share one scale tensor
  GradScaler& operator=(const GradScaler&) = delete;
  GradScaler(GradScaler&&) = default;
  GradScaler& operator=(GradScaler&&) = default;

  // outputs * S through the mul op (recorded by autograd, so backward carries S into every
  // gradient). The first call creates the scale on outputs' device. Disabled: returns outputs.
  Tensor scale(const Tensor& outputs);
  std::vector<Tensor> scale(const std::vector<Tensor>& outputs);  // each one scaled

  // Unscales the optimizer's gradients in place (by the inverse scale: docs/AMP.md#the-inverse-scale)
  // and records whether any is inf/NaN, in one fused dispatch per device. Which 16-bit gradients
  // are unscaled, refused or left to the optimizer: docs/AMP.md, "One iteration", step 2.
  void unscale_(optim::Optimizer& optimizer);
  // Unscales first unless unscale_ ran; steps the optimizer only if no inf/NaN was found.
  // True if optimizer.step() ran; false if it was skipped because of inf/NaN gradients.
  // sync_free: the optimizer must be capturable; step() always calls optimizer.step() with the
  // device flag, which skips the update on the device, and returns true without knowing whether
  // it did: poll() reports skipped steps. (An LR schedule stepped with that true counts skipped
  // steps too: docs/CUDA.md, "A step with no host sync".)
  // If the found_inf reducer throws, the gradients stay unscaled once: a retried unscale_ or
  // step() runs the reduction again, and only that.
  bool step(optim::Optimizer& optimizer);
  // Once per iteration, after every step(): backoff or growth of S, and every stage back to READY.
  // Errors after the update is applied: a backoff below min_scale, or one that reaches the floor
  // 2^-126 (the scale has collapsed); both explain it (skipped_steps_diagnosis()).
  void update();
  void update(double new_scale);             // S = float(new_scale) (>= 2^-126), tracker unchanged
  void update(const Tensor& new_scale);      // a 1-element f32 tensor without requires_grad

  // sync_free only: reads the scale, the tracker and the skip counts from the device, one host
  // read for all of them, and checks what update() checks in the default mode (a scale below
  // min_scale, a collapse to the floor), throwing the same errors, late. One difference: it
  // sees only the scale after the last backoff, so a backoff that lands exactly on the floor
  // 2^-126 counts as the collapse here, one skipped step before the default mode, which reports
  // the first backoff the floor clamps. Call it every N steps
  // (logging, a give-up rule); get_scale() and the counters below then hold what it read.
  ScalerPoll poll();
  bool sync_free() const { return sync_free_; }

  // The current scale (init_scale before the first scale(); 1.0 when disabled). sync_free: as of
  // the last poll().
  double get_scale() const;
  double get_growth_factor() const { return growth_factor_; }
  void set_growth_factor(double f);
  double get_backoff_factor() const { return backoff_factor_; }
  void set_backoff_factor(double f);
  int64_t get_growth_interval() const { return growth_interval_; }
  void set_growth_interval(int64_t n);
  // Consecutive clean update()s since the last growth or backoff (PyTorch's _growth_tracker).
  int64_t get_growth_tracker() const;
  std::optional<double> get_min_scale() const { return min_scale_; }
  bool is_enabled() const { return enabled_; }

  // Combines the inf/NaN flag across processes before step() reads it (PyTorch's ShardedGradScaler):
  // `reduce(found_inf)` gets this optimizer's 0-d f32 flag (> 0: some gradient here was inf/NaN)
  // and must leave in it, in place, the same value on every process (a max all-reduce:
  // distributed::found_inf_reducer). Then every process skips the same steps and keeps the same
  // scale even when their gradients differ. Unset (the default): the flag is this process's own.
  void set_found_inf_reducer(std::function<void(const Tensor& found_inf)> reduce) { found_inf_reducer_ = std::move(reduce); }

  // The found_inf flag of the last step() or unscale_() (of whichever optimizer it was given):
  // a 0-d f32 tensor on the scale's device, 0 when every gradient was finite, > 0 or NaN when one
  // was not. Gradients on several devices: their flags summed on the scale's device (the flag
  // step() acts on). With a found_inf reducer: the reduced verdict, every process's alike.
  // Undefined when disabled, before the first step()/unscale_(), when the optimizer had no
  // gradient, and while a failed reduction is pending (a retried step()/unscale_() sets it).
  // Kept past update() until the next step()/unscale_(), which makes a new tensor (a graph
  // captures the one its step made). Read-only: the optimizer's skip may read the same tensor
  // (sync_free). Its value on the host costs a sync; copy it on the device to read it late.
  const Tensor& found_inf() const { return found_inf_; }

  // This iteration's stage of `optimizer` (READY if the scaler has not seen it since update()).
  OptState stage(const optim::Optimizer& optimizer) const;
  // The scale and tracker tensors (undefined until the first scale()): for teaching and tests.
  const Tensor& scale_tensor() const { return scale_; }
  const Tensor& growth_tracker_tensor() const { return growth_tracker_; }

  // Grows by one record per update() (24 bytes), for the whole run; sync_free: not kept (empty).
  // skipped_steps and consecutive_skipped_steps: sync_free, as of the last poll().
  const std::vector<ScaleRecord>& scale_history() const { return history_; }
  int64_t skipped_steps() const { return skipped_steps_; }  // iterations with inf/NaN so far
  // Skipped update()s since the last clean one (0 after a clean update(); not saved by state_dict).
  int64_t consecutive_skipped_steps() const { return consecutive_skips_; }
  // What a run of skipped steps means and what to check, with the count and the current scale:
  // the text of the collapse and min_scale errors, for a training loop that gives up after K
  // skipped steps of its own.
  std::string skipped_steps_diagnosis() const;

  // PyTorch's keys, each a 0-d tensor: scale (f32), growth_factor, backoff_factor (f64),
  // growth_interval (i64), _growth_tracker (i32). Empty when disabled. Call it after update().
  // The history and min_scale are not part of it (a resumed run starts a new history).
  StateDict state_dict() const;
  // Disabled: no-op. Errors, before anything changes: an empty dict (saved by a disabled scaler),
  // a missing or unexpected key, a wrong dtype/shape or an invalid value -- each naming the key.
  void load_state_dict(const StateDict& sd);

 private:
  struct PerOptimizer {
    const optim::Optimizer* optimizer = nullptr;
    OptState stage = OptState::READY;
    std::vector<Tensor> found_inf_per_device;  // one 0-d f32 per device that held gradients
    bool reduction_pending = false;            // the flags are still this process's: reducer not yet run
    float inv_scale = 1.0f;                    // what step() applies to grads left scaled
    bool explicit_unscale = false;             // unscaled by unscale_() (else by step())
    Tensor inv_scale_device;                   // the same on the scale's device (sync_free), or undefined
    std::optional<float> found_on_host;        // their sum, once step() has read it
  };
  void check_scale_initialized(const char* funcname) const;
  void lazy_init(Device device);
  PerOptimizer& state_of(const optim::Optimizer& optimizer);
  void unscale_grads(optim::Optimizer& optimizer, PerOptimizer& st, bool explicit_unscale);
  void reduce_found_inf(PerOptimizer& st);
  void finish_update(float scale_before, bool skipped, bool hit_floor);
  void settle_found_inf(const PerOptimizer& st);

  bool enabled_;
  double init_scale_;
  double growth_factor_, backoff_factor_;
  int64_t growth_interval_;
  std::optional<double> min_scale_;
  int64_t init_growth_tracker_ = 0;
  Tensor scale_;           // 0-d f32, lazily created
  Tensor growth_tracker_;  // 0-d i32, lazily created
  // Host copies of the two, kept equal to them by running the same update (fn::update_scale) on
  // the host with the found_inf step() has already read: get_scale(), update() and unscale's
  // inverse then never wait for the device, so step()'s read is the iteration's one host sync.
  float scale_host_ = 0.0f;
  int32_t growth_tracker_host_ = 0;
  std::vector<PerOptimizer> per_optimizer_;  // in first-use order; cleared by update()
  std::vector<ScaleRecord> history_;
  int64_t skipped_steps_ = 0;
  int64_t consecutive_skips_ = 0;
  std::function<void(const Tensor&)> found_inf_reducer_;
  Tensor found_inf_;  // found_inf(): the last step()/unscale_()'s verdict on the scale's device
  bool sync_free_ = false;
  // sync_free: the skip counts on the scale's device (0-d i64), advanced by update().
  Tensor skipped_t_, consecutive_t_;
  int64_t updates_ = 0;
  void count_on_device(const Tensor& found);
};

}  // namespace mixtape::amp
