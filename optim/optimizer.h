// optim/optimizer.h — the base of every optimizer: parameter groups with per-group
// hyperparameters, per-parameter state created on a parameter's first update, FP32 master weights
// for 16-bit parameters (with FP32 gradients), zero_grad, and a state_dict that resumes bit-exactly.
// Invariant: every parameter has a master, the tensor the update is applied to (itself for
// f32/f64; an FP32 copy for f16/bf16), and after every step a 16-bit parameter holds round(master);
// before a master is used again, its entries that a write to the parameter left disagreeing with
// it are re-seeded from the parameter ("the model wins").
// Groups, masters and the fused steps (one multi-tensor dispatch per group and dtype
// combination): docs/AMP.md, "The optimizers"; the 16-bit paths
// (accumulation, clipping, loading) and the GradScaler's part: docs/AMP.md, "Master weights" and
// "GradScaler: the algorithm"; the behaviours and their tests: docs/amp-behaviours.md 25-27, 32, 33.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/attrs.h"
#include "core/dispatcher.h"
#include "core/rng.h"
#include "core/state_dict.h"
#include "core/tensor.h"

namespace mixtape::optim {

// The hyperparameters of one param group, by name, in name order.
class HyperParams {
 public:
  HyperParams() = default;
  HyperParams(std::initializer_list<std::pair<const std::string, double>> items) : items_(items) {}
  explicit HyperParams(std::map<std::string, double> items) : items_(std::move(items)) {}

  bool has(const std::string& name) const { return items_.count(name) > 0; }
  double get(const std::string& name) const;      // error naming the known names if absent
  bool get_bool(const std::string& name) const { return get(name) != 0.0; }
  // Changes an existing hyperparameter; an unknown name is an error (no silent typos).
  HyperParams& set(const std::string& name, double value);
  const std::map<std::string, double>& items() const { return items_; }
  bool empty() const { return items_.empty(); }
  std::string names() const;  // "dampening, lr, momentum, ..." for error messages

 private:
  friend class Optimizer;
  std::map<std::string, double> items_;
};

struct ParamGroup {
  std::vector<Tensor> params;
  HyperParams options;  // given to a constructor/add_param_group: overrides of the defaults

  ParamGroup() = default;
  explicit ParamGroup(std::vector<Tensor> params, HyperParams options = {})
      : params(std::move(params)), options(std::move(options)) {}

