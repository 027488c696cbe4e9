// ops/shown.h — how an argument appears in an op's error messages: the caller's tensor
// (describe()) or a bare shape, rendered only when a check fails. Used by the conv and pooling
// checks (ops/conv.cpp, ops/pool_geometry.h) on both backends. Internal: not part of the public API.
#pragma once
#include <string>

#include "core/tensor.h"

namespace mixtape {

struct Shown {
  const Tensor* t;
  IntList sizes;
  static Shown of(const Tensor& x) { return {&x, x.sizes()}; }
  static Shown shape(const IntList& s) { return {nullptr, s}; }
  std::string str() const { return t ? t->describe() : shape_str(sizes); }
};

}  // namespace mixtape
