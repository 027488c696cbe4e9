// optim/optimizer.h — the base of every optimizer: parameter groups with per-group
// hyperparameters, per-parameter state created on a parameter's first update, FP32 master weights
// for 16-bit parameters, zero_grad, and a state_dict that resumes bit-exactly.
//
// ---- Parameter groups (PyTorch's param_groups) ----
// Each group holds its tensors and its own hyperparameters, by name, as PyTorch's param_group
// dict does: group.options.get("momentum"), group.set_lr(0.01). An optimizer's typed options
// (SGDOptions{.lr = 0.1, .momentum = 0.9}) are the defaults; a group given to the constructor or to
// add_param_group overrides any subset of them:
//   SGD opt({ParamGroup(backbone), ParamGroup(head, {{"lr", 0.1}})}, {.lr = 0.01, .momentum = 0.9});
// A name the optimizer does not know is an error (a typo never silently does nothing). Bool options
// (nesterov, amsgrad) are stored as 0/1. Change hyperparameters through param_groups() at any time
// (LR schedulers do); the tensors of a group are fixed once added (step() checks).
//
// ---- Master weights: one code path (docs/AMP.md, "Master weights") ----
// Every parameter has a master: the FP32/FP64 tensor the update is applied to.
//   * f32 / f64 parameter (a normal model, or BatchNorm kept in FP32): it is its own master and is
//     updated in place; its state (momentum, Adam moments) has its dtype.
//   * f16 / bf16 parameter (after model.to(Float16)): the optimizer creates an FP32 master from the
//     parameter's values when the group is added (exact: every 16-bit value is a float) and keeps
//     its state in FP32. The update runs on the master; the parameter is written as RNE(master) in
//     the same pass, so after every step  param == RNE(master)  bit for bit (or stochastically
//     rounded: see set_stochastic_rounding; off by default). Small updates that RNE would lose in
//     16 bits accumulate in the master.
// Gradients of 16-bit parameters are FP32: add_param_group sets grad_dtype = Float32 on them
// (core/tensor.h; unless the user set a grad_dtype first), so backward widens each 16-bit
// gradient and accumulates it in FP32 -- N micro-batches of loss/N add up as one FP32 sum, as
// NVIDIA Apex's O2 master gradients do -- and clip_grad_norm_(model.parameters()) after
// scaler.unscale_(opt) sees the true FP32 gradients, exactly PyTorch's documented pattern.
// A user who sets grad_dtype to the 16-bit dtype (half the gradient memory, 16-bit accumulation)
// gets a 16-bit .grad; step() then widens it to float and multiplies it by the pending inverse loss
// scale (set_grad_scale_for_next_step) inside the fused update.
// The model wins: the model's weights are authoritative, as in PyTorch, where an optimizer holds
// no weights. Before the next step(), state_dict() or master(), every master entry whose 16-bit
// parameter no longer holds round(master) -- after a write since the optimizer's own (copy_, a
// model load_state_dict, re-initialisation; found by the parameter's version counter), or after
// this optimizer's load_state_dict -- is re-seeded from the parameter (exactly: every 16-bit value
// is a float); entries that still agree keep their finer FP32 value. So model and optimizer
// checkpoints load in either order (the saved master rounds to the saved parameter), and other
// weights loaded into the model before or after the optimizer are what training continues
// from. Optimizer state (momentum, moments, step counts) is kept, as when PyTorch loads model
// weights under an existing optimizer. The check is device ops only, run for a parameter only
// after such a write: no host synchronisation. master(p) returns the master (p itself for
// f32/f64); masters, state and the stochastic-rounding stream are part of state_dict(), so a
// resumed run continues bit-identically.
//
// ---- How the GradScaler plugs in (amp/grad_scaler.h) ----
// Gradients are scaled by S; inv = float(1 / double(S)) as PyTorch computes it.
//   f32/f64 .grad (every parameter by default): PyTorch's unscale_: check, then g *= inv in place.
//   16-bit .grad of a parameter with a master (grad_dtype set to 16 bits): on scaler.step() alone
//     the values are only checked for inf/NaN, and step() applies inv at the copy into FP32
//     (opt.set_grad_scale_for_next_step(inv); no FP32 copy of the gradient); an explicit
//     scaler.unscale_ unscales BF16 in place (PyTorch's rule) and refuses FP16, whose true values
//     underflow in 16 bits.
// The pending scale is consumed by step() and cleared by zero_grad(); call it right before step().
#pragma once
#include <cstdint>
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
  // Adds a group; options not given take the optimizer's defaults. Errors: a parameter that is not
  // a floating leaf requiring grad, or that is already in a group; an unknown or invalid option.
  void add_param_group(ParamGroup group);

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  const HyperParams& defaults() const { return defaults_; }
  const std::string& name() const { return name_; }
  std::vector<Tensor> parameters() const;  // every parameter, group by group

  // ---- master weights (see the header comment) ----
  bool has_master(const Tensor& param) const;   // true for 16-bit parameters
  Tensor master(const Tensor& param) const;     // the FP32 master, or param itself for f32/f64
  std::vector<Tensor> master_params() const;    // master(p) for every parameter, in order
  // The inverse loss scale the next step() multiplies 16-bit gradients by (1 = none).
  void set_grad_scale_for_next_step(float inv_scale);
  float grad_scale_for_next_step() const { return pending_grad_scale_; }
  // Stochastic rounding of the master -> 16-bit write-back, from a Philox stream seeded here.
  void set_stochastic_rounding(bool on, uint64_t seed = 0x5eed);
  bool stochastic_rounding() const { return stochastic_rounding_; }

  // ---- state ----
  // The live state buffer `name` of a parameter ("momentum_buffer", "exp_avg", ...); undefined
  // before the parameter's first update.
  Tensor state(const Tensor& param, const std::string& name) const;
  int64_t step_count(const Tensor& param) const;  // updates applied to this parameter
  // A snapshot (copies) of everything a resumed run needs, keys (i = parameter index over all
  // groups in order, g = group index):
  //   param_groups.<g>.params        i64[n]  the parameter indices of group g
  //   param_groups.<g>.<option>      f64     every hyperparameter (bools as 0/1)
  //   state.<i>.master               f32     the master of a 16-bit parameter
  //   state.<i>.step                 i64     updates applied (present once parameter i was updated)
  //   state.<i>.<buffer>             the buffers, dtype of the master (present with step)
  //   rounding.stochastic / .seed / .offset   i64, the write-back rounding and its stream
  StateDict state_dict() const;
  // Validates every key, shape and dtype against this optimizer first (nothing changes on error),
  // then copies the values in (the dict is not aliased). Parameters themselves are not touched:
  // they come from the model's own state_dict.
  void load_state_dict(const StateDict& sd);

 protected:
  Optimizer(std::string name, HyperParams defaults);

  // What update() gets for one parameter.
  struct ParamUpdate {
    Tensor w;                   // updated in place: the master, or the f32/f64 param itself
    Tensor grad;                // same shape: the param's grad (f32/f64, or 16-bit when opted in)
    Tensor model;               // 16-bit param receiving round(w); undefined when w is the param
    double grad_scale = 1.0;    // multiplier for a 16-bit grad (the pending inverse loss scale)
    int64_t step = 0;           // 1 on this parameter's first update
    bool fresh_state = false;   // the buffers below were created (zeroed) for this update
    std::vector<Tensor> state;  // the buffers named by state_names(group), in that order
    Attrs rounding;             // stochastic, seed, offset
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
  // Dispatches a fused in-place step op (optim/step_kernel.h layout) and bumps the version of
  // every tensor it writes (the dispatcher bumps input 0 only).
  static void run_fused_step(const OpSchema& op, const ParamUpdate& u, Attrs attrs);

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
  };
  size_t index_of(const Tensor& param, const char* what) const;  // error if not a parameter here
  std::string describe_param(size_t index) const;                // "param 3 'fc.weight' (f16[4, 2])"
  void check_structure() const;                                  // groups still hold what was added
  // Re-seeds the master entries whose 16-bit parameter was written since the optimizer last
  // wrote it and no longer holds round(master) (header comment, "The model wins").
  void sync_master(const ParamState& s) const;

  std::string name_;
  HyperParams defaults_;
  std::vector<ParamGroup> groups_;
  std::vector<size_t> group_sizes_;   // params per group when added
  std::vector<ParamState> states_;    // one per parameter, group by group
  std::map<const TensorImpl*, size_t> index_;
  float pending_grad_scale_ = 1.0f;
  bool stochastic_rounding_ = false;
  Generator rounding_gen_;
};

}  // namespace mixtape::optim
