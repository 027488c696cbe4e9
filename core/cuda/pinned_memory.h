// core/cuda/pinned_memory.h — page-locked ("pinned") host memory as CPU tensors (CUDA builds only;
// PyTorch's Tensor.pin_memory() / is_pinned()).
// Why: a copy from pageable memory is staged by the driver through a pinned buffer of its own and
// is synchronous with respect to the host; a copy from pinned memory is a DMA the device runs in
// stream order, so it can overlap kernels (on a copy stream) and the host goes on at once. The
// price: the host must not rewrite the memory until the copy has run (an Event says when), and
// page-locking is slow to allocate and takes RAM from the system. So these are buffers to keep
// and reuse (data::DevicePrefetcher's staging slots), not to allocate per batch; there is no
// caching host allocator.
// Invariant: a pinned tensor is an ordinary contiguous CPU tensor whose storage came from
// cudaHostAlloc and goes back with cudaFreeHost when its last user lets go.
#pragma once
#include "core/tensor.h"

namespace mixtape::cuda {

// A fresh, uninitialised, contiguous CPU tensor in pinned memory (cudaHostAlloc, portable: any
// device may copy from it). Refused during CUDA graph capture (cudaHostAlloc cannot be captured).
Tensor empty_pinned(const IntList& sizes, DType dtype);
// A pinned copy of CPU tensor `t` (contiguous, same values); `t` itself when it is pinned already.
// A CUDA tensor is refused, naming its device.
Tensor pin_memory(const Tensor& t);
// Whether t's memory is page-locked host memory (cudaPointerGetAttributes). False for an undefined
// or empty tensor, a CUDA tensor and ordinary CPU memory.
bool is_pinned(const Tensor& t);

}  // namespace mixtape::cuda
