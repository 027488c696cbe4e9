// optim/optimizer.cpp — parameter groups, masters, the step driver, zero_grad and state_dict of
// every optimizer (docs/AMP.md, "The optimizers" and "Master weights").
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <sstream>
#include <tuple>

#include "autograd/grad_mode.h"
#if MIXTAPE_WITH_CUDA
#include "core/cuda/graph.h"  // cuda::check_not_capturing
#endif
#include "ops/activation.h"
#include "ops/cast.h"
#include "ops/creation.h"
#include "ops/pointwise.h"

namespace mixtape::optim {

namespace {

// 0-d scalars for state_dict, written and read through their bits (an i64 seed can exceed 2^53).
Tensor i64_scalar(int64_t v) {
  Tensor t = Tensor::empty({}, TensorOptions(DType::Int64));
  *t.data_ptr<int64_t>() = v;
  return t;
}
Tensor f64_scalar(double v) {
  Tensor t = Tensor::empty({}, TensorOptions(DType::Float64));
  *t.data_ptr<double>() = v;
  return t;
}
Tensor on_cpu(const Tensor& t) { return contiguous(to_device(t, Device::CPU())); }

std::string key(const char* a, size_t i, const std::string& b) {
  return std::string(a) + "." + std::to_string(i) + "." + b;
}

Tensor snapshot(const Tensor& t) { return clone(t).detach(); }

// Where parameter p (any floating dtype) still holds what a write-back of `master` into the 16-bit
// format dt gave: exactly RNE(master) after a round-to-nearest write; after a stochastic one
// (which writes one of the two dt neighbours) a dt value within one dt spacing of the master.
Tensor holds_write_of(const Tensor& master, const Tensor& p, DType dt, bool stochastic) {
  if (!stochastic) return eq(to_dtype(to_dtype(master, dt), p.dtype()), p);
  // |float(p) - m| <= |m| * 2^-(mantissa bits) + the smallest dt subnormal; sign(excess) is -1,
  // 0, 1 or NaN, and relu(sign) == 0 exactly for "within".
  const bool half = dt == DType::Float16;
  const double rel = half ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
  const double tiny = half ? std::ldexp(1.0, -24) : std::ldexp(1.0, -133);
  const Tensor p32 = to_dtype(p, DType::Float32);  // exact once p is a dt value (checked below)
  const Tensor excess = sub(abs(sub(p32, master)), add(mul(abs(master), rel), tiny));
  Tensor keep = eq(relu(sign(excess)), zeros_like(excess));
  if (p.dtype() != dt) {  // a wider parameter must hold a dt value to count as written from dt
    const Tensor is_dt_value = eq(to_dtype(to_dtype(p, dt), p.dtype()), p);
    keep = where(is_dt_value, keep, is_dt_value);
  }
  return keep;
}

}  // namespace

// ---- HyperParams ----

double HyperParams::get(const std::string& name) const {
  auto it = items_.find(name);
  MT_CHECK(it != items_.end(), "optimizer option '", name, "' does not exist; options are: ", names());
  return it->second;
}

HyperParams& HyperParams::set(const std::string& name, double value) {
  auto it = items_.find(name);
  MT_CHECK(it != items_.end(), "optimizer option '", name, "' does not exist; options are: ", names());
  it->second = value;
  return *this;
}

std::string HyperParams::names() const {
  std::string out;
  for (auto& [n, v] : items_) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "(none)" : out;
}

// ---- construction ----

Optimizer::Optimizer(std::string name, HyperParams defaults) : name_(std::move(name)), defaults_(std::move(defaults)) {}

std::string Optimizer::describe_param(size_t index) const {
  std::ostringstream os;
  const Tensor& p = states_[index].param;
  os << "parameter " << index;
  if (!p.name().empty()) os << " '" << p.name() << "'";
  os << " (" << p.describe() << ")";
  return os.str();
}

void Optimizer::add_param_group(ParamGroup group) {
  const size_t g = groups_.size();
  MT_CHECK(!group.params.empty(), name_, ": param group ", g, " has no parameters (optimizers need at least one "
           "tensor to optimize)");
  HyperParams merged = defaults_;
  for (auto& [n, v] : group.options.items()) {
    MT_CHECK(merged.has(n), name_, ": unknown option '", n, "' in param group ", g, "; ", name_,
             " options are: ", defaults_.names());
    merged.items_[n] = v;
  }
  try {
    check_options(merged);
  } catch (const Error& e) {
    MT_ERROR(e.what(), " (param group ", g, ")");
  }
  std::set<const TensorImpl*> seen;
  for (size_t j = 0; j < group.params.size(); ++j) {
    const Tensor& p = group.params[j];
    std::ostringstream who;
    who << "parameter " << j << " of param group " << g;
    if (p.defined() && !p.name().empty()) who << " '" << p.name() << "'";
    MT_CHECK(p.defined(), name_, ": ", who.str(), " is an undefined tensor");
    who << " (" << p.describe() << ")";
    MT_CHECK(p.is_floating_point(), name_, ": can only optimize floating-point tensors (f16, bf16, f32, f64); ",
             who.str(), " is not");
    MT_CHECK(p.requires_grad(), name_, ": ", who.str(), " does not require grad; pass only trainable parameters "
             "(or call requires_grad_() on it)");
    MT_CHECK(p.is_leaf(), name_, ": can't optimize a non-leaf tensor: ", who.str(), " was computed by an op; "
             "optimize the leaf it came from");
    MT_CHECK(!index_.count(p.impl()) && seen.insert(p.impl()).second, name_, ": ", who.str(),
             " appears in more than one place; every parameter may be in only one param group, once");
  }
  // Validated: commit.
  autograd::NoGradGuard no_grad;
  for (const Tensor& p : group.params) {
    ParamState s;
    s.param = p;
    if (is_reduced_float(p.dtype())) {
      // The FP32 master starts as the parameter's exact value (every 16-bit value is a float).
      s.master = Tensor::empty(p.sizes(), TensorOptions(DType::Float32).with_device(p.device()));
      copy_(s.master, p);
      s.synced_version = p.version();
      // Gradients accumulate in FP32 unless the user chose otherwise (docs/AMP.md, "Master weights").
      if (!p.has_explicit_grad_dtype()) {
        const Tensor g = p.grad();
        if (g.defined() && is_reduced_float(g.dtype())) p.set_grad(to_dtype(g, DType::Float32));  // exact
        p.set_grad_dtype(DType::Float32);
      }
    }
    if (capturable_) s.step_t = zeros({}, TensorOptions(DType::Int64).with_device(p.device()));
    index_[p.impl()] = states_.size();
    states_.push_back(std::move(s));
  }
  group_sizes_.push_back(group.params.size());
  groups_.emplace_back(std::move(group.params), std::move(merged));
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  for (auto& s : states_) out.push_back(s.param);
  return out;
}

size_t Optimizer::index_of(const Tensor& param, const char* what) const {
  MT_CHECK(param.defined(), name_, ".", what, ": got an undefined tensor");
  auto it = index_.find(param.impl());
  MT_CHECK(it != index_.end(), name_, ".", what, ": ", param.describe(), " is not a parameter of this optimizer");
  return it->second;
}

void Optimizer::check_structure() const {
  MT_CHECK(groups_.size() == group_sizes_.size(), name_, ": param_groups() has ", groups_.size(),
           " groups but ", group_sizes_.size(), " were added; add groups with add_param_group()");
  size_t k = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto& opts = groups_[g].options.items();
    bool same_names = opts.size() == defaults_.items().size();
    for (auto& [n, v] : defaults_.items()) same_names = same_names && opts.count(n);
    MT_CHECK(same_names, name_, ": param group ", g, " has options ", groups_[g].options.names(), "; ", name_,
             " options are: ", defaults_.names(), " (change values with options.set, not the set of names)");
    MT_CHECK(groups_[g].params.size() == group_sizes_[g], name_, ": param group ", g, " now has ",
             groups_[g].params.size(), " parameters but was added with ", group_sizes_[g],
             "; the tensors of a group are fixed (use add_param_group for new ones)");
    for (const Tensor& p : groups_[g].params) {
      MT_CHECK(p.is_same(states_[k].param), name_, ": parameter ", k, " of param group ", g,
               " was replaced after it was added; the tensors of a group are fixed");
      ++k;
    }
  }
}

