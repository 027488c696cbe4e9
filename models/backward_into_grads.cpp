// models/backward_into_grads.cpp — see models/backward_into_grads.h.
#include "models/backward_into_grads.h"

#include "autograd/grad_mode.h"

namespace mixtape::nn {

void backward_into_grads(const Tensor& loss, const std::vector<Tensor>& params) {
  std::vector<Tensor> held(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    held[i] = params[i].grad();
    if (held[i].defined()) params[i].set_grad(Tensor());
  }
  loss.backward();
  NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!held[i].defined()) continue;
    const Tensor fresh = params[i].grad();
    if (fresh.defined()) held[i].add_(fresh);
    params[i].set_grad(held[i]);
  }
}

}  // namespace mixtape::nn
