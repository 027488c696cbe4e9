// models/layers/layernorm.h — nn::LayerNorm: normalisation over the trailing dims, as
// torch.nn.LayerNorm (weight ones, bias zeros).
#pragma once
#include "models/module.h"

namespace mixtape::nn {

class LayerNorm : public Module {
 public:
  explicit LayerNorm(IntList normalized_shape, double eps = 1e-5, bool elementwise_affine = true);

  // x: (*, normalized_shape) -> same shape.
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  std::string extra_repr() const override;

  IntList normalized_shape;
  double eps;
  Tensor weight, bias;  // normalized_shape, or undefined without elementwise_affine
};

}  // namespace mixtape::nn
