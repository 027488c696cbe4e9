// amp/cuda/mx_autocast_cuda.h — Fp8Autocast(CUDA)'s MXFP8 route (amp/cuda/mx_autocast_cuda.cpp),
// reached from amp/cuda/fp8_autocast_cuda.cpp's dispatch for an MXFP8BlockScaling region.
#pragma once
#include "amp/fp8_cuda_route.h"

namespace mixtape::amp::cuda {

// One linear / matmul / conv2d call under MXFP8 on CUDA, recorded as one tape node; `who` names
// the op in errors. The call's operands are on one CUDA device (checked by the caller).
TensorList run_mx(const detail::Fp8CudaCall& c, const char* who);

}  // namespace mixtape::amp::cuda