// ---- master weights ----

bool Optimizer::has_master(const Tensor& param) const { return states_[index_of(param, "has_master")].master.defined(); }

Tensor Optimizer::master(const Tensor& param) const {
  const ParamState& s = states_[index_of(param, "master")];
  sync_master(s);
  return s.master.defined() ? s.master : s.param;
}

std::vector<Tensor> Optimizer::master_params() const {
  std::vector<Tensor> out;
  for (auto& s : states_) {
    sync_master(s);
    out.push_back(s.master.defined() ? s.master : s.param);
  }
  return out;
}

void Optimizer::set_inv_scale_for_next_step(float inv_scale) {
  MT_CHECK(std::isfinite(inv_scale), name_, ".set_inv_scale_for_next_step: the inverse scale must be finite, got ",
           inv_scale);
  pending_inv_scale_ = inv_scale;
  inv_scale_pending_ = true;
}

void Optimizer::set_capturable(bool on) {
  autograd::NoGradGuard no_grad;
  if (on == capturable_) return;
  for (ParamState& s : states_) {
    if (on) {
      s.step_t = full({}, s.step, TensorOptions(DType::Int64).with_device(s.param.device()));
    } else {
      s.step = to_device(s.step_t, Device::CPU()).item<int64_t>();
      s.step_t = Tensor();
    }
  }
  device_lrs_.clear();
  pending_found_inf_ = pending_inv_scale_t_ = Tensor();
  capturable_ = on;
}

