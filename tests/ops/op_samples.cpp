// tests/ops/op_samples.cpp — the sample registry and input helpers.
#include "op_samples.h"

namespace mixtape::testing {

std::vector<GradSample>& grad_samples() {
  static std::vector<GradSample> samples;
  return samples;
}

bool register_sample(GradSample s) {
  grad_samples().push_back(std::move(s));
  return true;
}

Tensor leaf(const IntList& sizes, double lo, double hi, uint64_t seed) {
  Generator g(seed);
  Tensor u = rand(sizes, DType::Float64, &g);
  Tensor t = (u * (hi - lo) + lo).detach();
  return t.requires_grad_();
}

}  // namespace mixtape::testing
