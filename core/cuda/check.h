// core/cuda/check.h — the one way CUDA, cuBLAS and cuDNN calls are checked (CUDA builds only).
// Every call into the toolkit is wrapped: a failure throws mixtape::Error naming the op, the
// call's text, the status name and string, and file:line, e.g.
//   "matmul: CUDA call cudaMemcpyAsync(...) failed: cudaErrorInvalidValue (invalid argument)
//    at ops/cuda/matmul.cu:42"
// Header-only and C++17-clean, so .cu files (compiled as C++17) include it.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "core/error.h"

namespace mixtape::cuda::detail {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* op, const char* file,
                                   int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* op, const char* file,
                                     int line);
[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* op, const char* file,
                                    int line);
const char* cublas_status_name(cublasStatus_t status);

}  // namespace mixtape::cuda::detail

// MT_CUDA_CHECK(cudaMemcpyAsync(...), "to_device");  the op name is any const char*.
#define MT_CUDA_CHECK(expr, opname)                                                          \
  do {                                                                                       \
    cudaError_t mt_cuda_status_ = (expr);                                                    \
    if (mt_cuda_status_ != cudaSuccess)                                                      \
      ::mixtape::cuda::detail::throw_cuda_error(mt_cuda_status_, #expr, (opname), __FILE__, __LINE__); \
  } while (0)

#define MT_CUBLAS_CHECK(expr, opname)                                                          \
  do {                                                                                         \
    cublasStatus_t mt_cublas_status_ = (expr);                                                 \
    if (mt_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                            \
      ::mixtape::cuda::detail::throw_cublas_error(mt_cublas_status_, #expr, (opname), __FILE__, __LINE__); \
  } while (0)

#define MT_CUDNN_CHECK(expr, opname)                                                         \
  do {                                                                                       \
    cudnnStatus_t mt_cudnn_status_ = (expr);                                                 \
    if (mt_cudnn_status_ != CUDNN_STATUS_SUCCESS)                                            \
      ::mixtape::cuda::detail::throw_cudnn_error(mt_cudnn_status_, #expr, (opname), __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: reports a bad launch configuration at the launch, not at a later call.
#define MT_CUDA_CHECK_LAUNCH(opname) MT_CUDA_CHECK(cudaGetLastError(), opname)
