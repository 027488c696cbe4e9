// amp/grad_scaler.h — dynamic loss scaling: PyTorch's torch.amp.GradScaler, with its defaults,
// stages, errors and state_dict keys, plus four additions of mixtape's own (docs/AMP.md,
// "mixtape's additions"). docs/AMP.md ("GradScaler: the algorithm") walks through it with numbers.
//
// ---- Why scale at all ----
// FP16 keeps 5 exponent bits: values below 2^-24 ~ 6e-8 flush to 0, values above 65504 become inf.
// Gradients are often tiny (1e-8 stored in FP16 is 0). Multiplying the loss by S multiplies every
// gradient by S (backward is linear in the output gradient), lifting them into FP16's range; the
// optimizer must then see g / S. Too large an S overflows to inf, so S is found at run time:
//
//   scaler.scale(loss).backward();   // loss * S: every gradient is S times the true one
//   scaler.step(opt);                // unscale (g * 1/S) + inf/NaN check in one pass; skip if found
//   scaler.update();                 // found inf: S *= backoff (0.5), else after growth_interval
//                                    //   (2000) clean iterations S *= growth (2)
//
// ---- One iteration, per optimizer: READY -> UNSCALED -> STEPPED, reset to READY by update() ----
//   unscale_(opt)   READY -> UNSCALED. inv = float(1 / double(S)) (the reciprocal in double, as
//                   PyTorch, so it is the correctly rounded float of 1/S). The f32/f64 gradients of
//                   the optimizer go through ONE dispatch of the fused multi-tensor op
//                   _amp_foreach_non_finite_check_and_unscale_ (amp/scaler_kernels.h): found_inf = 1
//                   if any element is inf/NaN, every element multiplied by inv in place.
//                   16-bit parameters (model.to(Float16)) have FP32 gradients by default (the
//                   optimizer sets their grad_dtype, optim/optimizer.h), so this is the same
//                   in-place unscale and clip_grad_norm_(model.parameters()) then clips true
//                   gradients. A 16-bit .grad (grad_dtype set to 16 bits, or an f32 parameter
//                   carrying one): BF16 is unscaled in place, as PyTorch does; FP16 is refused with
//                   PyTorch's "Attempting to unscale FP16 gradients." -- unscaling in place would
//                   round the true gradient into FP16, exactly where it underflows.
//                   Optional: call it only to see true gradients before the step (clipping).
//   step(opt)       READY -> STEPPED (running the unscale itself) or UNSCALED -> STEPPED (no second
//                   unscale). If any found_inf is set the optimizer's step() is NOT called:
//                   parameters, masters and optimizer state stay bit-identical. Returns whether it
//                   stepped (addition (a)): sched.step(scaler.step(opt)) keeps an LR schedule from
//                   advancing on skipped steps (pytorch#44511).
//                   On the READY path, 16-bit grads of parameters with masters (grad_dtype set to
//                   16 bits) are only *checked* (in the same fused dispatch as the f32 grads,
//                   without being written); the optimizer multiplies them by inv as it widens them
//                   into FP32 inside its fused update (set_grad_scale_for_next_step).
//   update()        Sums found_inf over every optimizer of the iteration and runs _amp_update_scale_
//                   once (amp/amp_functors.h fn::update_scale), then resets every stage to READY.
//                   update(new_scale) sets S instead (tracker untouched).
// With several losses/optimizers: scale() each loss, step() each optimizer, ONE update(). With
// gradient accumulation: scale(loss / N).backward() N times, then unscale_/step/update once (the
// scale must not change while scaled gradients accumulate). Both in docs/AMP.md.
//
// ---- Additions beyond PyTorch (docs/AMP.md, "mixtape's additions") ----
//   (a) step() returns whether it stepped (PyTorch needs return_found_inf=True).
//   (b) When S < 1 (inv > 1), g * inv can overflow although g was finite (pytorch#99640): the fused
//       kernel also checks the product, so such a step is skipped instead of writing inf.
//   (c) GradScalerOptions::min_scale: when a backoff takes S below it, update() throws an error that
//       explains why: at that scale gradient overflow is not the cause -- the inf/NaN comes from
//       the forward pass or the loss, and halving S forever cannot fix it (NVIDIA/apex#715).
//   (d) scale_history(): one ScaleRecord (iteration, scale used, skipped) per update(), for plots.
//
// ---- Where the state lives ----
// The scale is a 0-d f32 tensor and the growth tracker a 0-d i32 tensor, both created lazily by
// the first scale() on that tensor's device, and inv and found_inf are computed there too: the
// arithmetic never leaves the device (PyTorch's design). step() reads found_inf on the host, the one
// synchronisation PyTorch has per optimizer, and the only one here: the host keeps copies of the
// scale and the tracker, advanced by the same fn::update_scale with the found_inf step() read, for
// get_scale(), the inv the optimizer applies at its copy, and update()'s history, trace and
// min_scale check. (update() after unscale_ without step(), and update(new_scale) before any
// step(), read found_inf themselves.)
//
// ---- enabled = false: a clean off switch ----
// scale() returns its input, unscale_/update are no-ops, step() is opt.step() (returns true),
// get_scale() is 1, state_dict() is empty: a run with a disabled scaler is bit-identical to one
// without a scaler.
//
// ---- BFloat16 needs no scaling ----
// bf16 has FP32's 8 exponent bits (same range, 2^-133 .. 3.4e38): gradients that FP32 represents
// do not underflow or overflow in bf16. The scaler accepts bf16 runs (masters, checks, skips all
// work) but only adds a multiply; use enabled = false for bf16 (what HF accelerate/transformers do).
#pragma once
#include <cstdint>
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
  std::optional<double> min_scale;  // off (PyTorch has no floor); see addition (c)
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
  // growth_interval < 1, init_scale not a positive finite float, min_scale not positive/finite.
  explicit GradScaler(GradScalerOptions options = {});
  GradScaler(const GradScaler&) = delete;  // two scalers must not share one scale tensor
  GradScaler& operator=(const GradScaler&) = delete;
  GradScaler(GradScaler&&) = default;
  GradScaler& operator=(GradScaler&&) = default;

  // outputs * S through the mul op (recorded by autograd, so backward carries S into every
  // gradient). The first call creates the scale on outputs' device. Disabled: returns outputs.
  Tensor scale(const Tensor& outputs);
  std::vector<Tensor> scale(const std::vector<Tensor>& outputs);  // each one scaled

  void unscale_(optim::Optimizer& optimizer);
  // True if optimizer.step() ran; false if it was skipped because of inf/NaN gradients.
  bool step(optim::Optimizer& optimizer);
  void update();
  void update(double new_scale);             // S = float(new_scale), tracker unchanged
  void update(const Tensor& new_scale);      // a 1-element f32 tensor without requires_grad

  // The current scale (init_scale before the first scale(); 1.0 when disabled).
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

  // This iteration's stage of `optimizer` (READY if the scaler has not seen it since update()).
  OptState stage(const optim::Optimizer& optimizer) const;
  // The scale and tracker tensors (undefined until the first scale()): for teaching and tests.
  const Tensor& scale_tensor() const { return scale_; }
  const Tensor& growth_tracker_tensor() const { return growth_tracker_; }

  // Grows by one record per update() (24 bytes), for the whole run.
  const std::vector<ScaleRecord>& scale_history() const { return history_; }
  int64_t skipped_steps() const { return skipped_steps_; }  // iterations with inf/NaN so far

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
    float inv_scale = 1.0f;                    // what step() applies to grads left scaled
    std::optional<float> found_on_host;        // their sum, once step() has read it
  };
  void check_scale_initialized(const char* funcname) const;
  void lazy_init(Device device);
  PerOptimizer& state_of(const optim::Optimizer& optimizer);
  void unscale_grads(optim::Optimizer& optimizer, PerOptimizer& st, bool explicit_unscale);
  void finish_update(float scale_before, bool skipped);

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
};

}  // namespace mixtape::amp
