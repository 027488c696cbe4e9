// ops/cuda/relu_mask_kernels.h — launchers of ops/cuda/relu_mask.cu: relu's bit mask (format:
// ops/relu_mask.h) on the device. Plain data, C++17.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace mixtape::cuda {

// mask (ceil(n / 8) bytes): bit k of byte j = out[8 j + k] > 0 in acc_t; out contiguous, floating dt.
cudaError_t launch_relu_mask(DType dt, const void* out, int64_t n, uint8_t* mask, cudaStream_t s);
// grad_in[i] = mask bit i ? g[i] (through acc_t, as fn::ReluGrad) : +0; g and grad_in contiguous.
cudaError_t launch_relu_mask_grad(DType dt, const void* g, const uint8_t* mask, int64_t n, void* grad_in,
                                  cudaStream_t s);

}  // namespace mixtape::cuda
