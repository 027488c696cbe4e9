// optim/adam.cpp — Adam/AdamW options, checks, and their fused in-place ops
//   adam_step_(w, grad, model, exp_avg, exp_avg_sq, [max_exp_avg_sq]; lr, beta1, beta2, eps,
//              weight_decay, amsgrad, decoupled, step, inv_scale, stochastic, seed, offset)
//   adam_step_multi_(w..., grad..., model..., exp_avg..., exp_avg_sq..., [max_exp_avg_sq...];
//              count, the same attrs with step, seed, offset one per tensor)
// operands as optim/step_kernel.h describes, per-element math fn::AdamUpdate. `step` is the
// parameter's update count including this one; the bias corrections are computed from it on the
// host, in double, as Python computes them. The multi-tensor op runs, tensor by tensor, exactly
// what the single op runs (one launch for all of them on CUDA).
#include "optim/adam.h"

#include <cmath>

#include "optim/step_kernel.h"

namespace mixtape::optim {
namespace {

// One tensor's update on the CPU at update count `step`: the body of both ops' CPU kernels.
void adam_step_one(const detail::FusedOperands& o, const Attrs& a, int64_t step, double lr) {
  const bool amsgrad = a.get<bool>("amsgrad");
  auto run = [&]<typename W>() {
    const auto f = fn::AdamUpdate<W>::make(lr, a.get<double>("beta1"), a.get<double>("beta2"), a.get<double>("eps"),
                                           a.get<double>("weight_decay"), amsgrad, a.get<bool>("decoupled"), step);
    if (amsgrad) {
      detail::fused_step_loop<W, 3>(
          o, [&](W& w, W g, std::array<W*, 3>& s, int64_t i) __attribute__((always_inline)) { f(w, g, s[0][i], s[1][i], s[2][i]); });
    } else {
      detail::fused_step_loop<W, 2>(o, [&](W& w, W g, std::array<W*, 2>& s, int64_t i) __attribute__((always_inline)) {
        W unused = W(0);
        f(w, g, s[0][i], s[1][i], unused);
      });
    }
  };
  if (o.w.dtype() == DType::Float64)
    run.template operator()<double>();
  else
    run.template operator()<float>();
}

// Both CPU kernels: every tensor's update, from the attrs or (capturable) the device scalars.
void adam_steps(const OpCall& c, std::vector<detail::FusedOperands>& ops, const IntList& steps, size_t lists_end) {
  if (!detail::capturable(c)) {
    for (size_t k = 0; k < ops.size(); ++k)
      MT_CHECK(steps[k] >= 1, c.name(), ": step must be >= 1, got ", steps[k],
               ops.size() > 1 ? " (tensor " + std::to_string(k) + ")" : std::string());
    for (size_t k = 0; k < ops.size(); ++k) adam_step_one(ops[k], c.attrs, steps[k], c.attrs.get<double>("lr"));
    return;
  }
  const detail::DeviceScalars d = detail::device_scalars(c, lists_end, ops.size());
  if (d.found_inf != nullptr && *d.found_inf != 0.0f) return;  // skipped: nothing changes
  for (size_t k = 0; k < ops.size(); ++k) {
    if (d.inv_scale != nullptr) ops[k].inv_scale = *d.inv_scale;
    adam_step_one(ops[k], c.attrs, *d.step[k] + 1, *d.lr);
  }
  for (int64_t* step : d.step) ++*step;
}

TensorList adam_step_cpu(const OpCall& c) {
  std::vector<detail::FusedOperands> ops{detail::fused_operands(c, c.attrs.get<bool>("amsgrad") ? 3 : 2)};
  adam_steps(c, ops, detail::capturable(c) ? IntList{1} : IntList{c.attrs.get<int64_t>("step")},
             detail::list_inputs(c, 1));
  return {c.inputs[0]};
}

// Every tensor is checked before the first is written.
TensorList adam_step_multi_cpu(const OpCall& c) {
  std::vector<detail::FusedOperands> ops = detail::fused_operands_multi(c, c.attrs.get<bool>("amsgrad") ? 3 : 2);
  const IntList steps = detail::capturable(c) ? IntList(ops.size(), 1) : detail::per_tensor_attr(c, "step", ops.size());
  adam_steps(c, ops, steps, detail::list_inputs(c, ops.size()));
  return {c.inputs[0]};
}

Attrs sample_attrs(bool amsgrad, bool decoupled) {
  return {{"lr", 1e-3},        {"beta1", 0.9},       {"beta2", 0.999},          {"eps", 1e-8},
          {"weight_decay", 0.01}, {"amsgrad", amsgrad}, {"decoupled", decoupled}, {"step", int64_t(5)}};
}
// 3001 elements: more than two of the loop's chunks. The second moments are positive.
const OpSchema& kAdamStep =
    define_op("adam_step_")
        .in_place()
        .kernel(DeviceType::CPU, adam_step_cpu)
        .sample("adam",
                {arg({3001}, 0.01, 1), arg({3001}, 0.001, 2), arg({3001}, 0.001, 0.1), arg({3001}, 1e-6, 1e-3)},
                [](const TensorList& x) { return detail::run_step_sample(kAdamStep, x, sample_attrs(false, false), false); },
                no_gradcheck())
        .sample("adamw-amsgrad-stochastic",
                {arg({3001}, 0.01, 1), arg({3001}, 0.001, 2), arg({3001}, 0.001, 0.1), arg({3001}, 1e-6, 1e-3),
                 arg({3001}, 1e-6, 1e-3)},
                [](const TensorList& x) { return detail::run_step_sample(kAdamStep, x, sample_attrs(true, true), true); },
                no_gradcheck());

// Tensors of 3001 (more than one CUDA chunk), 1, 0 and 300 elements at different update counts
// (their bias corrections differ).
Attrs multi_sample_attrs(bool amsgrad, bool decoupled) {
  return sample_attrs(amsgrad, decoupled).set("step", IntList{5, 1, 2, 40});
}
std::vector<SampleArg> multi_sample_args(bool amsgrad) {
  std::vector<SampleArg> out;
  for (int64_t n : {3001, 1, 0, 300}) {
    out.push_back(arg({n}, 0.01, 1));
    out.push_back(arg({n}, 0.001, 2));
    out.push_back(arg({n}, 0.001, 0.1));
    out.push_back(arg({n}, 1e-6, 1e-3));
    if (amsgrad) out.push_back(arg({n}, 1e-6, 1e-3));
  }
  return out;
}
const OpSchema& kAdamStepMulti =
    define_op("adam_step_multi_")
        .in_place()
        .kernel(DeviceType::CPU, adam_step_multi_cpu)
        .sample("adam", multi_sample_args(false),
                [](const TensorList& x) {
                  return detail::run_multi_step_sample(kAdamStepMulti, x, 4, multi_sample_attrs(false, false), false);
                },
                no_gradcheck())
        .sample("adamw-amsgrad-stochastic", multi_sample_args(true),
                [](const TensorList& x) {
                  return detail::run_multi_step_sample(kAdamStepMulti, x, 5, multi_sample_attrs(true, true), true);
                },
                no_gradcheck());

HyperParams adam_hyper_params(double lr, std::pair<double, double> betas, double eps, double wd, bool amsgrad) {
  return {{"lr", lr}, {"beta1", betas.first}, {"beta2", betas.second}, {"eps", eps}, {"weight_decay", wd},
          {"amsgrad", amsgrad ? 1.0 : 0.0}};
}

}  // namespace

HyperParams AdamOptions::hyper_params() const { return adam_hyper_params(lr, betas, eps, weight_decay, amsgrad); }
HyperParams AdamWOptions::hyper_params() const { return adam_hyper_params(lr, betas, eps, weight_decay, amsgrad); }

Adam::Adam(const char* name, HyperParams defaults, bool decoupled_weight_decay)
    : Optimizer(name, std::move(defaults)), decoupled_(decoupled_weight_decay) {}

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::vector<ParamGroup>{ParamGroup(std::move(params))}, options) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions defaults) : Adam("Adam", defaults.hyper_params(), false) {
  MT_CHECK(!groups.empty(), "Adam: got an empty list of param groups");
  for (ParamGroup& g : groups) add_param_group(std::move(g));
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : AdamW(std::vector<ParamGroup>{ParamGroup(std::move(params))}, options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions defaults) : Adam("AdamW", defaults.hyper_params(), true) {
  MT_CHECK(!groups.empty(), "AdamW: got an empty list of param groups");
  for (ParamGroup& g : groups) add_param_group(std::move(g));
}

std::vector<std::string> Adam::state_names(const HyperParams& group) const {
  if (group.get_bool("amsgrad")) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

void Adam::check_options(const HyperParams& o) const {
  const double lr = o.get("lr"), eps = o.get("eps"), b1 = o.get("beta1"), b2 = o.get("beta2"),
               wd = o.get("weight_decay");
  MT_CHECK(lr >= 0.0, name(), ": invalid learning rate ", lr, " (must be >= 0)");
  MT_CHECK(eps >= 0.0, name(), ": invalid epsilon value ", eps, " (must be >= 0)");
  MT_CHECK(b1 >= 0.0 && b1 < 1.0, name(), ": invalid beta parameter at index 0: ", b1, " (must be in [0, 1))");
  MT_CHECK(b2 >= 0.0 && b2 < 1.0, name(), ": invalid beta parameter at index 1: ", b2, " (must be in [0, 1))");
  MT_CHECK(wd >= 0.0, name(), ": invalid weight_decay value ", wd, " (must be >= 0)");
}

Attrs Adam::step_attrs(const HyperParams& o) const {
  return {{"lr", o.get("lr")},
          {"beta1", o.get("beta1")},
          {"beta2", o.get("beta2")},
          {"eps", o.get("eps")},
          {"weight_decay", o.get("weight_decay")},
          {"amsgrad", o.get_bool("amsgrad")},
          {"decoupled", decoupled_}};
}

void Adam::update(const ParamUpdate& u, const HyperParams& o) {
  run_fused_step(kAdamStep, u, step_attrs(o).set("step", u.step));
}

void Adam::update_many(const std::vector<const ParamUpdate*>& us, const HyperParams& o) {
  IntList steps;
  for (const ParamUpdate* u : us) steps.push_back(u->step);
  run_fused_step_multi(kAdamStepMulti, us, step_attrs(o).set("step", std::move(steps)));
}

}  // namespace mixtape::optim
