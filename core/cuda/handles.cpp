// core/cuda/handles.cpp — per-thread, per-device cuBLAS/cuDNN handles and per-device cuBLASLt
// handles and workspaces (rules in handles.h).
// Invariant: a handle is used by one host thread at a time (cuBLAS and cuDNN handles are not
// safe to share across threads issuing work on different streams); the pools are leaked on
// purpose so a thread exiting during process teardown can still return its handles.
#include "core/cuda/handles.h"

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
// by two streams at once). 32 MiB is what cuBLAS recommends for Hopper. cuBLAS itself keeps its
// default per-stream workspace: cublasSetStream resets any workspace set on the handle.
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

}  // namespace

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
  MT_CUBLAS_CHECK(cublasSetStream(it->second, current_stream(device)), "cuda::cublas_handle");
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