void Optimizer::set_device_skip_for_next_step(const Tensor& found_inf, const Tensor& inv_scale) {
  MT_CHECK(capturable_, name_, ".set_device_skip_for_next_step: the optimizer is not capturable (set_capturable(true) "
           "first: only the capturable kernels read a skip flag on the device)");
  auto check = [&](const Tensor& t, const char* what) {
    MT_CHECK(!t.defined() || (t.dtype() == DType::Float32 && t.numel() == 1), name_,
             ".set_device_skip_for_next_step: ", what, " must be a 1-element Float32 tensor, got ", t.describe());
  };
  check(found_inf, "found_inf");
  check(inv_scale, "inv_scale");
  pending_found_inf_ = found_inf;
  pending_inv_scale_t_ = inv_scale;
}

Tensor Optimizer::device_lr(size_t group, Device device) {
  MT_CHECK(capturable_, name_, ".device_lr: the optimizer is not capturable");
  MT_CHECK(group < groups_.size(), name_, ".device_lr: group ", group, " out of range (", groups_.size(), " groups)");
  if (device_lrs_.size() < groups_.size()) device_lrs_.resize(groups_.size());
  for (const DeviceLr& d : device_lrs_[group])
    if (d.device == device) return d.lr;
  const double lr = groups_[group].lr();
  device_lrs_[group].push_back(DeviceLr{device, full({}, lr, TensorOptions(DType::Float64).with_device(device)), lr});
  return device_lrs_[group].back().lr;
}

void Optimizer::write_device_lr() {
  autograd::NoGradGuard no_grad;
  for (size_t g = 0; g < device_lrs_.size() && g < groups_.size(); ++g) {
    const double lr = groups_[g].lr();
    for (DeviceLr& d : device_lrs_[g]) {
      if (d.written == lr) continue;
      fill_(d.lr, lr);  // a launch with the value as its argument: no host read
      d.written = lr;
    }
  }
}

void Optimizer::set_stochastic_rounding(bool on, uint64_t seed) {
  stochastic_rounding_ = on;
  rounding_gen_.set_state(seed, 0);
}

// Re-seeds, element by element, the master entries whose 16-bit parameter no longer holds what the
// optimizer's last write-back of them gave: exactly RNE(master) after a round-to-nearest write,
// within one 16-bit spacing of the master after a stochastic one (which writes one of the two
// neighbours). Entries that still match keep their finer FP32 value, so a write of the values the
// model already holds (loading the checkpoint the optimizer came from) loses nothing, and a
// write to one row re-seeds that row only. Device ops only, no host read: it never adds a
// synchronisation to a step, even where many parameters share one storage (one version counter).
void Optimizer::sync_master(const ParamState& s) const {
  if (!s.master.defined()) {
    if (s.loaded_master.defined()) adopt_loaded_master(s);
    return;
  }
  if (!s.needs_check && s.param.version() == s.synced_version) return;
  autograd::NoGradGuard no_grad;
  const Tensor& p = s.param;
  const Tensor keep = holds_write_of(s.master, p, p.dtype(), s.written_stochastically);
  Tensor m = s.master;
  copy_(m, where(keep, s.master, to_dtype(p, DType::Float32)));  // the user's write wins where the two disagree
  s.synced_version = p.version();
  s.needs_check = false;
}

// An f32/f64 parameter given the master of a 16-bit model's optimizer (the dict does not say
// which 16-bit format): wherever the parameter holds what that model's write-back gave, in FP16
// or in BF16, it takes the master's finer value; elsewhere the model's own weights win, as above.
void Optimizer::adopt_loaded_master(const ParamState& s) const {
  autograd::NoGradGuard no_grad;
  Tensor p = s.param;
  Tensor value = p;
  for (DType dt : {DType::Float16, DType::BFloat16})
    value = where(holds_write_of(s.loaded_master, p, dt, s.written_stochastically), s.loaded_master, value);
  copy_(p, value);  // exact: the master widens exactly into f32/f64
  s.loaded_master = Tensor();
}

// ---- step ----

