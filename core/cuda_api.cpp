// core/cuda_api.cpp — the answers of core/cuda_api.h: the real ones in a CUDA build, the
// "built without CUDA" stub otherwise (the candle dummy-backend idea: the CPU-only build is
// first-class and says clearly what it cannot do).
// Invariant: the device count is probed once, lazily, with the count initialised to 0, because
// on a machine without a driver cudaGetDeviceCount fails (cudaErrorInsufficientDriver, or
// cudaErrorStubLibrary with the stub on the path) and leaves its output untouched.
#include "core/cuda_api.h"

#include <atomic>
#include <mutex>

#include "core/error.h"

#if defined(MIXTAPE_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "core/cuda/caching_allocator_cuda.h"
#include "core/cuda/check.h"
#include "core/cuda/deferred_check.h"
#include "core/cuda/graph.h"
#include "core/cuda/stream.h"
#endif

namespace mixtape::cuda {

namespace {
std::atomic<bool> g_cudnn_deterministic{true};
std::atomic<bool> g_cudnn_benchmark{false};
}  // namespace
void set_cudnn_deterministic(bool on) { g_cudnn_deterministic.store(on); }
bool cudnn_deterministic() { return g_cudnn_deterministic.load(); }
void set_cudnn_benchmark(bool on) { g_cudnn_benchmark.store(on); }
bool cudnn_benchmark() { return g_cudnn_benchmark.load(); }

#if defined(MIXTAPE_WITH_CUDA)
namespace {
struct Probe {
  int count = 0;
  std::string reason;
};
const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    int n = 0;
    cudaError_t status = cudaGetDeviceCount(&n);
    if (status == cudaSuccess && n > 0) {
      r.count = n;
    } else if (status == cudaSuccess || status == cudaErrorNoDevice) {
      r.reason = "no CUDA device";
    } else {
      r.reason = std::string("no CUDA driver (cudaGetDeviceCount: ") + cudaGetErrorName(status) + ": " +
                 cudaGetErrorString(status) + ")";
    }
    // The failure is sticky in some runtimes; clear what can be cleared so a later unrelated
    // cudaGetLastError() does not report it.
    (void)cudaGetLastError();
    return r;
  }();
  return p;
}
}  // namespace

bool built_with_cuda() { return true; }
int device_count() { return probe().count; }
bool is_available() { return probe().count > 0; }
std::string unavailable_reason() { return probe().reason; }

void synchronize(int device) {
  if (!is_available()) return;
  check_not_capturing("cuda::synchronize", "waits for the device (a synchronisation)");
  const int d = device < 0 ? current_device() : device;  // -1: the current device
  DeviceGuard guard(d);
  MT_CUDA_CHECK(cudaDeviceSynchronize(), "cuda::synchronize");
  run_deferred_checks(d);
}

void empty_cache() {
  if (!is_available()) return;
  detail::empty_device_caches();
}

AllocatorStats memory_stats(int device) {
  if (!is_available()) return {};
  check_device(device, "cuda::memory_stats");
  return detail::device_memory_stats(device);
}

#else  // built without CUDA

bool built_with_cuda() { return false; }
int device_count() { return 0; }
bool is_available() { return false; }
std::string unavailable_reason() { return "built without CUDA"; }
void synchronize(int) {}
void empty_cache() {}
AllocatorStats memory_stats(int) { return {}; }

#endif

void check_available(const char* op) {
  MT_CHECK(is_available(), op, ": CUDA is not available: ", unavailable_reason());
}

void check_device(int index, const char* op) {
  check_available(op);
  int n = device_count();
  MT_CHECK(index >= 0 && index < n, op, ": cuda:", index, " does not exist (", n, " CUDA device",
           n == 1 ? "" : "s", ")");
}

}  // namespace mixtape::cuda
