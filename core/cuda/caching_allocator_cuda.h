// core/cuda/caching_allocator_cuda.h — the CUDA device allocator: one CachingAllocator
// (core/caching_allocator.h) per device over cudaMalloc/cudaFree, installed as
// get_allocator(DeviceType::CUDA) by a static initialiser that only stores a pointer; CUDA is
// first touched by the first CUDA allocation (CUDA builds only; C++17-clean).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/allocator.h"

namespace mixtape::cuda::detail {

// Device memory on `device` for the current stream (what Storage and Scratch use).
void* device_alloc(int device, size_t nbytes);
void device_free(void* ptr);
// ptr (a storage's base, from device_alloc) is also used by work on `stream` (cuda::record_stream).
void record_stream(void* ptr, cudaStream_t stream);
void empty_device_caches();
// A CUDA graph's private pool on `device` (cuda::Graph, core/cuda/graph.h): allocations on
// `stream` come from pool `pool` between begin and end; release when the graph is gone.
void begin_graph_pool(int device, uint64_t pool, cudaStream_t stream);
void end_graph_pool(int device);
void release_graph_pool(int device, uint64_t pool);
int64_t graph_pool_reserved_bytes(int device, uint64_t pool);
AllocatorStats device_memory_stats(int device);

}  // namespace mixtape::cuda::detail