void Optimizer::run_fused_step(const OpSchema& op, const ParamUpdate& u, Attrs attrs) {
  TensorList inputs{u.w, u.grad, u.model};
  for (const Tensor& s : u.state) inputs.push_back(s);
  if (u.step_t.defined()) {
    for (const Tensor& t : {u.found_inf, u.inv_scale_t, u.lr_t, u.step_t}) inputs.push_back(t);
    attrs.set("capturable", true);
  }
  attrs.set("inv_scale", u.inv_scale);
  for (auto& [n, v] : u.rounding.items()) attrs.set(n, v);
  dispatch(op, std::move(inputs), std::move(attrs));  // bumps u.w
  if (u.step_t.defined()) u.step_t.bump_version();
  if (u.model.defined()) u.model.bump_version();
  for (const Tensor& s : u.state) s.bump_version();
}

void Optimizer::run_fused_step_multi(const OpSchema& op, const std::vector<const ParamUpdate*>& us, Attrs attrs) {
  MT_CHECK(!us.empty(), op.name, ": no parameters to update");
  const ParamUpdate& u0 = *us[0];
  const size_t n = us.size(), lists = 3 + u0.state.size();
  TensorList inputs(lists * n);
  IntList seeds, offsets;
  for (size_t k = 0; k < n; ++k) {
    const ParamUpdate& u = *us[k];
    // One inv_scale and one rounding mode per call: step() puts only parameters with the same
    // grad and model dtypes together, which fix both.
    MT_CHECK(u.inv_scale == u0.inv_scale && u.state.size() == u0.state.size() &&
                 u.rounding.get<bool>("stochastic") == u0.rounding.get<bool>("stochastic"),
             op.name, ": parameter ", k, " of one multi-tensor update differs from parameter 0 in inv_scale, state "
             "buffers or rounding");
    inputs[k] = u.w;
    inputs[n + k] = u.grad;
    inputs[2 * n + k] = u.model;
    for (size_t j = 0; j < u.state.size(); ++j) inputs[(3 + j) * n + k] = u.state[j];
    seeds.push_back(u.rounding.get_or<int64_t>("seed", 0));
    offsets.push_back(u.rounding.get_or<int64_t>("offset", 0));
  }
  if (u0.step_t.defined()) {  // capturable: one found_inf, inv_scale, lr for the call, a count per tensor
    for (const ParamUpdate* u : us)
      MT_CHECK(u->step_t.defined() && u->found_inf.is_same(u0.found_inf) && u->inv_scale_t.is_same(u0.inv_scale_t) &&
                   u->lr_t.is_same(u0.lr_t),
               op.name, ": the parameters of one capturable multi-tensor update must share found_inf, inv_scale and lr");
    for (const Tensor& t : {u0.found_inf, u0.inv_scale_t, u0.lr_t}) inputs.push_back(t);
    for (const ParamUpdate* u : us) inputs.push_back(u->step_t);
    attrs.set("capturable", true);
  }
  attrs.set("count", static_cast<int64_t>(n)).set("inv_scale", u0.inv_scale);
  attrs.set("stochastic", u0.rounding.get<bool>("stochastic"));
  attrs.set("seed", std::move(seeds)).set("offset", std::move(offsets));
  dispatch(op, std::move(inputs), std::move(attrs));  // bumps input 0 only
  for (size_t k = 0; k < n; ++k) {
    const ParamUpdate& u = *us[k];
    if (k > 0) u.w.bump_version();
    if (u.step_t.defined()) u.step_t.bump_version();
    if (u.model.defined()) u.model.bump_version();
    for (const Tensor& s : u.state) s.bump_version();
  }
}

