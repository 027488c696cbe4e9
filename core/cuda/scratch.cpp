// core/cuda/scratch.cpp — Scratch: caching-allocator bytes for one scope (rules in scratch.h).
#include "core/cuda/scratch.h"

#include "core/cuda/caching_allocator_cuda.h"
#include "core/cuda/stream.h"
#include "core/cuda_api.h"

namespace mixtape::cuda {

Scratch::Scratch(size_t nbytes, int device) : nbytes_(nbytes) {
  device_ = device < 0 ? current_device() : device;
  check_device(device_, "cuda::Scratch");
  data_ = detail::device_alloc(device_, nbytes);
}

Scratch::~Scratch() { detail::device_free(data_); }

}  // namespace mixtape::cuda
