// optim/sgd.h — stochastic gradient descent with momentum, dampening, Nesterov momentum and L2
// weight decay: PyTorch 1.13's torch.optim.SGD, element for element (formulas in
// optim/optim_functors.h, fn::SGDUpdate). The momentum buffer of a parameter is created on its
// first update as a copy of the (decayed) gradient, not (1 - dampening) times it, as PyTorch does.
// 16-bit parameters are updated through FP32 masters (optim/optimizer.h).
#pragma once
#include <limits>
#include <vector>

#include "optim/optimizer.h"

namespace mixtape::optim {

struct SGDOptions {
  double lr = std::numeric_limits<double>::quiet_NaN();  // required, as in PyTorch
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;

  // As param-group options: lr, momentum, dampening, weight_decay, nesterov (0/1).
  HyperParams hyper_params() const;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  // Groups override any subset of `defaults` (ParamGroup(params, {{"lr", 0.1}})).
  SGD(std::vector<ParamGroup> groups, SGDOptions defaults);

 protected:
  std::vector<std::string> state_names(const HyperParams& group) const override;
  std::vector<std::string> all_state_names() const override { return {"momentum_buffer"}; }
  // The momentum buffer is made on the first update that uses momentum, so a parameter updated
  // while momentum was 0 has none: a checkpoint without it is complete.
  std::vector<std::string> required_state_names(const HyperParams&) const override { return {}; }
  void check_options(const HyperParams& group) const override;
  void update(const ParamUpdate& u, const HyperParams& group) override;
  void update_many(const std::vector<const ParamUpdate*>& updates, const HyperParams& group) override;
};

}  // namespace mixtape::optim
