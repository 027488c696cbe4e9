// core/shape.h — sizes/strides as small inline vectors, and the arithmetic on them that every
// layer shares (contiguous strides, dim wrapping, broadcasting).
#pragma once
#include <cstdint>
#include <ostream>
#include <string>

#include "core/small_vector.h"

namespace mixtape {

using IntList = SmallVector<int64_t, 6>;  // sizes, strides, dims

int64_t numel_of(const IntList& sizes);
IntList contiguous_strides(const IntList& sizes);
// Maps d in [-ndim, ndim) to [0, ndim); `op` names the caller in the error.
int64_t wrap_dim(int64_t d, int64_t ndim, const char* op);
// PyTorch/NumPy broadcasting: align right; each pair equal or one of them 1.
IntList broadcast_shapes(const IntList& a, const IntList& b, const char* op);
std::string shape_str(const IntList& s);  // "[2, 3]"
std::ostream& operator<<(std::ostream& os, const IntList& s);

}  // namespace mixtape
