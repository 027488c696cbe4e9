// tests/common/sum_bound.h — "within FP32 summation error of an FP64 reference": the bound the
// convolution kernels' tests hold their results to, element by element,
//   |got - ref| <= slack (k + 1) u |terms| + bf16_steps 2^-8 |ref|,   u = 2^-24,
// where |terms| is the same reduction over the absolute values (so cancellation does not shrink
// the bound), k the reduction length, and bf16_steps the roundings to BF16 in between.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>

#include "core/tensor.h"

namespace mixtape::testing {

inline ::testing::AssertionResult within_sum_bound(const Tensor& got, const Tensor& ref, const Tensor& absterms,
                                                   int64_t k, double slack, double bf16_steps) {
  const Tensor a = got.to(DType::Float64).contiguous(), r = ref.contiguous(), p = absterms.contiguous();
  if (a.sizes() != r.sizes()) return ::testing::AssertionFailure() << "shapes differ";
  int64_t bad = 0;
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = get_element(a, i), y = get_element(r, i);
    const double tol = slack * double(k + 1) * std::ldexp(1.0, -24) * get_element(p, i) +
                       bf16_steps * std::ldexp(std::fabs(y), -8) + 1e-30;
    worst = std::max(worst, std::fabs(x - y) / tol);
    if (!(std::fabs(x - y) <= tol) && bad++ < 3)
      std::cerr << "  [" << i << "] got " << x << " ref " << y << " tol " << tol << "\n";
  }
  if (bad) return ::testing::AssertionFailure() << bad << " of " << a.numel() << " outside the bound";
  return ::testing::AssertionSuccess() << "worst " << worst << " of the bound";
}

}  // namespace mixtape::testing