void Optimizer::step() {
  for (auto& [id, fn] : std::vector(pre_hooks_)) fn();
  autograd::NoGradGuard no_grad;
  check_structure();
  // First validate every gradient, so a bad one leaves the whole optimizer untouched.
  struct Work {
    size_t index, group;
    Tensor grad;
    double inv_scale;
  };
  std::vector<Work> work;
  size_t k = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    try {
      check_options(groups_[g].options);
    } catch (const Error& e) {
      MT_ERROR(e.what(), " (param group ", g, ")");
    }
    for (size_t j = 0; j < groups_[g].params.size(); ++j, ++k) {
      ParamState& s = states_[k];
      const Tensor& p = s.param;
      const Tensor grad = p.grad();
      if (!grad.defined()) continue;  // no gradient: skipped, as PyTorch
      // A 16-bit .grad (grad_dtype set to 16 bits by the user) still carries the loss scale: the
      // fused update multiplies it by the pending inverse scale as it widens it.
      const double inv_scale = is_reduced_float(grad.dtype()) ? pending_inv_scale_ : 1.0;
      MT_CHECK(grad.sizes() == p.sizes(), name_, ": the grad of ", describe_param(k), " has shape ",
               shape_str(grad.sizes()), ", expected the parameter's shape ", shape_str(p.sizes()));
      MT_CHECK(grad.device() == p.device(), name_, ": the grad of ", describe_param(k), " is on ", grad.device(),
               ", the parameter on ", p.device());
      const bool dtype_ok = grad.dtype() == p.dtype() || (s.master.defined() && grad.dtype() == DType::Float32);
      MT_CHECK(dtype_ok, name_, ": the grad of ", describe_param(k), " is ", dtype_name(grad.dtype()),
               ", expected ", dtype_name(p.dtype()), is_reduced_float(p.dtype()) ? " (or Float32)" : "");
      work.push_back({k, g, grad.is_contiguous() ? grad : contiguous(grad), inv_scale});
    }
  }
  // A write to a 16-bit parameter since the optimizer last wrote it re-seeds its master.
  for (ParamState& s : states_) sync_master(s);
  if (capturable_) write_device_lr();
  // Capturable: the skip flag and inverse scale, once per device (copies between devices are
  // stream-ordered, no host read).
  std::vector<std::pair<Device, std::pair<Tensor, Tensor>>> skip_on;
  auto skip_for = [&](Device d) -> const std::pair<Tensor, Tensor>& {
    for (auto& [dev, t] : skip_on)
      if (dev == d) return t;
    const Tensor f = pending_found_inf_.defined() ? to_device(pending_found_inf_, d) : Tensor();
    const Tensor i = pending_inv_scale_t_.defined() ? to_device(pending_inv_scale_t_, d) : Tensor();
    skip_on.emplace_back(d, std::make_pair(f, i));
    return skip_on.back().second;
  };
  // Every update's operands, in parameter order: state buffers are created and the rounding
  // stream is reserved in the order of one update after another.
  std::vector<ParamUpdate> updates(work.size());
  std::vector<bool> w_copy(work.size());
  for (size_t i = 0; i < work.size(); ++i) {
    ParamState& s = states_[work[i].index];
    const HyperParams& options = groups_[work[i].group].options;
    ParamUpdate& u = updates[i];
    // The master is always contiguous; a non-contiguous f32 parameter (or 16-bit model copy) is
    // updated through a contiguous copy written back afterwards.
    Tensor w = s.master.defined() ? s.master : s.param;
    w_copy[i] = !w.is_contiguous();
    u.w = w_copy[i] ? contiguous(w) : w;
    if (s.master.defined()) u.model = s.param.is_contiguous() ? s.param : contiguous(s.param);
    u.grad = work[i].grad;
    u.inv_scale = work[i].inv_scale;
    u.step = s.step + 1;
    if (capturable_) {
      u.step_t = s.step_t;
      u.lr_t = device_lr(work[i].group, w.device());
      std::tie(u.found_inf, u.inv_scale_t) = skip_for(w.device());
    }
    for (const std::string& n : state_names(options)) {
      auto it = s.buffers.find(n);
      if (it == s.buffers.end()) {
        it = s.buffers.emplace(n, zeros(w.sizes(), TensorOptions(w.dtype()).with_device(w.device()))).first;
        u.fresh_state = true;
      }
      u.state.push_back(it->second);
    }
    const bool stochastic = stochastic_rounding_ && u.model.defined();
    u.rounding.set("stochastic", stochastic);
    if (stochastic) {
#if MIXTAPE_WITH_CUDA
      // The stream's seed and offset are kernel arguments taken here on the host: a captured
      // step would round with the same numbers at every replay (before any update is launched).
      cuda::check_not_capturing((name_ + ".step").c_str(),
                                "rounds the 16-bit write-back stochastically (set_stochastic_rounding(true)): its "
                                "seed and offset are taken on the host, so every replay would repeat the same "
                                "rounding; call set_stochastic_rounding(false) before capturing");
#endif
      auto r = rounding_gen_.reserve(static_cast<uint64_t>(w.numel()));
      u.rounding.set("seed", static_cast<int64_t>(r.seed)).set("offset", static_cast<int64_t>(r.offset));
    }
  }
  // The parameters of a group that share device and dtypes (w, grad, model) are updated by one
  // update_many (one multi-tensor dispatch, one launch on CUDA); a parameter alone in its bucket
  // by update(). Updates of different parameters are independent, so the grouping changes no bit.
  struct Bucket {
    size_t group;
    Device device;
    DType w, grad;
    int model;  // the model copy's dtype, -1 when w is the parameter
    std::vector<size_t> items;
  };
  std::vector<Bucket> buckets;
  for (size_t i = 0; i < work.size(); ++i) {
    const ParamUpdate& u = updates[i];
    const Bucket key{work[i].group, u.w.device(), u.w.dtype(), u.grad.dtype(),
                     u.model.defined() ? static_cast<int>(u.model.dtype()) : -1, {}};
    auto same = [&](const Bucket& b) {
      return b.group == key.group && b.device == key.device && b.w == key.w && b.grad == key.grad &&
             b.model == key.model;
    };
    auto it = std::find_if(buckets.begin(), buckets.end(), same);
    if (it == buckets.end()) it = buckets.insert(buckets.end(), key);
    it->items.push_back(i);
  }
  for (const Bucket& b : buckets) {
    const HyperParams& options = groups_[b.group].options;
    if (b.items.size() == 1) {
      update(updates[b.items[0]], options);
    } else {
      std::vector<const ParamUpdate*> us;
      for (size_t i : b.items) us.push_back(&updates[i]);
      update_many(us, options);
    }
    for (size_t i : b.items) {
      ParamState& s = states_[work[i].index];
      const ParamUpdate& u = updates[i];
      if (!capturable_) s.step = u.step;  // capturable: the kernel advanced step_t unless skipped
      if (w_copy[i]) copy_(s.param, u.w);
      if (u.model.defined() && !u.model.is_same(s.param)) copy_(s.param, u.model);
      if (s.master.defined()) {
        s.synced_version = s.param.version();
        s.written_stochastically = u.rounding.get<bool>("stochastic");
      }
    }
  }
  pending_inv_scale_ = 1.0f;
  inv_scale_pending_ = false;
  pending_found_inf_ = pending_inv_scale_t_ = Tensor();
  // A copy: a hook may remove itself or another while they run.
  for (auto& [id, fn] : std::vector(post_hooks_)) fn();
}

