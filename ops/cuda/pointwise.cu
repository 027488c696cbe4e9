// ops/cuda/pointwise.cu — the CUDA kernels of every in-tree pointwise op: including a functor
// header here instantiates the kernels of each functor it declares (MT_CUDA_KERNELS). A new
// functor in these headers needs nothing here; a new functor header is one more include (the
// library does not link without it).
// abs/sign/clamp of uint8 compare an unsigned value with 0 (pointless for uint8, needed by the
// functor for the other dtypes); set before the functor headers, where the warning points.
#pragma nv_diag_suppress 186
#include "ops/cuda/pointwise_kernels.cuh"

#include "ops/activation_functors.h"
#include "ops/functors.h"
