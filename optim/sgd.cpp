// optim/sgd.cpp — SGD's options, checks, and its fused in-place ops
//   sgd_step_(w, grad, model, [momentum_buffer]; lr, momentum, dampening, weight_decay, nesterov,
//             first, inv_scale, stochastic, seed, offset)
//   sgd_step_multi_(w..., grad..., model..., [momentum_buffer...]; count, the same attrs with
//             first, seed, offset one per tensor)
// operands as optim/step_kernel.h describes, per-element math fn::SGDUpdate. The multi-tensor op
// runs, tensor by tensor, exactly what the single op runs (one launch for all of them on CUDA).
#include "optim/sgd.h"

#include <cmath>

#include "optim/step_kernel.h"

namespace mixtape::optim {
namespace {

// One tensor's update on the CPU: the body of both ops' CPU kernels.
void sgd_step_one(const detail::FusedOperands& o, const Attrs& a, bool first, double lr) {
  const double momentum = a.get<double>("momentum");
  auto run = [&]<typename W>() {
    const auto f = fn::SGDUpdate<W>::make(lr, momentum, a.get<double>("dampening"), a.get<double>("weight_decay"),
                                          a.get<bool>("nesterov"), first);
    if (momentum != 0.0) {
      detail::fused_step_loop<W, 1>(o, [&](W& w, W g, std::array<W*, 1>& s, int64_t i) __attribute__((always_inline)) { f(w, g, s[0][i]); });
    } else {
      detail::fused_step_loop<W, 0>(o, [&](W& w, W g, std::array<W*, 0>&, int64_t) __attribute__((always_inline)) {
        W unused = W(0);
        f(w, g, unused);
      });
    }
  };
  if (o.w.dtype() == DType::Float64)
    run.template operator()<double>();
  else
    run.template operator()<float>();
}

// Both CPU kernels: every tensor's update, from the attrs or (capturable) the device scalars.
void sgd_steps(const OpCall& c, std::vector<detail::FusedOperands>& ops, const IntList& first, size_t lists_end) {
  if (!detail::capturable(c)) {
    for (size_t k = 0; k < ops.size(); ++k) sgd_step_one(ops[k], c.attrs, first[k] != 0, c.attrs.get<double>("lr"));
    return;
  }
  const detail::DeviceScalars d = detail::device_scalars(c, lists_end, ops.size());
  if (d.found_inf != nullptr && *d.found_inf != 0.0f) return;  // skipped: nothing changes
  for (size_t k = 0; k < ops.size(); ++k) {
    if (d.inv_scale != nullptr) ops[k].inv_scale = *d.inv_scale;
    sgd_step_one(ops[k], c.attrs, *d.step[k] == 0, *d.lr);
  }
  for (int64_t* step : d.step) ++*step;
}

TensorList sgd_step_cpu(const OpCall& c) {
  const double momentum = c.attrs.get<double>("momentum");
  const size_t lists_end = detail::list_inputs(c, 1);
  const size_t num_state = lists_end > 3 ? 1 : 0;
  MT_CHECK((momentum != 0.0) == (num_state == 1), c.name(), ": momentum ", momentum,
           num_state ? " needs no buffer" : " needs a momentum buffer (input 3)");
  std::vector<detail::FusedOperands> ops{detail::fused_operands(c, num_state)};
  sgd_steps(c, ops, detail::capturable(c) ? IntList{0} : IntList{c.attrs.get<bool>("first") ? 1 : 0}, lists_end);
  return {c.inputs[0]};
}

// Every tensor is checked before the first is written.
TensorList sgd_step_multi_cpu(const OpCall& c) {
  const size_t num_state = c.attrs.get<double>("momentum") != 0.0 ? 1 : 0;  // a momentum buffer list
  std::vector<detail::FusedOperands> ops = detail::fused_operands_multi(c, num_state);
  const IntList first =
      detail::capturable(c) ? IntList(ops.size(), 0) : detail::per_tensor_attr(c, "first", ops.size());
  sgd_steps(c, ops, first, detail::list_inputs(c, ops.size()));
  return {c.inputs[0]};
}

Attrs sample_attrs(double momentum) {
  return {{"lr", 0.05}, {"momentum", momentum}, {"dampening", 0.1}, {"weight_decay", 1e-2},
          {"nesterov", false}, {"first", false}};
}
// 3001 elements: more than two of the loop's chunks.
const OpSchema& kSGDStep =
    define_op("sgd_step_")
        .in_place()
        .kernel(DeviceType::CPU, sgd_step_cpu)
        .sample("plain", {arg({3001}, 0.01, 1), arg({3001}, 0.001, 2)},
                [](const TensorList& x) { return detail::run_step_sample(kSGDStep, x, sample_attrs(0.0), false); },
                no_gradcheck())
        .sample("momentum-stochastic", {arg({3001}, 0.01, 1), arg({3001}, 0.001, 2), arg({3001}, 0.01, 1)},
                [](const TensorList& x) { return detail::run_step_sample(kSGDStep, x, sample_attrs(0.9), true); },
                no_gradcheck());

// Tensors of 3001 (more than one CUDA chunk), 1, 0 and 300 elements; with momentum, the second
// creates its buffer (first = 1) and the others continue theirs, and nesterov is on.
Attrs multi_sample_attrs(double momentum) {
  Attrs a = sample_attrs(momentum);
  if (momentum != 0.0) a.set("dampening", 0.0).set("nesterov", true);
  return a.set("first", IntList{0, 1, 0, 0});
}
std::vector<SampleArg> multi_sample_args(bool momentum) {
  std::vector<SampleArg> out;
  for (int64_t n : {3001, 1, 0, 300}) {
    out.push_back(arg({n}, 0.01, 1));
    out.push_back(arg({n}, 0.001, 2));
    if (momentum) out.push_back(arg({n}, 0.01, 1));
  }
  return out;
}
const OpSchema& kSGDStepMulti =
    define_op("sgd_step_multi_")
        .in_place()
        .kernel(DeviceType::CPU, sgd_step_multi_cpu)
        .sample("plain", multi_sample_args(false),
                [](const TensorList& x) {
                  return detail::run_multi_step_sample(kSGDStepMulti, x, 2, multi_sample_attrs(0.0), false);
                },
                no_gradcheck())
        .sample("nesterov-stochastic", multi_sample_args(true),
                [](const TensorList& x) {
                  return detail::run_multi_step_sample(kSGDStepMulti, x, 3, multi_sample_attrs(0.9), true);
                },
                no_gradcheck());

}  // namespace

HyperParams SGDOptions::hyper_params() const {
  return {{"lr", lr},
          {"momentum", momentum},
          {"dampening", dampening},
          {"weight_decay", weight_decay},
          {"nesterov", nesterov ? 1.0 : 0.0}};
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : SGD(std::vector<ParamGroup>{ParamGroup(std::move(params))}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions defaults) : Optimizer("SGD", defaults.hyper_params()) {
  MT_CHECK(!groups.empty(), "SGD: got an empty list of param groups");
  for (ParamGroup& g : groups) add_param_group(std::move(g));
}

std::vector<std::string> SGD::state_names(const HyperParams& group) const {
  if (group.get("momentum") != 0.0) return {"momentum_buffer"};
  return {};
}

void SGD::check_options(const HyperParams& o) const {
  const double lr = o.get("lr"), momentum = o.get("momentum"), dampening = o.get("dampening"),
               wd = o.get("weight_decay");
  MT_CHECK(lr >= 0.0, "SGD: invalid learning rate ", lr, " (lr is required: SGDOptions{.lr = ...}, and must be >= 0)");
  MT_CHECK(momentum >= 0.0, "SGD: invalid momentum value ", momentum, " (must be >= 0)");
  MT_CHECK(wd >= 0.0, "SGD: invalid weight_decay value ", wd, " (must be >= 0)");
  MT_CHECK(std::isfinite(dampening), "SGD: invalid dampening value ", dampening);
  MT_CHECK(!o.get_bool("nesterov") || (momentum > 0.0 && dampening == 0.0),
           "SGD: Nesterov momentum requires a momentum and zero dampening (momentum ", momentum, ", dampening ",
           dampening, ")");
}

namespace {
Attrs sgd_attrs(const HyperParams& o) {
  return {{"lr", o.get("lr")},
          {"momentum", o.get("momentum")},
          {"dampening", o.get("dampening")},
          {"weight_decay", o.get("weight_decay")},
          {"nesterov", o.get_bool("nesterov")}};
}
}  // namespace

void SGD::update(const ParamUpdate& u, const HyperParams& o) {
  run_fused_step(kSGDStep, u, sgd_attrs(o).set("first", u.fresh_state));
}

void SGD::update_many(const std::vector<const ParamUpdate*>& us, const HyperParams& o) {
  IntList first;
  for (const ParamUpdate* u : us) first.push_back(u->fresh_state ? 1 : 0);
  run_fused_step_multi(kSGDStepMulti, us, sgd_attrs(o).set("first", std::move(first)));
}

}  // namespace mixtape::optim