int Optimizer::register_step_post_hook(std::function<void()> fn) {
  MT_CHECK(static_cast<bool>(fn), name_, ".register_step_post_hook: the hook is empty");
  post_hooks_.emplace_back(next_hook_id_, std::move(fn));
  return next_hook_id_++;
}

void Optimizer::remove_step_post_hook(int id) {
  std::erase_if(post_hooks_, [id](const auto& h) { return h.first == id; });
}

int Optimizer::register_step_pre_hook(std::function<void()> fn) {
  MT_CHECK(static_cast<bool>(fn), name_, ".register_step_pre_hook: the hook is empty");
  pre_hooks_.emplace_back(next_hook_id_, std::move(fn));
  return next_hook_id_++;
}

void Optimizer::remove_step_pre_hook(int id) {
  std::erase_if(pre_hooks_, [id](const auto& h) { return h.first == id; });
}

void Optimizer::update_many(const std::vector<const ParamUpdate*>& updates, const HyperParams& group) {
  for (const ParamUpdate* u : updates) update(*u, group);
}

void Optimizer::zero_grad(bool set_to_none) {
  autograd::NoGradGuard no_grad;
  for (ParamState& s : states_) {
    Tensor g = s.param.grad();
    if (g.defined()) {
      if (set_to_none) {
        s.param.set_grad(Tensor());
      } else {
        Tensor d = g.detach();  // a create_graph grad loses its history, as PyTorch's detach_()
        zero_(d);
        s.param.set_grad(d);
      }
    }
  }
  pending_inv_scale_ = 1.0f;
  inv_scale_pending_ = false;
  pending_found_inf_ = pending_inv_scale_t_ = Tensor();
}

// ---- state ----

Tensor Optimizer::state(const Tensor& param, const std::string& name) const {
  const ParamState& s = states_[index_of(param, "state")];
  auto it = s.buffers.find(name);
  return it == s.buffers.end() ? Tensor() : it->second;
}

int64_t Optimizer::state_bytes() const {
  int64_t n = 0;
  for (const ParamState& s : states_) {
    if (s.master.defined()) n += static_cast<int64_t>(s.master.nbytes());
    for (const auto& [name, t] : s.buffers) n += static_cast<int64_t>(t.nbytes());
  }
  return n;
}

int64_t Optimizer::step_count(const Tensor& param) const {
  const ParamState& s = states_[index_of(param, "step_count")];
  return s.step_t.defined() ? to_device(s.step_t, Device::CPU()).item<int64_t>() : s.step;
}

