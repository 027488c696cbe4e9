// models/layers/detail.h — small helpers the layer files share: PyTorch's "int or pair"
// arguments and their printing. Not part of the public API.
#pragma once
#include <string>

#include "core/error.h"
#include "core/shape.h"

namespace mixtape::nn::detail {

using ::mixtape::detail::str_cat;  // so detail::str_cat works inside mixtape::nn too

// {k} -> {k, k}; {a, b} stays; anything else is an error naming the layer and argument.
inline IntList expand_pair(const IntList& v, const char* layer, const char* arg) {
  MT_CHECK(v.size() == 1 || v.size() == 2, layer, ": ", arg, " must have 1 or 2 values, got ", shape_str(v));
  return v.size() == 1 ? IntList{v[0], v[0]} : v;
}

// {3, 3} -> "(3, 3)", as PyTorch prints tuples.
inline std::string tuple_str(const IntList& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

}  // namespace mixtape::nn::detail
