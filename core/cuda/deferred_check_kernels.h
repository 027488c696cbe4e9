// core/cuda/deferred_check_kernels.h — the C++17 boundary of core/cuda/deferred_check (nvcc
// includes this, never the Tensor-level header): the slot's "no failure" value and commit()'s
// kernel.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace mixtape::cuda {

inline constexpr unsigned long long kNoFailure = ~0ull;  // atomicMin's type, all bits set

// slot[1] = the bytes of data[slot[0]] (element_size <= 8, little-endian, zero-extended) when
// slot[0] is a position; enqueued on `stream` after the checking kernel (core/cuda/deferred_check.cu).
cudaError_t launch_capture_failed_element(unsigned long long* slot, const void* data, size_t element_size,
                                          cudaStream_t stream);

}  // namespace mixtape::cuda
