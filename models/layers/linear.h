// models/layers/linear.h — nn::Linear: y = x W^T + b.
#pragma once
#include "models/module.h"

namespace mixtape::nn {

class Linear : public Module {
 public:
  // weight (out_features, in_features) and bias (out_features) ~ U(-1/sqrt(in), 1/sqrt(in)),
  // PyTorch's default (kaiming_uniform_(a = sqrt(5)) for the weight), from `gen` (default
  // generator if null).
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator* gen = nullptr);

  // x: (*, in_features) -> (*, out_features).
  Tensor forward(const Tensor& x) override;
  void reset_parameters(Generator* gen = nullptr);
  std::string extra_repr() const override;

  int64_t in_features, out_features;
  Tensor weight;  // (out_features, in_features)
  Tensor bias;    // (out_features), or undefined
};

}  // namespace mixtape::nn
