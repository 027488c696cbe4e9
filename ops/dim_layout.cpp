// ops/dim_layout.cpp — layout_of (ops/dim_layout.h), for both backends.
#include "ops/dim_layout.h"

namespace mixtape {

DimLayout layout_of(const IntList& sizes, int64_t dim) {
  DimLayout l;
  for (int64_t d = 0; d < static_cast<int64_t>(sizes.size()); ++d) {
    if (d < dim)
      l.outer *= sizes[d];
    else if (d == dim)
      l.len = sizes[d];
    else
      l.inner *= sizes[d];
  }
  return l;
}

}  // namespace mixtape
