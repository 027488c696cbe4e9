// core/cuda/handles.cpp — per-thread, per-device cuBLAS/cuDNN handles, per-device cuBLASLt
// handles and workspaces, and the cuBLAS workspace per (device, stream) (rules in handles.h).
// Invariant: a handle is used by one host thread at a time (cuBLAS and cuDNN handles are not
// safe to share across threads issuing work on different streams); a cuBLAS handle returned by
// cublas_handle() runs on the current stream with that stream's own workspace; the pools are
// leaked on purpose so a thread exiting during process teardown can still return its handles.
#include "core/cuda/handles.h"

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/graph.h"
#include "core/cuda/scratch.h"
#include "core/cuda/stream.h"
#include "core/cuda_api.h"

namespace mixtape::cuda {
namespace {

template <typename H>
struct Pool {
  std::mutex mu;
  std::unordered_map<int, std::vector<H>> spare;  // device -> handles no thread holds

  bool take(int device, H* out) {
    std::lock_guard<std::mutex> lock(mu);
    auto& v = spare[device];
    if (v.empty()) return false;
    *out = v.back();
    v.pop_back();
    return true;
  }
  void give_back(int device, H h) {
    std::lock_guard<std::mutex> lock(mu);
    spare[device].push_back(h);
  }
};
Pool<cublasHandle_t>& cublas_pool() {
  static auto* p = new Pool<cublasHandle_t>;
  return *p;
}
Pool<cudnnHandle_t>& cudnn_pool() {
  static auto* p = new Pool<cudnnHandle_t>;
  return *p;
}

// This thread's handles; returned to the pools when the thread exits.
struct ThreadHandles {
  std::unordered_map<int, cublasHandle_t> cublas;
  std::unordered_map<int, cudnnHandle_t> cudnn;
  std::unordered_map<int, Scratch*> workspace;
  ~ThreadHandles() {
    for (auto& [d, h] : cublas) cublas_pool().give_back(d, h);
    for (auto& [d, h] : cudnn) cudnn_pool().give_back(d, h);
    // Back to the caching allocator's cache: bookkeeping only, no CUDA call, so safe at exit.
    for (auto& [d, w] : workspace) delete w;
  }
};
ThreadHandles& thread_handles() {
  thread_local ThreadHandles h;
  return h;
}

// The cuBLASLt workspace, per thread and device like the handles (a workspace must not be used
// by two streams at once). 32 MiB is what cuBLAS recommends for Hopper.
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

// cuBLAS workspaces by (device, stream), shared by the threads' handles: work on one stream runs
// in order, so handles taking turns on a stream never use its workspace at the same time.
struct StreamWorkspaces {
  std::mutex mu;
  std::map<std::pair<int, cudaStream_t>, std::unique_ptr<Scratch>> by_stream;
};
StreamWorkspaces& stream_workspaces() {
  static auto* w = new StreamWorkspaces;  // leaked, like the handle pools
  return *w;
}

// The workspace of (device, stream), made at its first use; `stream` is the current stream.
Scratch& stream_workspace(int device, cudaStream_t stream) {
  StreamWorkspaces& w = stream_workspaces();
  std::lock_guard<std::mutex> lock(w.mu);
  auto& slot = w.by_stream[{device, stream}];
  if (!slot) {
    // A capture must not allocate outside its pool, and a workspace from the pool would be
    // released with the graph while the stream lives on.
    check_not_capturing("cuda::cublas_handle", "allocates the cuBLAS workspace of a stream that has not made a "
                        "cuBLAS call yet (make one on that stream before capturing; cuda::Graph::capture_begin() "
                        "makes its capture stream's)");
    slot = std::make_unique<Scratch>(cublas_stream_workspace_bytes(device), device);  // on `stream`
  }
  return *slot;
}

}  // namespace

size_t cublas_stream_workspace_bytes(int device) {
  static std::mutex mu;
  static auto* sizes = new std::map<int, size_t>;
  std::lock_guard<std::mutex> lock(mu);
  auto it = sizes->find(device);
  if (it == sizes->end()) {
    int major = 0;
    MT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
                  "cuda::cublas_stream_workspace_bytes");
    it = sizes->emplace(device, major >= 9 ? size_t(32) << 20 : size_t(4) << 20).first;
  }
  return it->second;
}

void release_cublas_workspace(cudaStream_t stream, int device) noexcept {
  try {
    std::vector<std::unique_ptr<Scratch>> gone;  // freed after the lock
    StreamWorkspaces& w = stream_workspaces();
    std::lock_guard<std::mutex> lock(w.mu);
    for (auto it = w.by_stream.begin(); it != w.by_stream.end();) {
      if (it->first.second == stream && (device < 0 || it->first.first == device)) {
        gone.push_back(std::move(it->second));
        it = w.by_stream.erase(it);
      } else {
        ++it;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mixtape: cuda::release_cublas_workspace: %s\n", e.what());
  }
}

cublasHandle_t cublas_handle() {
  int device = current_device();
  auto& mine = thread_handles().cublas;
  auto it = mine.find(device);
  if (it == mine.end()) {
    cublasHandle_t h = nullptr;
    check_not_capturing("cuda::cublas_handle", "creates this thread's cuBLAS handle");
    if (!cublas_pool().take(device, &h)) MT_CUBLAS_CHECK(cublasCreate(&h), "cuda::cublas_handle");
    it = mine.emplace(device, h).first;
  }
  const cudaStream_t stream = current_stream(device);
  MT_CUBLAS_CHECK(cublasSetStream(it->second, stream), "cuda::cublas_handle");
  // cublasSetStream put the handle back on cuBLAS's default workspace pool: this stream's own.
  Scratch& ws = stream_workspace(device, stream);
  MT_CUBLAS_CHECK(cublasSetWorkspace(it->second, ws.data(), ws.size()), "cuda::cublas_handle");
  return it->second;
}

cudnnHandle_t cudnn_handle() {
  int device = current_device();
  auto& mine = thread_handles().cudnn;
  auto it = mine.find(device);
  if (it == mine.end()) {
    cudnnHandle_t h = nullptr;
    check_not_capturing("cuda::cudnn_handle", "creates this thread's cuDNN handle");
    if (!cudnn_pool().take(device, &h)) MT_CUDNN_CHECK(cudnnCreate(&h), "cuda::cudnn_handle");
    it = mine.emplace(device, h).first;
  }
  MT_CUDNN_CHECK(cudnnSetStream(it->second, current_stream(device)), "cuda::cudnn_handle");
  return it->second;
}

cublasLtHandle_t cublaslt_handle() {
  int device = current_device();
  static std::mutex mu;
  static auto* handles = new std::unordered_map<int, cublasLtHandle_t>;
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles->find(device);
  if (it == handles->end()) {
    cublasLtHandle_t h = nullptr;
    check_not_capturing("cuda::cublaslt_handle", "creates the device's cuBLASLt handle");
    MT_CUBLAS_CHECK(cublasLtCreate(&h), "cuda::cublaslt_handle");
    it = handles->emplace(device, h).first;
  }
  return it->second;
}

void* cublas_workspace(size_t* nbytes) {
  int device = current_device();
  auto& mine = thread_handles().workspace;
  auto it = mine.find(device);
  if (it == mine.end()) {
    // Kept for the thread's life: it must not come from (and pin) a graph's pool.
    check_not_capturing("cuda::cublas_workspace", "allocates this thread's cuBLASLt workspace");
    it = mine.emplace(device, new Scratch(kWorkspaceBytes, device)).first;
  }
  if (nbytes) *nbytes = it->second->size();
  return it->second->data();
}

}  // namespace mixtape::cuda
