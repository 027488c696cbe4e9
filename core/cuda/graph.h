// core/cuda/graph.h — CUDA graphs (like torch.cuda.CUDAGraph): capture a sequence of mixtape's
// CUDA work once, replay it many times with one launch (CUDA builds only; C++17-clean).
//
//   cuda::Graph g;
//   <run the step once eagerly: warm-up (handles, workspaces, cuDNN algorithm choices)>
//   g.capture_begin();  <the step, on static tensors>  g.capture_end();
//   for (...) { static_input.copy_(next_batch); g.replay(); }   // same addresses every replay
//
// Rules (docs/CUDA.md, "CUDA graphs"):
//   - capture_begin() captures on a stream of the graph's own (the legacy stream cannot capture):
//     it makes that stream current on the current device, ordered after the previous current
//     stream's work, until capture_end() restores the previous one. Capture mode ThreadLocal:
//     this thread's unsafe calls are refused, other threads are left alone.
//   - During capture the CUDA caching allocator serves this thread from the graph's private
//     pool; the pool's blocks stay reserved while the graph lives and every replay reuses them.
//     The pool grows with cudaMalloc in relaxed mode (as PyTorch's does); nothing is freed.
//   - A call that cannot be captured throws "<op>: <what it does> during CUDA graph capture ..."
//     before touching CUDA: a host read of a CUDA tensor, a copy from host memory, a
//     synchronisation, an allocation outside the pool (another stream or device), creating an
//     event or a cuBLAS/cuDNN handle, drawing random numbers, timing cuDNN algorithms. A
//     deferred device-side input check (nll_loss) is captured: each replay's inputs are checked
//     and reported at the next synchronisation (core/cuda/deferred_check.h). A refusal CUDA itself
//     reports names the op and says the capture is invalidated. Either way capture_end() then
//     throws and the Graph holds nothing; the destructor or reset() also ends a broken capture.
//   - Replays run on the current stream. Tensors the graph reads must stay alive (and at the same
//     addresses) while it can replay; new inputs are copied into them before replay().
//   - reset() waits for the device, then frees the graph and gives its pool back.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mixtape::cuda {

struct CapturedCheck;  // core/cuda/deferred_check.h
class Graph;
namespace detail {
// A deferred check committed during this thread's capture joins its graph (deferred_check.cpp).
void add_captured_check(CapturedCheck check);
}  // namespace detail

class Graph {
 public:
  Graph();
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  void capture_begin();
  void capture_end();
  void replay();
  void reset();

  bool captured() const { return exec_ != nullptr; }
  // Bytes the graph's private pool holds from the device (0 before capture and after reset).
  int64_t pool_reserved_bytes() const;

 private:
  void end_capture_state();  // restores the stream and the allocator after a capture, ok or not
  friend void detail::add_captured_check(CapturedCheck check);

  int device_ = -1;
  uint64_t pool_ = 0;
  bool capturing_ = false;
  cudaStream_t capture_stream_ = nullptr;
  cudaStream_t previous_stream_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  std::vector<CapturedCheck> checks_;  // deferred checks each replay makes pending
};

// Whether this host thread is capturing a Graph (on any device).
bool is_capturing();
// Throws "<op>: <what> during CUDA graph capture ..." when this thread is capturing.
void check_not_capturing(const char* op, const char* what);

namespace detail {
// This thread's capture, for the allocator: device, stream and private pool (nullptr: none).
struct ThreadCapture {
  int device;
  cudaStream_t stream;
  uint64_t pool;
  Graph* graph;
};
const ThreadCapture* thread_capture();
// Throws `message` as a mixtape::Error, and makes this thread's capture fail at capture_end.
[[noreturn]] void fail_capture(const std::string& message);
}  // namespace detail

}  // namespace mixtape::cuda
