// core/cuda/handles.h — cuBLAS, cuBLASLt and cuDNN handles (CUDA builds only; C++17-clean).
// Rules:
//   - cublas_handle() and cudnn_handle() return this host thread's handle for the current
//     device, created on first use (checked), with its stream set to current_stream() on every
//     call: call them right where the library call is made, after any StreamGuard.
//   - cublaslt_handle() is one per device (cuBLASLt handles carry no stream; pass
//     current_stream() to cublasLtMatmul).
//   - cuBLAS/cuBLASLt are loaded at first call, not linked: a cuBLAS function mixtape has not
//     called before needs one MT_LAZY_CUBLAS line in core/cuda/cublas_lazy.cpp (until then the
//     link fails with "undefined reference to cublas...").
//   - A handle or workspace is never created during CUDA graph capture (refused, naming the call):
//     cuda::Graph::capture_begin() makes this thread's for the current device first.
//   - Handles are kept for the life of the process: a thread that exits gives its handles back
//     to a per-device pool for the next thread; none is destroyed at exit, when the driver may
//     already be unloading.
#pragma once
#include <cstddef>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>

namespace mixtape::cuda {

cublasHandle_t cublas_handle();
cublasLtHandle_t cublaslt_handle();
cudnnHandle_t cudnn_handle();

// This thread's workspace for cuBLASLt matmuls on the current device (32 MiB, from the caching
// allocator, kept for the thread's life); *nbytes receives its size. Use it on the current
// stream; a thread switching streams must order the two uses (an Event). cuBLAS (not Lt) keeps
// its own default workspace.
void* cublas_workspace(size_t* nbytes);

}  // namespace mixtape::cuda
