// core/shape.cpp — shape arithmetic with overflow and range checks.
#include "core/shape.h"

#include <sstream>

#include "core/error.h"

namespace mixtape {

int64_t numel_of(const IntList& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) {
    MT_CHECK(s >= 0, "shape: sizes must be non-negative, got ", shape_str(sizes));
    MT_CHECK(!__builtin_mul_overflow(n, s, &n), "shape: number of elements overflows int64 for ",
             shape_str(sizes));
  }
  return n;
}

IntList contiguous_strides(const IntList& sizes) {
  IntList st(sizes.size(), 1);
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    st[i] = acc;
    acc *= sizes[i] > 0 ? sizes[i] : 1;
  }
  return st;
}

int64_t wrap_dim(int64_t d, int64_t ndim, const char* op) {
  int64_t lo = ndim > 0 ? -ndim : -1, hi = ndim > 0 ? ndim - 1 : 0;  // 0-d tensors accept 0/-1
  MT_CHECK(d >= lo && d <= hi, op, ": dimension out of range (expected to be in range of [", lo, ", ", hi,
           "], but got ", d, ")");
  return d < 0 ? d + (ndim > 0 ? ndim : 1) : d;
}

IntList broadcast_shapes(const IntList& a, const IntList& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  IntList out(n, 1);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    MT_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
             " cannot be broadcast (dimension ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::string shape_str(const IntList& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const IntList& s) {
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  return os << ']';
}

}  // namespace mixtape