StateDict Optimizer::state_dict() const {
  autograd::NoGradGuard no_grad;
  StateDict sd;
  size_t k = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::vector<int64_t> idx;
    for (size_t j = 0; j < groups_[g].params.size(); ++j) idx.push_back(static_cast<int64_t>(k++));
    sd[key("param_groups", g, "params")] =
        tensor_from(idx, {static_cast<int64_t>(idx.size())}, TensorOptions(DType::Int64));
    for (auto& [n, v] : groups_[g].options.items()) sd[key("param_groups", g, n)] = f64_scalar(v);
  }
  for (size_t i = 0; i < states_.size(); ++i) {
    const ParamState& s = states_[i];
    // A 16-bit model's master loaded for an f32/f64 parameter and not yet adopted is saved as it
    // came: adopting it here would compare it with whatever weights the model holds now (before
    // a model load that may still follow) and lose it where they differ.
    const bool pending = !s.master.defined() && s.loaded_master.defined();
    if (!pending) sync_master(s);
    if (s.master.defined() || pending) {
      sd[key("state", i, "master")] = snapshot(pending ? s.loaded_master : s.master);
      sd[key("state", i, "written_stochastically")] = i64_scalar(s.written_stochastically ? 1 : 0);
    }
    const int64_t step = s.step_t.defined() ? to_device(s.step_t, Device::CPU()).item<int64_t>() : s.step;
    if (step > 0) sd[key("state", i, "step")] = i64_scalar(step);
    // Buffers exist from a parameter's first update; a capturable step skipped on the device made
    // them (zeros) without counting: such a parameter has no state yet.
    if (step > 0)
      for (auto& [n, t] : s.buffers) sd[key("state", i, n)] = snapshot(t);
  }
  sd["rounding.stochastic"] = i64_scalar(stochastic_rounding_ ? 1 : 0);
  sd["rounding.seed"] = i64_scalar(static_cast<int64_t>(rounding_gen_.seed()));
  sd["rounding.offset"] = i64_scalar(static_cast<int64_t>(rounding_gen_.offset()));
  return sd;
}

