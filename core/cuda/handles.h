// core/cuda/handles.h — cuBLAS, cuBLASLt and cuDNN handles (CUDA builds only; C++17-clean).
// Rules:
//   - cublas_handle() and cudnn_handle() return this host thread's handle for the current
//     device, created on first use (checked), with its stream set to current_stream() on every
//     call: call them right where the library call is made, after any StreamGuard.
//   - cuBLAS runs with a workspace of mixtape's per (device, stream), from the caching allocator,
//     set with cublasSetWorkspace after every cublasSetStream (which resets the handle to cuBLAS's
//     own default workspace pool, unusable under graph capture). It is made at the first
//     cublas_handle() on that stream — never during capture (refused, naming the call: warm the
//     stream up first; Graph::capture_begin() makes its capture stream's) — and kept until
//     release_cublas_workspace(stream): one stream's GEMMs never share scratch memory with
//     another's that may run at the same time, and a graph's captured GEMMs keep their workspace
//     while the graph lives.
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

#include <cuda_runtime_api.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>

namespace mixtape::cuda {

cublasHandle_t cublas_handle();
cublasLtHandle_t cublaslt_handle();
cudnnHandle_t cudnn_handle();

// The size of the cuBLAS workspace per stream on `device`: 32 MiB from compute capability 9.0
// (Hopper) on, 4 MiB before, as NVIDIA's cublasSetWorkspace documentation recommends.
size_t cublas_stream_workspace_bytes(int device);
// Gives the cuBLAS workspace of `stream` (on `device`; -1: on any device) back to the caching
// allocator; the stream's work that used it must be complete (Graph::reset() and OwnedStream's
// destructor call it after synchronising, then destroy the stream). A later cublas_handle() on
// that stream makes a new one. Never throws.
void release_cublas_workspace(cudaStream_t stream, int device = -1) noexcept;

// This thread's workspace for cuBLASLt matmuls on the current device (32 MiB, from the caching
// allocator, kept for the thread's life); *nbytes receives its size. Use it on the current
// stream; a thread switching streams must order the two uses (an Event). (cuBLAS itself: a
// workspace per stream, above.)
void* cublas_workspace(size_t* nbytes);

}  // namespace mixtape::cuda
