// tests/common/same_specials.h — "infinities and NaN reach the same outputs": for two results of
// one computation by different summation orders (a kernel and its reference path), every element
// the reference has non-finite is the same infinity or a NaN in `got` too, and every finite one is
// finite there. Counts the reference's non-finite elements, so a test can require that its planted
// infinities and NaN reached enough outputs to mean something.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "core/tensor.h"

namespace mixtape::testing {

inline ::testing::AssertionResult same_specials(const Tensor& got, const Tensor& ref, int64_t min_specials) {
  const Tensor a = got.to(DType::Float64).contiguous(), r = ref.to(DType::Float64).contiguous();
  if (a.sizes() != r.sizes()) return ::testing::AssertionFailure() << "shapes differ";
  int64_t specials = 0, bad = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = get_element(a, i), e = get_element(r, i);
    if (std::isfinite(e)) {
      bad += !std::isfinite(x);
    } else {
      ++specials;
      bad += !(std::isnan(e) ? std::isnan(x) : x == e);
    }
  }
  if (bad) return ::testing::AssertionFailure() << bad << " elements differ in finiteness or in their infinity";
  if (specials < min_specials)
    return ::testing::AssertionFailure() << "only " << specials << " non-finite reference elements, expected "
                                         << min_specials << " or more";
  return ::testing::AssertionSuccess() << specials << " non-finite elements alike";
}

}  // namespace mixtape::testing