void Optimizer::load_state_dict(const StateDict& sd) {
  const std::string who = name_ + ".load_state_dict";
  std::set<std::string> used;
  auto find = [&](const std::string& k) -> const Tensor* {
    auto it = sd.find(k);
    if (it == sd.end()) return nullptr;
    MT_CHECK(it->second.defined(), who, ": key '", k, "' holds an undefined tensor");
    used.insert(k);
    return &it->second;
  };
  auto need = [&](const std::string& k) -> const Tensor& {
    const Tensor* t = find(k);
    MT_CHECK(t != nullptr, who, ": missing key '", k, "'");
    return *t;
  };
  auto expect = [&](const std::string& k, const Tensor& t, DType dtype, const IntList& sizes) {
    MT_CHECK(t.dtype() == dtype && t.sizes() == sizes, who, ": '", k, "' must be ", dtype_short(dtype),
             shape_str(sizes), ", got ", t.describe());
  };

  // ---- validate everything; nothing changes until all checks pass ----
  std::vector<HyperParams> new_options(groups_.size());
  size_t k = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string pk = key("param_groups", g, "params");
    const Tensor* idx = find(pk);
    MT_CHECK(idx != nullptr, who, ": missing key '", pk, "' (the state dict has fewer param groups than this "
             "optimizer's ", groups_.size(), ")");
    const int64_t n = static_cast<int64_t>(groups_[g].params.size());
    MT_CHECK(idx->dtype() == DType::Int64 && idx->dim() == 1, who, ": '", pk, "' must be a 1-D i64 tensor, got ",
             idx->describe());
    MT_CHECK(idx->numel() == n, who, ": param group ", g, " has ", idx->numel(), " parameters in the state dict, ",
             n, " in this optimizer");
    Tensor idx_cpu = on_cpu(*idx);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t want = static_cast<int64_t>(k) + j;
      MT_CHECK(idx_cpu.data_ptr<int64_t>()[j] == want, who, ": '", pk, "' lists parameter ",
               idx_cpu.data_ptr<int64_t>()[j], " at position ", j, ", expected ", want);
    }
    k += static_cast<size_t>(n);
    HyperParams opts = defaults_;
    for (auto& [name, v] : defaults_.items()) {
      const std::string hk = key("param_groups", g, name);
      const Tensor& t = need(hk);
      expect(hk, t, DType::Float64, {});
      opts.items_[name] = *on_cpu(t).data_ptr<double>();
    }
    try {
      check_options(opts);
    } catch (const Error& e) {
      MT_ERROR(who, ": param group ", g, ": ", e.what());
    }
    new_options[g] = std::move(opts);
  }
  int64_t rounding[3];
  const char* rkeys[3] = {"rounding.stochastic", "rounding.seed", "rounding.offset"};
  for (int r = 0; r < 3; ++r) {
    const Tensor& t = need(rkeys[r]);
    expect(rkeys[r], t, DType::Int64, {});
    rounding[r] = *on_cpu(t).data_ptr<int64_t>();
  }
  struct Loaded {
    Tensor master;  // undefined: none saved (the dict comes from an f32/f64 parameter)
    bool written_stochastically = false;
    int64_t step = 0;
    std::map<std::string, Tensor> buffers;
  };
  std::vector<Loaded> loaded(states_.size());
  const std::vector<std::string> names = all_state_names();
  k = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t j = 0; j < groups_[g].params.size(); ++j, ++k) {
      const ParamState& s = states_[k];
      const Tensor& p = s.param;
      const DType wt = s.master.defined() ? DType::Float32 : p.dtype();
      // A master is saved with how its 16-bit parameter was last written. The dict of a 16-bit
      // parameter's state may meet an f32/f64 parameter and the other way round (the same model
      // trained in another precision): an extra master is kept as the FP32 value it is, a
      // missing one is seeded from the parameter (docs/AMP.md, "Master weights").
      const std::string mk = key("state", k, "master"), wk = key("state", k, "written_stochastically");
      const Tensor* m = find(mk);
      const Tensor* w = find(wk);
      if (m != nullptr) {
        expect(mk, *m, DType::Float32, p.sizes());
        loaded[k].master = *m;
        // Dicts saved before the per-parameter key: the optimizer-wide flag.
        loaded[k].written_stochastically = rounding[0] != 0;
      }
      if (w != nullptr) {
        MT_CHECK(m != nullptr, who, ": missing key '", mk, "' ('", wk, "' is present: the dict holds the state of a "
                 "16-bit parameter without its master)");
        expect(wk, *w, DType::Int64, {});
        const int64_t v = *on_cpu(*w).data_ptr<int64_t>();
        MT_CHECK(v == 0 || v == 1, who, ": '", wk, "' must be 0 or 1, got ", v);
        loaded[k].written_stochastically = v != 0;
      }
      const std::string sk = key("state", k, "step");
      if (const Tensor* st = find(sk)) {
        expect(sk, *st, DType::Int64, {});
        loaded[k].step = *on_cpu(*st).data_ptr<int64_t>();
        MT_CHECK(loaded[k].step >= 1, who, ": '", sk, "' must be >= 1, got ", loaded[k].step);
      }
      for (const std::string& n : names) {
        const std::string bk = key("state", k, n);
        if (const Tensor* b = find(bk)) {
          expect(bk, *b, wt, p.sizes());
          MT_CHECK(loaded[k].step > 0, who, ": '", bk, "' is present but '", sk, "' is not");
          loaded[k].buffers[n] = *b;
        }
      }
      if (loaded[k].step > 0)
        for (const std::string& n : required_state_names(new_options[g]))
          MT_CHECK(loaded[k].buffers.count(n), who, ": missing key '", key("state", k, n), "' (parameter ", k,
                   " has been updated ", loaded[k].step, " times)");
    }
  }
  for (auto& [n, t] : sd) {
    if (used.count(n)) continue;
    if (n.rfind("param_groups.", 0) == 0)
      MT_ERROR(who, ": unexpected key '", n, "' (the state dict has more param groups, or options this ", name_,
               " does not have; it has ", groups_.size(), " groups with options ", defaults_.names(), ")");
    if (n.rfind("state.", 0) == 0)
      MT_ERROR(who, ": unexpected key '", n, "' (this optimizer has ", states_.size(), " parameters, ",
               "per-parameter state 'step', 'master' and 'written_stochastically' (from 16-bit parameters) and "
               "buffers of ", name_, ")");
    MT_ERROR(who, ": unexpected key '", n, "'");
  }

  // ---- apply ----
  autograd::NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) groups_[g].options = std::move(new_options[g]);
  for (size_t i = 0; i < states_.size(); ++i) {
    ParamState& s = states_[i];
    const Device dev = s.param.device();
    // The model's weights stay authoritative, as in PyTorch (loading an optimizer never changes
    // the model's values beyond the precision its 16-bit state dict lost): the next sync keeps
    // the loaded master only where the model holds its rounding, whichever of the two was loaded
    // first.
    s.loaded_master = Tensor();
    if (s.master.defined() && loaded[i].master.defined()) {
      copy_(s.master, to_device(loaded[i].master, dev));  // keeps the master's identity
      s.needs_check = true;
      s.written_stochastically = loaded[i].written_stochastically;
    } else if (s.master.defined()) {  // state from an f32/f64 parameter: the master is the parameter
      copy_(s.master, s.param);       // exact; a model loaded later re-seeds it through the version
      s.synced_version = s.param.version();
      s.needs_check = false;
      s.written_stochastically = false;
    } else if (loaded[i].master.defined()) {  // state from a 16-bit parameter: its FP32 value
      s.loaded_master = snapshot(to_device(loaded[i].master, dev));
      s.written_stochastically = loaded[i].written_stochastically;
    }
    s.step = loaded[i].step;
    if (s.step_t.defined()) fill_(s.step_t, s.step);
    s.buffers.clear();
    for (auto& [n, t] : loaded[i].buffers) s.buffers[n] = snapshot(to_device(t, dev));
  }
  stochastic_rounding_ = rounding[0] != 0;
  rounding_gen_.set_state(static_cast<uint64_t>(rounding[1]), static_cast<uint64_t>(rounding[2]));
  pending_inv_scale_ = 1.0f;
  inv_scale_pending_ = false;
  pending_found_inf_ = pending_inv_scale_t_ = Tensor();
}

}  // namespace mixtape::optim
