// core/cuda/graph_philox.cu — the kernel cuda::Graph::replay() launches before the graph when the
// capture drew random numbers: the range it reserved from the default generator into the graph's
// Philox slot ({seed, offset}), which the captured draws read (core/cuda/graph.h).
#include <cstdint>

#include "core/cuda/graph.h"
#include "core/cuda/launch.cuh"

namespace mixtape::cuda {
namespace {

__global__ void write_philox_state_kernel(unsigned long long* slot, unsigned long long seed,
                                          unsigned long long offset) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  slot[0] = seed;
  slot[1] = offset;
}

}  // namespace

namespace detail {
cudaError_t launch_write_philox_state(uint64_t* slot, uint64_t seed, uint64_t offset, cudaStream_t stream) {
  return launch_kernel(write_philox_state_kernel, 1, 1, 0, stream, reinterpret_cast<unsigned long long*>(slot),
                       static_cast<unsigned long long>(seed), static_cast<unsigned long long>(offset));
}
}  // namespace detail

}  // namespace mixtape::cuda
