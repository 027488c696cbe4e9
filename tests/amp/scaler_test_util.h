// tests/amp/scaler_test_util.h — what the GradScaler tests share: bit-level snapshots of tensors
// (parameters, masters, optimizer state) and an expect-error helper.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/error_of.h"
#include "mixtape/mixtape.h"

namespace mixtape::testing {

// The raw bytes of a tensor's elements, in logical order.
inline std::vector<uint8_t> bytes_of(const Tensor& t0) {
  Tensor t = to_device(t0, Device::CPU()).contiguous();
  const auto* p = static_cast<const uint8_t*>(t.data_ptr());
  return std::vector<uint8_t>(p, p + t.nbytes());
}

// Bit-exact equality of dtype, shape and bytes.
inline ::testing::AssertionResult same_bytes(const Tensor& got, const Tensor& want) {
  if (!got.defined() || !want.defined())
    return got.defined() == want.defined() ? ::testing::AssertionSuccess()
                                           : ::testing::AssertionFailure() << "one tensor is undefined";
  if (got.dtype() != want.dtype() || got.sizes() != want.sizes())
    return ::testing::AssertionFailure() << "got " << got.describe() << ", want " << want.describe();
  if (bytes_of(got) != bytes_of(want)) {
    auto r = ::testing::AssertionFailure() << "bytes differ:";
    for (int64_t i = 0; i < got.numel() && i < 6; ++i)
      r << " [" << get_element(got, i) << " vs " << get_element(want, i) << "]";
    return r;
  }
  return ::testing::AssertionSuccess();
}

// A deep copy, for before/after comparisons.
inline Tensor snapshot(const Tensor& t) { return t.defined() ? t.detach().clone() : Tensor(); }

inline uint16_t bits16(const Tensor& t, int64_t i = 0) {
  uint16_t b;
  std::memcpy(&b, static_cast<const char*>(t.contiguous().data_ptr()) + 2 * i, 2);
  return b;
}
inline uint32_t bits32(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Expects fn to throw a mixtape::Error whose message contains every one of `parts`.
template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<const char*> parts) {
  const std::string msg = error_of(fn);
  EXPECT_NE(msg, "(no error)") << "expected an error containing '" << *parts.begin() << "'";
  for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "message: " << msg << "\nmissing: " << p;
}

// A leaf parameter holding `values` (shape `shape`, dtype dt).
inline Tensor make_param(const std::vector<double>& values, const IntList& shape, DType dt = DType::Float32) {
  Tensor t = tensor(values, shape, TensorOptions(dt));
  t.requires_grad_(true);
  return t;
}

}  // namespace mixtape::testing
