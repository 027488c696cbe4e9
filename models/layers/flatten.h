// models/layers/flatten.h — nn::Flatten: merges dims start_dim..end_dim (default: all but the
// batch dim), e.g. (N, C, H, W) -> (N, C*H*W).
#pragma once
#include "models/module.h"

namespace mixtape::nn {

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  int64_t start_dim, end_dim;
};

}  // namespace mixtape::nn
