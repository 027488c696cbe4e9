// ops/cuda/copy.h — tensor-level helpers of the to_device copies (CUDA builds only), for other
// CUDA kernels that need a dense operand.
#pragma once
#include "core/tensor.h"

namespace mixtape::cuda {

// x itself when contiguous, else a contiguous copy on x's CUDA device (same dtype, enqueued on
// that device's current stream).
Tensor contiguous_on_device(const Tensor& x);

}  // namespace mixtape::cuda
