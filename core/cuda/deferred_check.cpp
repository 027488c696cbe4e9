// core/cuda/deferred_check.cpp — pending device-side checks per device (core/cuda/deferred_check.h).
#include "core/cuda/deferred_check.h"

#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/graph.h"
#include "core/cuda/stream.h"

namespace mixtape::cuda {
namespace {

struct Pending {
  const char* op;
  cudaEvent_t done;  // recorded after the capture kernel: the slot is final once it completes
  Tensor slot;       // kept alive until read
  DescribeFailure describe;
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

// Per device, a stream of the checks' own for reading slots: it never holds anyone's work, so a
// read waits for nothing else (a plain cudaMemcpy would wait for the legacy stream).
cudaStream_t read_stream(int device) {
  static std::mutex mu;
  static std::unordered_map<int, cudaStream_t> streams;  // never destroyed, like the device
  std::lock_guard<std::mutex> lock(mu);
  auto it = streams.find(device);
  if (it == streams.end()) it = streams.emplace(device, create_stream()).first;
  return it->second;
}

size_t pending_on(int device) {
  std::lock_guard<std::mutex> lock(registry().mu);
  return registry().by_device[device].size();
}

}  // namespace

DeferredCheck::DeferredCheck(const char* op, DescribeFailure describe) : op_(op), describe_(std::move(describe)) {
  const int device = current_device();
  slot_ = Tensor::empty({2}, TensorOptions(DType::Int64).with_device(Device::CUDA(device)));
  // All bits set is kNoFailure; in stream order before the kernel that may lower it.
  MT_CUDA_CHECK(cudaMemsetAsync(slot_.data_ptr(), 0xFF, sizeof(kNoFailure), current_stream(device)), op_);
}

namespace {
// A program that never synchronises: bound the list by waiting for what is pending.
void bound_pending(int device, const char* op) {
  if (pending_on(device) < static_cast<size_t>(kMaxPendingChecks)) return;
  MT_CUDA_CHECK(cudaDeviceSynchronize(), op);
  run_deferred_checks(device);
}
// `slot` is final once the work enqueued on `stream` so far has run.
void make_pending(const char* op, const Tensor& slot, const DescribeFailure& describe, int device,
                  cudaStream_t stream) {
  cudaEvent_t done = nullptr;
  MT_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), op);
  const cudaError_t status = cudaEventRecord(done, stream);
  if (status != cudaSuccess) (void)cudaEventDestroy(done);
  MT_CUDA_CHECK(status, op);
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().by_device[device].push_back(Pending{op, done, slot, describe});
}
}  // namespace

void DeferredCheck::commit(const void* data, size_t element_size) {
  const int device = current_device();
  cudaStream_t stream = current_stream(device);
  if (is_capturing()) {  // each replay makes it pending (see the header); no event in the graph
    MT_CUDA_CHECK(launch_capture_failed_element(slot(), data, element_size, stream), op_);
    detail::add_captured_check(CapturedCheck{op_, slot_, describe_});
    return;
  }
  bound_pending(device, op_);
  MT_CUDA_CHECK(launch_capture_failed_element(slot(), data, element_size, stream), op_);
  make_pending(op_, slot_, describe_, device, stream);
}

void detail::replay_captured_checks(const std::vector<CapturedCheck>& checks, int device, cudaStream_t stream) {
  for (const CapturedCheck& c : checks) {
    bound_pending(device, c.op);
    // The snapshot comes from the ordinary cache on the replay's stream: in stream order after
    // the replay, before the next one rewrites the slot.
    Tensor snapshot = Tensor::empty({2}, TensorOptions(DType::Int64).with_device(Device::CUDA(device)));
    MT_CUDA_CHECK(cudaMemcpyAsync(snapshot.data_ptr(), c.slot.data_ptr(), 2 * sizeof(uint64_t),
                                  cudaMemcpyDeviceToDevice, stream),
                  c.op);
    make_pending(c.op, snapshot, c.describe, device, stream);
  }
}

void run_deferred_checks(int device) {
  if (t_running) return;
  // Take the checks whose work is done; the others stay for a later synchronisation.
  std::vector<Pending> ready;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    auto it = registry().by_device.find(device);
    if (it == registry().by_device.end()) return;
    std::vector<Pending> later;
    for (Pending& c : it->second) (cudaEventQuery(c.done) == cudaSuccess ? ready : later).push_back(std::move(c));
    it->second.swap(later);
  }
  if (ready.empty()) return;
  t_running = true;
  struct Reset {
    ~Reset() { t_running = false; }
  } reset;
  DeviceGuard guard(device);
  std::string failure;
  for (const Pending& c : ready) {
    unsigned long long words[2] = {kNoFailure, 0};
    // The work is complete (its event is): read the final slot on the checks' own stream.
    cudaStream_t s = read_stream(device);
    cudaError_t status = cudaMemcpyAsync(words, c.slot.data_ptr(), sizeof words, cudaMemcpyDeviceToHost, s);
    if (status == cudaSuccess) status = cudaStreamSynchronize(s);
    cudaEventDestroy(c.done);
    MT_CUDA_CHECK(status, c.op);
    if (words[0] != kNoFailure && failure.empty())
      failure = std::string(c.op) + ": " + c.describe(words[0], words[1]) +
                " (found on the device, reported at the next synchronisation)";
  }
  MT_CHECK(failure.empty(), failure);
}

}  // namespace mixtape::cuda
