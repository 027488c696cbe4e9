// tests/ops/leaf.h — seeded float64 leaves for the hand-written gradchecks of this folder (an op's
// own gradchecks come from the samples it declares: tests/ops/test_op_samples.cpp).
#pragma once
#include <cstdint>

#include <mixtape/mixtape.h>

namespace mixtape::testing {

// A seeded f64 tensor of `sizes`, values in (lo, hi), requiring grad.
Tensor leaf(const IntList& sizes, double lo = -1.0, double hi = 1.0, uint64_t seed = 1);

}  // namespace mixtape::testing
