// core/cuda/caching_allocator_cuda.cpp — the CUDA allocator (see caching_allocator_cuda.h).
// Invariants: nothing here calls CUDA during static initialisation; per-device caching
// allocators are made on first use and never destroyed (tensors may be freed during process
// exit, after static destructors would have run); cudaMalloc's out-of-memory becomes the
// backend's nullptr, so the caching allocator frees its cache and retries before reporting.
#include "core/cuda/caching_allocator_cuda.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/caching_allocator.h"
#include "core/cuda/check.h"
#include "core/cuda/graph.h"
#include "core/cuda/stream.h"
#include "core/cuda_api.h"
#include "core/tensor.h"

namespace mixtape::cuda::detail {
namespace {

RawBackend cuda_backend(int device) {
  RawBackend b;
  b.alloc = [device](size_t n) -> void* {
    DeviceGuard guard(device);
    void* p = nullptr;
    // A graph's pool grows during its capture: cudaMalloc is not captured (the memory outlives the
    // capture, as the pool's blocks must), so this thread makes it in relaxed mode, as PyTorch does.
    const bool relax = detail::thread_capture() != nullptr;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    if (relax) MT_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode), "cuda allocator");
    cudaError_t status = cudaMalloc(&p, n);
    if (relax) MT_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode), "cuda allocator");
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: clear it, the caller retries or reports
      return nullptr;
    }
    MT_CUDA_CHECK(status, "cuda allocator");
    return p;
  };
  b.free = [device](void* p) {
    DeviceGuard guard(device);
    MT_CUDA_CHECK(cudaFree(p), "cuda allocator");
  };
  // record_stream's events: timing off (the cheapest kind), on this device.
  b.record_event = [device](uintptr_t stream) -> void* {
    DeviceGuard guard(device);
    cudaEvent_t e = nullptr;
    MT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cuda allocator");
    const cudaError_t status = cudaEventRecord(e, reinterpret_cast<cudaStream_t>(stream));
    if (status != cudaSuccess) (void)cudaEventDestroy(e);
    MT_CUDA_CHECK(status, "cuda allocator");
    return e;
  };
  b.event_done = [](void* e) {
    const cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(e));
    if (status == cudaErrorNotReady) {
      if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
      return false;
    }
    MT_CUDA_CHECK(status, "cuda allocator");
    return true;
  };
  b.wait_event = [](void* e) { MT_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(e)), "cuda allocator"); };
  b.destroy_event = [](void* e) { (void)cudaEventDestroy(static_cast<cudaEvent_t>(e)); };
  return b;
}

// The per-device allocators, made on first use; leaked on purpose (see the file comment).
struct Devices {
  std::once_flag once;
  std::atomic<bool> ready{false};  // per_device is filled and never changes again
  std::vector<CachingAllocator*> per_device;
};
Devices& devices() {
  static Devices* d = new Devices;
  return *d;
}
CachingAllocator& for_device(int device) {
  check_device(device, "cuda allocator");
  Devices& d = devices();
  std::call_once(d.once, [&d] {
    int n = device_count();
    for (int i = 0; i < n; ++i)
      d.per_device.push_back(new CachingAllocator(cuda_backend(i), "cuda:" + std::to_string(i)));
    d.ready.store(true, std::memory_order_release);
  });
  return *d.per_device[static_cast<size_t>(device)];
}
bool made() { return devices().ready.load(std::memory_order_acquire); }

class CudaAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override { return allocate_on(Device::CUDA(current_device()), nbytes); }
  void* allocate_on(Device device, size_t nbytes) override {
    MT_CHECK(device.is_cuda(), "cuda allocator: asked for memory on ", device);
    return device_alloc(device.index(), nbytes);
  }
  void deallocate(void* ptr, size_t) override { device_free(ptr); }
  AllocatorStats stats() const override {
    AllocatorStats total;
    if (!made()) return total;
    for (CachingAllocator* a : devices().per_device) {
      AllocatorStats s = a->stats();
      total.current_bytes += s.current_bytes;
      total.peak_bytes += s.peak_bytes;  // sum of per-device peaks (each device's own is in cuda::memory_stats)
      total.allocation_count += s.allocation_count;
      total.reserved_bytes += s.reserved_bytes;
    }
    return total;
  }
  void reset_peak() override {
    if (!made()) return;
    for (CachingAllocator* a : devices().per_device) a->reset_peak();
  }
  Device device() const override { return Device::CUDA(0); }
};

// Installs the allocator: stores a pointer, touches no CUDA API.
const bool kInstalled = [] {
  static CudaAllocator* allocator = new CudaAllocator;
  set_allocator(DeviceType::CUDA, allocator);
  return true;
}();

}  // namespace

void* device_alloc(int device, size_t nbytes) {
  CachingAllocator& a = for_device(device);
  if (nbytes == 0) return nullptr;
  cudaStream_t stream = current_stream(device);
  if (const ThreadCapture* c = thread_capture()) {
    // The graph's pool serves only its own stream: memory from anywhere else could be reused
    // by other work while the graph still writes it at each replay.
    if (device != c->device || stream != c->stream)
      fail_capture("cuda allocator: allocation of " + std::to_string(nbytes) + " bytes on cuda:" +
                   std::to_string(device) + (device == c->device ? " on a stream other than the capture's" : "") +
                   " during CUDA graph capture on cuda:" + std::to_string(c->device) +
                   ": outside the graph's private pool, which cannot be captured (allocate on the capture stream, "
                   "or before capture_begin())");
  }
  return a.allocate(nbytes, reinterpret_cast<CachingAllocator::StreamId>(stream));
}

void device_free(void* ptr) {
  if (!ptr || !made()) return;
  for (CachingAllocator* a : devices().per_device) {
    if (a->owns(ptr)) {
      a->deallocate(ptr);
      return;
    }
  }
}

void record_stream(void* ptr, cudaStream_t stream) {
  if (!ptr || !made()) return;
  for (CachingAllocator* a : devices().per_device) {
    if (a->owns(ptr)) {
      a->record_stream(ptr, reinterpret_cast<CachingAllocator::StreamId>(stream));
      return;
    }
  }
  MT_ERROR("cuda::record_stream: the tensor's memory does not come from mixtape's CUDA allocator");
}

void empty_device_caches() {
  if (!made()) return;
  for (CachingAllocator* a : devices().per_device) a->empty_cache();
}

void begin_graph_pool(int device, uint64_t pool, cudaStream_t stream) {
  for_device(device).begin_capture(pool, reinterpret_cast<CachingAllocator::StreamId>(stream));
}
void end_graph_pool(int device) { for_device(device).end_capture(); }
void release_graph_pool(int device, uint64_t pool) { for_device(device).release_pool(pool); }
int64_t graph_pool_reserved_bytes(int device, uint64_t pool) { return for_device(device).pool_reserved_bytes(pool); }

AllocatorStats device_memory_stats(int device) {
  if (!made()) return {};
  return for_device(device).stats();
}

}  // namespace mixtape::cuda::detail

namespace mixtape::cuda {
void record_stream(const Tensor& t, cudaStream_t stream) {
  MT_CHECK(t.defined() && t.device().is_cuda(), "cuda::record_stream: expected a CUDA tensor, got ",
           t.defined() ? t.describe() : std::string("an undefined tensor"));
  // Its free-time events would be recorded and queried inside the capture.
  check_not_capturing("cuda::record_stream", "declares another stream's use of a tensor");
  detail::record_stream(t.storage()->data(), stream);
}
}  // namespace mixtape::cuda
