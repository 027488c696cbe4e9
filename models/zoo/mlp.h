// models/zoo/mlp.h — a multilayer perceptron: Flatten, then Linear + ReLU per hidden width,
// then a Linear to the outputs. A Sequential, so its state_dict names ("1.weight", "3.weight",
// ...) are those of the same torch.nn.Sequential.
#pragma once
#include <vector>

#include "models/layers/sequential.h"

namespace mixtape::models {

class MLP : public nn::Sequential {
 public:
  // x: (N, *) with in_features elements per sample -> (N, out_features).
  MLP(int64_t in_features, const std::vector<int64_t>& hidden, int64_t out_features);
};

}  // namespace mixtape::models
