// models/layers/activation.h — parameter-free activation modules: ReLU, GELU, LeakyReLU.
// Each applies its op elementwise: x (any shape) -> same shape and dtype.
#pragma once
#include "models/module.h"

namespace mixtape::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};

class GELU : public Module {
 public:
  // approximate: "none" (erf form) or "tanh".
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  std::string approximate;
};

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope(negative_slope) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  double negative_slope;
};

}  // namespace mixtape::nn
