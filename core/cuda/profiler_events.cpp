// core/cuda/profiler_events.cpp — the profiler's device timer for CUDA kernels: a pair of timed
// events recorded on the kernel's device's current stream around it (core/profiler.h, DeviceTimer).
// Invariant: registering touches no CUDA runtime call (it only stores function pointers); events
// are created at the first profiled CUDA kernel and recycled through a free list per device.
#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/profiler.h"

namespace mixtape::cuda {
namespace {

struct EventPair {
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  int device = 0;
};

std::mutex g_mu;
// Never destroyed: the at-exit table may still read and release pairs.
std::map<int, std::vector<EventPair*>>& free_pairs() {
  static auto* pairs = new std::map<int, std::vector<EventPair*>>;
  return *pairs;
}

void release(void* token) {
  auto* p = static_cast<EventPair*>(token);
  std::lock_guard<std::mutex> lock(g_mu);
  free_pairs()[p->device].push_back(p);
}

void* start_timer(int device) {
  if (device < 0) device = current_device();
  DeviceGuard guard(device);
  EventPair* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto& pairs = free_pairs()[device];
    if (!pairs.empty()) {
      p = pairs.back();
      pairs.pop_back();
    }
  }
  if (!p) {
    p = new EventPair;
    p->device = device;
    const cudaError_t a = cudaEventCreate(&p->start);
    const cudaError_t b = a == cudaSuccess ? cudaEventCreate(&p->stop) : a;
    if (b != cudaSuccess) {
      if (p->start) (void)cudaEventDestroy(p->start);
      delete p;
      MT_CUDA_CHECK(b, "profiler");
    }
  }
  const cudaError_t status = cudaEventRecord(p->start, current_stream(device));
  if (status != cudaSuccess) {
    release(p);
    MT_CUDA_CHECK(status, "profiler");
  }
  return p;
}

void stop_timer(void* token) {
  auto* p = static_cast<EventPair*>(token);
  DeviceGuard guard(p->device);
  MT_CUDA_CHECK(cudaEventRecord(p->stop, current_stream(p->device)), "profiler");
}

double elapsed_ms(void* token, bool wait) {
  auto* p = static_cast<EventPair*>(token);
  if (wait) {
    MT_CUDA_CHECK(cudaEventSynchronize(p->stop), "profiler");
  } else {
    const cudaError_t status = cudaEventQuery(p->stop);
    if (status == cudaErrorNotReady) {
      // Not an error; clear the thread's last-error state only if this query set it.
      if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
      return -1;
    }
    MT_CUDA_CHECK(status, "profiler");
  }
  float ms = 0.f;
  MT_CUDA_CHECK(cudaEventElapsedTime(&ms, p->start, p->stop), "profiler");
  return ms;
}

const bool g_registered = [] {
  profiler::set_device_timer(DeviceType::CUDA, {start_timer, stop_timer, elapsed_ms, release});
  return true;
}();

}  // namespace
}  // namespace mixtape::cuda
