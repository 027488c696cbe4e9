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
  if (r.dtype() != DType::Float64 || p.dtype() != DType::Float64 || p.sizes() != r.sizes())
    return ::testing::AssertionFailure() << "ref and absterms must be float64 tensors of got's shape";
  // Raw loads: the kernel tests check millions of elements.
  const double *pa = static_cast<const double*>(a.data_ptr()), *pr = static_cast<const double*>(r.data_ptr()),
               *pp = static_cast<const double*>(p.data_ptr());
  int64_t bad = 0;
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = pa[i], y = pr[i];
    const double tol = slack * double(k + 1) * std::ldexp(1.0, -24) * pp[i] +
                       bf16_steps * std::ldexp(std::fabs(y), -8) + 1e-30;
    worst = std::max(worst, std::fabs(x - y) / tol);
    if (!(std::fabs(x - y) <= tol) && bad++ < 3)
      std::cerr << "  [" << i << "] got " << x << " ref " << y << " tol " << tol << "\n";
  }
  if (bad) return ::testing::AssertionFailure() << bad << " of " << a.numel() << " outside the bound";
  return ::testing::AssertionSuccess() << "worst " << worst << " of the bound";
}

}  // namespace mixtape::testing
