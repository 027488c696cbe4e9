// core/cuda/deferred_check.cu — commit()'s kernel (core/cuda/deferred_check.h): copies the first
// failing element's bytes next to its position, in stream order after the checking kernel.
#include <cstdint>

#include "core/cuda/deferred_check_kernels.h"
#include "core/cuda/launch.cuh"

namespace mixtape::cuda {
namespace {

__global__ void capture_failed_element_kernel(unsigned long long* slot, const unsigned char* data,
                                              unsigned element_size) {
  if (threadIdx.x != 0 || blockIdx.x != 0 || slot[0] == kNoFailure) return;
  unsigned long long value = 0;
  const unsigned char* e = data + slot[0] * element_size;
  for (unsigned b = 0; b < element_size; ++b) value |= static_cast<unsigned long long>(e[b]) << (8 * b);
  slot[1] = value;  // little-endian bytes, as the host reads them back
}

}  // namespace

cudaError_t launch_capture_failed_element(unsigned long long* slot, const void* data, size_t element_size,
                                          cudaStream_t stream) {
  return launch_kernel(capture_failed_element_kernel, 1, 1, 0, stream, slot, static_cast<const unsigned char*>(data),
                       static_cast<unsigned>(element_size));
}

}  // namespace mixtape::cuda
