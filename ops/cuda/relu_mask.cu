// ops/cuda/relu_mask.cu — relu's bit mask on the device (ops/relu_mask.h): one thread per mask
// byte, so every byte is written whole by one thread (no atomics) and the CPU's bits result.
#include "ops/cuda/loops.cuh"
#include "ops/cuda/relu_mask_kernels.h"

namespace mixtape::cuda {
namespace {

template <typename T>
__global__ void relu_mask_kernel(const T* out, int64_t n, uint8_t* mask) {
  using A = acc_t<T>;
  const int64_t bytes = (n + 7) / 8;
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < bytes; j += int64_t(blockDim.x) * gridDim.x) {
    unsigned b = 0;
    for (int64_t i = 8 * j, e = 8 * j + 8 < n ? 8 * j + 8 : n; i < e; ++i)
      b |= unsigned(static_cast<A>(out[i]) > A(0)) << (i - 8 * j);
    mask[j] = static_cast<uint8_t>(b);
  }
}

template <typename T>
__global__ void relu_mask_grad_kernel(const T* g, const uint8_t* mask, int64_t n, T* grad_in) {
  using A = acc_t<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    const bool keep = (mask[i >> 3] >> (i & 7)) & 1u;
    grad_in[i] = static_cast<T>(keep ? static_cast<A>(g[i]) : A(0));
  }
}

}  // namespace

cudaError_t launch_relu_mask(DType dt, const void* out, int64_t n, uint8_t* mask, cudaStream_t s) {
  const int64_t bytes = (n + 7) / 8;
  if (bytes == 0) return cudaSuccess;
  return visit_floating_cuda(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch_kernel(relu_mask_kernel<T>, grid_for(bytes, kThreads), kThreads, 0, s, static_cast<const T*>(out), n,
                         mask);
  });
}

cudaError_t launch_relu_mask_grad(DType dt, const void* g, const uint8_t* mask, int64_t n, void* grad_in,
                                  cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return visit_floating_cuda(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch_kernel(relu_mask_grad_kernel<T>, grid_for(n, kThreads), kThreads, 0, s, static_cast<const T*>(g),
                         mask, n, static_cast<T*>(grad_in));
  });
}

}  // namespace mixtape::cuda
