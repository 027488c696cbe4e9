// tests/ops/leaf.cpp — seeded float64 leaves (leaf.h).
#include "leaf.h"

namespace mixtape::testing {

Tensor leaf(const IntList& sizes, double lo, double hi, uint64_t seed) {
  Generator g(seed);
  Tensor u = rand(sizes, DType::Float64, &g);
  Tensor t = (u * (hi - lo) + lo).detach();
  return t.requires_grad_();
}

}  // namespace mixtape::testing
