// ops/argmax_args.h — argmax's attribute checks and output shape, shared by the CPU kernel
// (ops/shape_ops.cpp, where they are defined) and the CUDA glue (ops/cuda/reduce_ops.cpp), so both
// backends size the output alike and fail with the same messages. Internal: not part of the
// public API.
#pragma once
#include <optional>

#include "core/dispatcher.h"
#include "core/tensor.h"

namespace mixtape {

struct ArgmaxArgs {
  std::optional<int64_t> dim;  // wrapped; none: over the flattened tensor
  IntList out_sizes;           // x's shape without dim (1 there with keepdim); all-1s or [] without a dim
};
// argmax(x; dim?, keepdim): x not bool; without a dim x is non-empty; a dim of size 0 only when
// the output is empty too.
ArgmaxArgs argmax_args(const OpCall& c, const Tensor& x);

}  // namespace mixtape
