// core/scalar.h — a number passed where a tensor could be (x * 2.0). Ops wrap it in a 0-d
// "wrapped number" tensor, which type promotion treats as weak (f16 * 2.0 stays f16).
#pragma once
#include <cstdint>
#include <type_traits>

#include "core/dtype.h"

namespace mixtape {

class Scalar {
 public:
  Scalar(double v) : d_(v), floating_(true) {}  // NOLINT: implicit on purpose, like PyTorch
  Scalar(float v) : d_(v), floating_(true) {}   // NOLINT
  template <typename I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  Scalar(I v) : i_(static_cast<int64_t>(v)), d_(static_cast<double>(v)), floating_(false) {}  // NOLINT
  Scalar(bool v) : i_(v), d_(v), floating_(false), boolean_(true) {}                          // NOLINT

  bool is_floating() const { return floating_; }
  bool is_bool() const { return boolean_; }
  double to_double() const { return d_; }
  int64_t to_int() const { return floating_ ? static_cast<int64_t>(d_) : i_; }
  DType dtype() const { return floating_ ? DType::Float64 : boolean_ ? DType::Bool : DType::Int64; }

 private:
  int64_t i_ = 0;
  double d_ = 0;
  bool floating_ = false;
  bool boolean_ = false;
};

}  // namespace mixtape
