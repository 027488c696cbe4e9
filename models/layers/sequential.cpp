// models/layers/sequential.cpp — nn::Sequential.
#include "models/layers/sequential.h"

namespace mixtape::nn {

std::shared_ptr<Module> Sequential::operator[](size_t i) const {
  MT_CHECK(i < modules_.size(), "Sequential: index ", i, " is out of range for ", modules_.size(), " modules");
  return modules_[i];
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& m : modules_) y = (*m)(y);
  return y;
}

}  // namespace mixtape::nn
