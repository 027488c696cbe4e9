// core/cuda/deferred_check.cpp — pending device-side checks per device (core/cuda/deferred_check.h).
#include "core/cuda/deferred_check.h"

#include <cuda_runtime_api.h>

#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/tensor.h"

namespace mixtape::cuda {
namespace {

struct Pending {
  const char* op;
  cudaStream_t stream;
  Tensor slot;  // one UInt64-sized device buffer, kept alive until read
  std::function<std::string(uint64_t)> describe;
};

struct Registry {
  std::mutex mu;
  std::unordered_map<int, std::vector<Pending>> by_device;
};
Registry& registry() {
  static auto* r = new Registry;  // leaked: may be used while other statics are destroyed
  return *r;
}

thread_local bool t_running = false;

}  // namespace

unsigned long long* defer_check(const char* op, std::function<std::string(uint64_t)> describe) {
  const int device = current_device();
  size_t pending = 0;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    pending = registry().by_device[device].size();
  }
  if (pending >= static_cast<size_t>(kMaxPendingChecks)) run_deferred_checks(device);
  Tensor slot = Tensor::empty({1}, TensorOptions(DType::Int64).with_device(Device::CUDA(device)));
  cudaStream_t stream = current_stream(device);
  // All bits set is kNoFailure; in stream order before the kernel that may lower it.
  MT_CUDA_CHECK(cudaMemsetAsync(slot.data_ptr(), 0xFF, sizeof(kNoFailure), stream), op);
  auto* p = static_cast<unsigned long long*>(slot.data_ptr());
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().by_device[device].push_back(Pending{op, stream, std::move(slot), std::move(describe)});
  return p;
}

void release_stream_checks(cudaStream_t stream) noexcept {
  std::lock_guard<std::mutex> lock(registry().mu);
  for (auto& [device, checks] : registry().by_device)
    for (Pending& c : checks)
      if (c.stream == stream) c.stream = nullptr;
}

void run_deferred_checks(int device) {
  if (t_running) return;
  std::vector<Pending> checks;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    auto it = registry().by_device.find(device);
    if (it == registry().by_device.end() || it->second.empty()) return;
    checks.swap(it->second);
  }
  t_running = true;
  struct Reset {
    ~Reset() { t_running = false; }
  } reset;
  DeviceGuard guard(device);
  std::string failure;
  for (const Pending& c : checks) {
    unsigned long long first = kNoFailure;
    MT_CUDA_CHECK(cudaMemcpyAsync(&first, c.slot.data_ptr(), sizeof first, cudaMemcpyDeviceToHost, c.stream), c.op);
    MT_CUDA_CHECK(cudaStreamSynchronize(c.stream), c.op);
    if (first != kNoFailure && failure.empty())
      failure = std::string(c.op) + ": " + c.describe(first) +
                " (found on the device, reported at the next synchronisation)";
  }
  MT_CHECK(failure.empty(), failure);
}

}  // namespace mixtape::cuda
