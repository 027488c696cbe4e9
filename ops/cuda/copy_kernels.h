// ops/cuda/copy_kernels.h — the launcher of the strided-gather kernel (ops/cuda/copy.cu);
// C++17-clean (no tensor headers) so .cu files can include it (CUDA builds only).
#pragma once
#include <cstdint>

#include <cuda_runtime_api.h>

namespace mixtape::cuda {

// dst[i] = src[element i of the strided view], for `numel` elements of `elem_size` bytes
// (1, 2, 4 or 8); sizes/src_strides (in elements) have `ndim` entries. Enqueued on `stream`;
// raw bytes, no dtype conversion.
void launch_strided_gather(void* dst, const void* src, int64_t numel, int elem_size, int ndim,
                           const int64_t* sizes, const int64_t* src_strides, cudaStream_t stream);

}  // namespace mixtape::cuda
