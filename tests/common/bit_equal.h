// tests/common/bit_equal.h — "the same tensor, bit for bit": same dtype, shape and bytes (so
// -0.0 != 0.0 and NaN patterns count). The failure message shows both tensors.
#pragma once
#include <gtest/gtest.h>

#include <cstring>

#include "autograd/print.h"
#include "core/tensor.h"

namespace mixtape::testing {

inline ::testing::AssertionResult bit_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes())
    return ::testing::AssertionFailure() << a.describe() << " vs " << b.describe();
  Tensor ac = a.contiguous(), bc = b.contiguous();
  if (std::memcmp(ac.data_ptr(), bc.data_ptr(), ac.nbytes()) != 0)
    return ::testing::AssertionFailure() << "bytes differ: " << a << " vs " << b;
  return ::testing::AssertionSuccess();
}

}  // namespace mixtape::testing
