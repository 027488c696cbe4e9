// models/zoo/mlp.cpp — MLP.
#include "models/zoo/mlp.h"

#include "models/layers/activation.h"
#include "models/layers/flatten.h"
#include "models/layers/linear.h"

namespace mixtape::models {

MLP::MLP(int64_t in_features, const std::vector<int64_t>& hidden, int64_t out_features) {
  push_back(std::make_shared<nn::Flatten>());
  int64_t width = in_features;
  for (int64_t h : hidden) {
    push_back(std::make_shared<nn::Linear>(width, h));
    push_back(std::make_shared<nn::ReLU>());
    width = h;
  }
  push_back(std::make_shared<nn::Linear>(width, out_features));
}

}  // namespace mixtape::models
