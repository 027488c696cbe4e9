// ops/dim_layout.h — a contiguous tensor read as (outer, len, inner) around one dim, the layout
// of softmax, argmax and index_select. Shared by the CPU kernels (ops/softmax.cpp,
// ops/shape_ops.cpp) and the CUDA glue (ops/cuda/softmax_loss_ops.cpp, indexing_ops.cpp);
// defined in ops/dim_layout.cpp. Internal: not part of the public API.
#pragma once
#include <cstdint>

#include "core/shape.h"

namespace mixtape {

struct DimLayout {
  int64_t outer = 1, len = 1, inner = 1;  // product of the dims before, size of, product after
};
// sizes split around dim; a dim outside [0, sizes.size()) (softmax of a 0-d tensor passes -1)
// leaves len = 1.
DimLayout layout_of(const IntList& sizes, int64_t dim);

}  // namespace mixtape
