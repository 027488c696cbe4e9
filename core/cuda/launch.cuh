// core/cuda/launch.cuh — the one way mixtape launches a kernel:
//   return launch_kernel(my_kernel<T>, grid, block, /*shared bytes*/ 0, stream, args...);
// enqueues my_kernel<<<grid, block, 0, stream>>>(args...) and returns the launch's status
// (cudaGetLastError), which the .cpp glue checks with MT_CUDA_CHECK naming the op.
// Why one door: the MIXTAPE_CUDA=EMULATOR build compiles .cu files as host C++, where <<<>>> does
// not exist; there the same call runs the grid on the CPU (tests/cuda_emulator/device.h), so the
// kernels every test launches are the ones a GPU would run.
// Arguments are converted to the kernel's parameter types and copied, as a launch copies them.
// Included by .cu files only (C++17).
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

namespace mixtape::profiler {
void count_launch();  // core/profiler.h, which .cu files (C++17) cannot include
}  // namespace mixtape::profiler

namespace mixtape::cuda {

template <typename... P, typename... A>
cudaError_t launch_kernel(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                          A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "launch_kernel: argument count differs from the kernel's");
  ::mixtape::profiler::count_launch();  // MIXTAPE_PROFILE's launches per op and per step
#if defined(MIXTAPE_CUDA_EMULATOR)
  // The emulator may run the grid later (stream order), so the arguments are kept alive with it.
  auto params = std::make_shared<std::tuple<std::decay_t<P>...>>(std::forward<A>(args)...);
  return ::mixtape::cuda_emulator::run_grid(__PRETTY_FUNCTION__, grid, block, shared_bytes, stream,
                                            [kernel, params] { std::apply(kernel, *params); });
#else
  kernel<<<grid, block, shared_bytes, stream>>>(std::forward<A>(args)...);
  return cudaGetLastError();
#endif
}

}  // namespace mixtape::cuda
