// core/cuda/profiler_events.cpp — the profiler's device timer for CUDA kernels: a pair of timed
// events recorded on the current stream around the kernel (core/profiler.h, DeviceTimer).
// Invariant: registering touches no CUDA runtime call (it only stores function pointers); events
// are created at the first profiled CUDA kernel and recycled through a free list per device.
#include <cuda_runtime_api.h>

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
std::vector<EventPair*>& free_pairs() {
  static auto* pairs = new std::vector<EventPair*>;  // never destroyed: read by the at-exit table
  return *pairs;
}

void* start_timer() {
  const int device = current_device();
  EventPair* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto& pairs = free_pairs();
    for (size_t i = 0; i < pairs.size(); ++i) {
      if (pairs[i]->device != device) continue;
      p = pairs[i];
      pairs.erase(pairs.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  }
  if (!p) {
    p = new EventPair;
    p->device = device;
    MT_CUDA_CHECK(cudaEventCreate(&p->start), "profiler");
    MT_CUDA_CHECK(cudaEventCreate(&p->stop), "profiler");
  }
  MT_CUDA_CHECK(cudaEventRecord(p->start, current_stream(device)), "profiler");
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
      (void)cudaGetLastError();  // not an error: clear the thread's last-error state
      return -1;
    }
    MT_CUDA_CHECK(status, "profiler");
  }
  float ms = 0.f;
  MT_CUDA_CHECK(cudaEventElapsedTime(&ms, p->start, p->stop), "profiler");
  return ms;
}

void release(void* token) {
  std::lock_guard<std::mutex> lock(g_mu);
  free_pairs().push_back(static_cast<EventPair*>(token));
}

const bool g_registered = [] {
  profiler::set_device_timer(DeviceType::CUDA, {start_timer, stop_timer, elapsed_ms, release});
  return true;
}();

}  // namespace
}  // namespace mixtape::cuda
