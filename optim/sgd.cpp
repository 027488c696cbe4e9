// optim/sgd.cpp — SGD's options, checks, and its fused in-place op
//   sgd_step_(w, grad, model, [momentum_buffer]; lr, momentum, dampening, weight_decay, nesterov,
//             first, inv_scale, stochastic, seed, offset)
// operands as optim/step_kernel.h describes, per-element math fn::SGDUpdate.
#include "optim/sgd.h"

#include <cmath>

#include "optim/step_kernel.h"

namespace mixtape::optim {
namespace {

TensorList sgd_step_cpu(const OpCall& c) {
  const double momentum = c.attrs.get<double>("momentum");
  const size_t num_state = c.inputs.size() > 3 ? 1 : 0;
  MT_CHECK((momentum != 0.0) == (num_state == 1), c.name(), ": momentum ", momentum,
           num_state ? " needs no buffer" : " needs a momentum buffer (input 3)");
  auto run = [&]<typename W>() {
    const auto f = fn::SGDUpdate<W>::make(c.attrs.get<double>("lr"), momentum, c.attrs.get<double>("dampening"),
                                          c.attrs.get<double>("weight_decay"), c.attrs.get<bool>("nesterov"),
                                          c.attrs.get<bool>("first"));
    if (num_state == 1) {
      detail::fused_step_loop<W, 1>(c, [&](W& w, W g, std::array<W*, 1>& s, int64_t i) __attribute__((always_inline)) { f(w, g, s[0][i]); });
    } else {
      detail::fused_step_loop<W, 0>(c, [&](W& w, W g, std::array<W*, 0>&, int64_t) __attribute__((always_inline)) {
        W unused = W(0);
        f(w, g, unused);
      });
    }
  };
  if (c.inputs[0].dtype() == DType::Float64)
    run.template operator()<double>();
  else
    run.template operator()<float>();
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

void SGD::update(const ParamUpdate& u, const HyperParams& o) {
  run_fused_step(kSGDStep, u,
                 {{"lr", o.get("lr")},
                  {"momentum", o.get("momentum")},
                  {"dampening", o.get("dampening")},
                  {"weight_decay", o.get("weight_decay")},
                  {"nesterov", o.get_bool("nesterov")},
                  {"first", u.fresh_state}});
}

}  // namespace mixtape::optim