  double lr() const { return options.get("lr"); }
  void set_lr(double lr) { options.set("lr", lr); }
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient (a parameter whose grad is undefined is
  // skipped, and its state does not advance). Runs under NoGradGuard.
  virtual void step();
  // Clears every parameter's .grad: set_to_none drops it (PyTorch's default), otherwise it is
  // zeroed in place. Also drops a pending grad scale.
  void zero_grad(bool set_to_none = true);
  // `fn()` runs at the end of every step() (PyTorch's register_step_post_hook), in registration
  // order: distributed::ZeroRedundancyOptimizer all-gathers the parameters its shard updated
  // there. Not when a GradScaler skips the step (step() is not called). Returns an id for removal;
  // a hook may remove itself or another while the hooks run (the others of that step still run).
  int register_step_post_hook(std::function<void()> fn);
  void remove_step_post_hook(int id);
  // `fn()` runs at the start of every step(), before anything changes (PyTorch's
  // register_step_pre_hook); it may throw to refuse the step, which then changes nothing.
  // Returns an id for removal (ids are shared with the post hooks).
  int register_step_pre_hook(std::function<void()> fn);
  void remove_step_pre_hook(int id);
  // Adds a group; options not given take the optimizer's defaults. Errors: a parameter that is not
  // a floating leaf requiring grad, or that is already in a group; an unknown or invalid option.
  void add_param_group(ParamGroup group);

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  const HyperParams& defaults() const { return defaults_; }
  const std::string& name() const { return name_; }
  std::vector<Tensor> parameters() const;  // every parameter, group by group

  // ---- master weights (docs/AMP.md, "Master weights") ----
  bool has_master(const Tensor& param) const;   // true for 16-bit parameters
  Tensor master(const Tensor& param) const;     // the FP32 master, or param itself for f32/f64
  std::vector<Tensor> master_params() const;    // master(p) for every parameter, in order
  // The inverse loss scale (docs/AMP.md#the-inverse-scale) the next step() multiplies 16-bit
  // gradients by at the copy into FP32 (1 = none); GradScaler::step sets it. Consumed by step(),
  // dropped by zero_grad().
  void set_inv_scale_for_next_step(float inv_scale);
  float inv_scale_for_next_step() const { return pending_inv_scale_; }
  // Whether set_inv_scale_for_next_step ran since the last step() or zero_grad(), i.e. the next
  // step() is a GradScaler's (its value may be 1: the scaler's unscale_ already unscaled).
  bool inv_scale_pending() const { return inv_scale_pending_; }
  // ---- capturable (docs/CUDA.md, "A step with no host sync") ----
  // On: every parameter's update count and every group's lr also live on the parameters' device
  // (0-d i64 per parameter, 0-d f64 per group and device), and step() hands them to the fused
  // kernels, which read them there, so step() reads nothing on the host and decides nothing that
  // depends on the device: one launch sequence, the same every step (what a CUDA graph replays).
  // The counts start from the host's; the lr is written to the device whenever a group's lr
  // changed on the host since the last write (step() and write_device_lr() check; an LR schedule
  // calls write_device_lr() when it sets a new lr). Same bits as the plain step. Off again: the
  // host counts are read back (one host read).
  void set_capturable(bool on);
  bool capturable() const { return capturable_; }
  // The next step() is skipped on the device when `found_inf` (1-element f32, non-zero: skip) is
  // set, and 16-bit gradients are unscaled by `inv_scale` (1-element f32) at the copy into FP32;
  // both are read on the device. What a sync-free GradScaler::step hands a capturable optimizer
  // (PyTorch's fused optimizers' grad_scale/found_inf). Capturable only; consumed by step(),
  // dropped by zero_grad(). Either may be undefined (never skip; no unscale).
  void set_device_skip_for_next_step(const Tensor& found_inf, const Tensor& inv_scale);
  // Mirrors every group's host lr into its device lr where they differ (no host read).
  void write_device_lr();
  // Group g's device lr on `device` (capturable only; created on first use from the host lr).
  Tensor device_lr(size_t group, Device device);
  // Stochastic rounding of the master -> 16-bit write-back, from a Philox stream seeded here.
  void set_stochastic_rounding(bool on, uint64_t seed = 0x5eed);
  bool stochastic_rounding() const { return stochastic_rounding_; }

  // ---- state ----
  // The live state buffer `name` of a parameter ("momentum_buffer", "exp_avg", ...); undefined
  // before the parameter's first update.
  Tensor state(const Tensor& param, const std::string& name) const;
  // Bytes of per-parameter state held: the FP32 masters of 16-bit parameters and every state
  // buffer (momentum, moments): what ZeRO-1 divides among the ranks.
  int64_t state_bytes() const;
  // Updates applied to this parameter (capturable: read from the device, a host sync).
  int64_t step_count(const Tensor& param) const;
  // A snapshot (copies) of everything a resumed run needs, keys (i = parameter index over all
  // groups in order, g = group index):
  //   param_groups.<g>.params        i64[n]  the parameter indices of group g
  //   param_groups.<g>.<option>      f64     every hyperparameter (bools as 0/1)
  //   state.<i>.master               f32     the master of a 16-bit parameter
  //   state.<i>.written_stochastically i64   with it: 1 if the parameter's last write-back from
  //                                          the master rounded stochastically, 0 if to nearest
  //   state.<i>.step                 i64     updates applied (present once parameter i was updated)
  //   state.<i>.<buffer>             the buffers, dtype of the master (present with step)
  //   rounding.stochastic / .seed / .offset   i64, the write-back rounding and its stream
  StateDict state_dict() const;
  // Validates every key, shape and dtype against this optimizer first (nothing changes on error),
  // then copies the values in (the dict is not aliased). Parameters come from the model's own
  // state_dict; the one exception is a dict from a 16-bit model loaded for an f32/f64 parameter,
  // whose master the parameter takes where it holds that master's 16-bit rounding. A dict from an
  // f32/f64 parameter seeds a 16-bit parameter's master from the parameter (docs/AMP.md).
  void load_state_dict(const StateDict& sd);

 protected:
  Optimizer(std::string name, HyperParams defaults);

  // What update() gets for one parameter.
  struct ParamUpdate {
    Tensor w;                   // updated in place: the master, or the f32/f64 param itself
    Tensor grad;                // same shape: the param's grad (f32/f64, or 16-bit when opted in)
    Tensor model;               // 16-bit param receiving round(w); undefined when w is the param
    double inv_scale = 1.0;     // multiplier for a 16-bit grad: the pending inverse loss scale
    int64_t step = 0;           // 1 on this parameter's first update
    bool fresh_state = false;   // the buffers below were created (zeroed) for this update
    std::vector<Tensor> state;  // the buffers named by state_names(group), in that order
    Attrs rounding;             // stochastic, seed, offset
    // Capturable only (step_t defined): the device scalars of optim/step_kernel.h's capturable
    // form. step then means nothing: the kernels read step_t.
    Tensor found_inf, inv_scale_t, lr_t, step_t;
  };
  // The buffers an update under these options needs, created (zeroed) when missing.
  virtual std::vector<std::string> state_names(const HyperParams& group) const = 0;
  // Every buffer name this optimizer may hold (for load_state_dict's checks).
  virtual std::vector<std::string> all_state_names() const = 0;
  // The buffers that must exist once a parameter has been updated under these options (default:
  // all of state_names); load_state_dict requires them.
  virtual std::vector<std::string> required_state_names(const HyperParams& group) const {
    return state_names(group);
  }
  // Throws a clear error for an invalid value (negative lr, betas outside [0, 1), ...).
  virtual void check_options(const HyperParams& group) const = 0;
  // Applies one update, normally one dispatch of the optimizer's fused op via run_fused_step.
  virtual void update(const ParamUpdate& u, const HyperParams& group) = 0;
  // Applies the updates of two or more parameters of one group that share device, w/grad/model
  // dtypes and state names (step() groups them so), normally one dispatch of the optimizer's
  // multi-tensor op via run_fused_step_multi: one kernel launch on CUDA instead of one per
  // parameter. Each parameter's result must be what update() gives it, bit for bit. The
  // default calls update() for each.
  virtual void update_many(const std::vector<const ParamUpdate*>& updates, const HyperParams& group);
  // Dispatches a fused in-place step op (optim/step_kernel.h layout) and bumps the version of
  // every tensor it writes (the dispatcher bumps input 0 only).
  static void run_fused_step(const OpSchema& op, const ParamUpdate& u, Attrs attrs);
  // The same for a multi-tensor step op: the operands of `updates` as lists (step_kernel.h),
  // attrs count, inv_scale, stochastic, seed and offset added to the op's own.
  static void run_fused_step_multi(const OpSchema& op, const std::vector<const ParamUpdate*>& updates, Attrs attrs);

 private:
  struct ParamState {
    Tensor param;                         // the parameter, as added
    Tensor master;                        // f32 master of a 16-bit parameter; undefined otherwise
    std::map<std::string, Tensor> buffers;
    int64_t step = 0;
    // param.version() when the optimizer last made param and master agree (added, stepped or
    // re-seeded); a different version means someone else wrote the parameter. needs_check: the
    // master was loaded and must be compared with the model before use. written_stochastically:
    // how the last write-back rounded (what "param agrees with master" means).
    mutable uint32_t synced_version = 0;
    mutable bool needs_check = false;
    bool written_stochastically = false;
    Tensor step_t;  // capturable: the count on the parameter's device (step is then not kept)
    // An f32/f64 parameter only: the master loaded from a 16-bit parameter's state, adopted by the
    // next sync where the parameter holds its 16-bit write-back (written_stochastically: how).
    mutable Tensor loaded_master;
  };
  size_t index_of(const Tensor& param, const char* what) const;  // error if not a parameter here
  std::string describe_param(size_t index) const;                // "param 3 'fc.weight' (f16[4, 2])"
  void check_structure() const;                                  // groups still hold what was added
  // Re-seeds the master entries whose 16-bit parameter was written since the optimizer last
  // wrote it and no longer holds round(master) (docs/AMP.md, "Master weights", "The model wins").
  void sync_master(const ParamState& s) const;
  void adopt_loaded_master(const ParamState& s) const;

  std::string name_;
  HyperParams defaults_;
  std::vector<ParamGroup> groups_;
  std::vector<size_t> group_sizes_;   // params per group when added
  std::vector<ParamState> states_;    // one per parameter, group by group
  std::map<const TensorImpl*, size_t> index_;
  float pending_inv_scale_ = 1.0f;
  bool inv_scale_pending_ = false;
  bool capturable_ = false;
  struct DeviceLr {
    Device device;
    Tensor lr;        // 0-d f64
    double written;   // the host lr it holds
  };
  std::vector<std::vector<DeviceLr>> device_lrs_;  // per group
  Tensor pending_found_inf_, pending_inv_scale_t_;
  bool stochastic_rounding_ = false;
  Generator rounding_gen_;
  std::vector<std::pair<int, std::function<void()>>> pre_hooks_, post_hooks_;
  int next_hook_id_ = 0;
};

}  // namespace mixtape::optim
