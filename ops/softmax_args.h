// ops/softmax_args.h — the attribute and dtype checks of softmax / log_softmax and their backward
// ops, shared by the CPU kernels (ops/softmax.cpp, where they are defined) and the CUDA glue
// (ops/cuda/softmax_loss_ops.cpp), so both backends compute in the same dtype and fail with the
// same messages. Internal: not part of the public API.
#pragma once
#include <cstdint>

#include "core/dispatcher.h"
#include "core/tensor.h"

namespace mixtape {

struct SoftmaxArgs {
  int64_t dim;  // wrapped
  DType dtype;  // the compute and output dtype
};
// softmax(x; dim, dtype?): dtype when given (floating), else x's (floating).
SoftmaxArgs softmax_args(const OpCall& c, const Tensor& x);
// softmax_backward(g, y; dim): g and y of one shape, their promoted dtype floating.
SoftmaxArgs softmax_backward_args(const OpCall& c, const Tensor& g, const Tensor& y);

}  // namespace mixtape
