// models/layers/dropout.h — nn::Dropout: in training, zeroes each element with probability p
// and scales the rest by 1 / (1 - p); in eval, the identity (torch.nn.Dropout).
#pragma once
#include "models/module.h"

namespace mixtape::nn {

class Dropout : public Module {
 public:
  // gen: the generator masks are drawn from (the default generator if null); not owned.
  explicit Dropout(double p = 0.5, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  double p;
  Generator* generator;
};

}  // namespace mixtape::nn
