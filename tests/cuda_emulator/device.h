// tests/cuda_emulator/device.h — what a .cu file sees of the GPU in a MIXTAPE_CUDA=EMULATOR build,
// force-included (-include) before anything else so its __shared__ wins over the toolkit's
// host_defines.h (which defines the CUDA keywords away for a host compiler).
//
// The model (tests/cuda_emulator/kernel_engine.cpp runs it): the blocks of a grid run one after
// another; the threads of a block run as fibers on the launching host thread, each until it
// finishes or reaches __syncthreads(), which releases only when every thread of the block has
// reached it. So:
//   - __shared__ arrays are `static`: one per kernel instantiation, seen by every thread of the
//     running block (never initialised per block, just as shared memory is not);
//   - threadIdx / blockIdx / blockDim / gridDim are the running fiber's coordinates;
//   - atomics are plain read-modify-writes (only one thread runs at a time) returning the old value.
// Kernels are launched only through mixtape::cuda::launch_kernel (core/cuda/launch.cuh).
#pragma once
#define __shared__ static
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <functional>

// CUDA's math library declares its classification functions in the global namespace for device
// code; the host's are std:: (and macros in C), so bring them where kernels call them.
using std::isfinite;
using std::isinf;
using std::isnan;

namespace mixtape::cuda_emulator {

struct ThreadCoords {
  uint3 thread_idx, block_idx;
  dim3 block_dim, grid_dim;
};
extern ThreadCoords g_coords;  // the running thread's; set by the engine before it resumes a fiber

void syncthreads();

// Checks the launch configuration as a GPU would (cudaErrorInvalidConfiguration, also recorded
// as the last error), then enqueues the grid on `stream`: when it runs, `body` is called once
// per thread (see the model above). Returns the launch's status.
cudaError_t run_grid(const char* kernel, dim3 grid, dim3 block, size_t dynamic_shared, cudaStream_t stream,
                     std::function<void()> body);

template <typename T>
inline T atomic_rmw_add(T* p, T v) {
  T old = *p;
  *p = static_cast<T>(old + v);
  return old;
}
template <typename T>
inline T atomic_rmw_min(T* p, T v) {
  T old = *p;
  if (v < old) *p = v;
  return old;
}

template <typename T>
inline T atomic_rmw_max(T* p, T v) {
  T old = *p;
  if (v > old) *p = v;
  return old;
}

}  // namespace mixtape::cuda_emulator

#define threadIdx (::mixtape::cuda_emulator::g_coords.thread_idx)
#define blockIdx (::mixtape::cuda_emulator::g_coords.block_idx)
#define blockDim (::mixtape::cuda_emulator::g_coords.block_dim)
#define gridDim (::mixtape::cuda_emulator::g_coords.grid_dim)

inline void __syncthreads() { ::mixtape::cuda_emulator::syncthreads(); }
inline float atomicAdd(float* p, float v) { return ::mixtape::cuda_emulator::atomic_rmw_add(p, v); }
inline double atomicAdd(double* p, double v) { return ::mixtape::cuda_emulator::atomic_rmw_add(p, v); }
inline int atomicAdd(int* p, int v) { return ::mixtape::cuda_emulator::atomic_rmw_add(p, v); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return ::mixtape::cuda_emulator::atomic_rmw_add(p, v); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return ::mixtape::cuda_emulator::atomic_rmw_add(p, v);
}
inline int atomicMin(int* p, int v) { return ::mixtape::cuda_emulator::atomic_rmw_min(p, v); }
inline unsigned atomicMax(unsigned* p, unsigned v) { return ::mixtape::cuda_emulator::atomic_rmw_max(p, v); }
inline unsigned long long atomicMin(unsigned long long* p, unsigned long long v) {
  return ::mixtape::cuda_emulator::atomic_rmw_min(p, v);
}
