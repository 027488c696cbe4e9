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
//     event or a cuBLAS/cuDNN handle, drawing random numbers other than dropout's (rand, randn, a
//     Generator of one's own), timing cuDNN algorithms. A
//     deferred device-side input check (nll_loss) is captured: each replay's inputs are checked
//     and reported at the next synchronisation (core/cuda/deferred_check.h). A refusal CUDA itself
//     reports names the op and says the capture is invalidated. Either way capture_end() then
//     throws and the Graph holds nothing; the destructor or reset() also ends a broken capture.
//   - Dropout is captured (PyTorch's graph-safe Philox): the default generator's state at
//     capture_begin is the graph's base, captured draws read the seed and the base offset from a
//     16-byte device slot of the graph and add their offset within the capture; capture_end puts
//     the generator back where capture_begin found it (nothing ran), and each replay() reserves
//     the capture's total blocks from it and writes that range to the slot first. Eager and
//     graphed runs thus draw the same masks in the same order.
//   - Replays run on the current stream. Tensors the graph reads must stay alive (and at the same
//     addresses) while it can replay; new inputs are copied into them before replay().
//   - Work captured into a graph that a host-side party must hear about at each replay (NCCL
//     collectives: their watchdog) registers a replay hook during the capture
//     (detail::add_replay_hook): replay() runs each hook's `before` ahead of the launch (it may
//     throw: then nothing is launched) and its `after`, with the launch stream, behind it.
//   - reset() waits for the device, then frees the graph and gives its pool back.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mixtape::cuda {

struct CapturedCheck;  // core/cuda/deferred_check.h
class Graph;
namespace detail {
// A deferred check committed during this thread's capture joins its graph (deferred_check.cpp).
void add_captured_check(CapturedCheck check);
// What a graph runs around each replay for work captured into it (NCCL's watchdog):
// `before()` ahead of cudaGraphLaunch, `after(stream)` behind it; either may be empty.
struct ReplayHook {
  std::function<void()> before;
  std::function<void(cudaStream_t)> after;
};
// Adds a hook to the graph this thread is capturing (refused outside a capture).
void add_replay_hook(ReplayHook hook);
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
  void end_capture_state();  // restores the stream, the allocator and the generator after a capture, ok or not
  friend void detail::add_captured_check(CapturedCheck check);
  friend void detail::add_replay_hook(detail::ReplayHook hook);
  friend struct CapturedPhilox captured_philox(const char* op, uint64_t seed, uint64_t offset);

  int device_ = -1;
  uint64_t pool_ = 0;
  bool capturing_ = false;
  cudaStream_t capture_stream_ = nullptr;
  cudaStream_t previous_stream_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  std::vector<CapturedCheck> checks_;  // deferred checks each replay makes pending
  std::vector<detail::ReplayHook> hooks_;  // run around each replay (add_replay_hook)
  // Random draws (dropout): device slot {seed, base offset}, the generator's state at
  // capture_begin, and the Philox blocks the capture reserved (each replay reserves as many).
  uint64_t* philox_slot_ = nullptr;
  uint64_t philox_seed_ = 0, philox_base_ = 0, philox_blocks_ = 0;
};

// A random draw during this thread's capture (dropout's kernel): the seed and the base offset are
// read on the device from `state` ({seed, offset}, written before each replay), and the draw's
// own offset is base + `offset_in_graph`. Refused (naming `op`) when `seed` is not the default
// generator's seed at capture_begin (a Generator of one's own, or a reseed during capture).
struct CapturedPhilox {
  const uint64_t* state;
  uint64_t offset_in_graph;
};
CapturedPhilox captured_philox(const char* op, uint64_t seed, uint64_t offset);

// Whether this host thread is capturing a Graph (on any device).
bool is_capturing();
// Throws "<op>: <what> during CUDA graph capture ..." when this thread is capturing.
void check_not_capturing(const char* op, const char* what);

namespace detail {
// This thread's capture, for the allocator: device, stream and private pool (nullptr: none).
// `pool` is unique per capture (a new one at every capture_begin): it identifies the capture.
struct ThreadCapture {
  int device;
  cudaStream_t stream;
  uint64_t pool;
  Graph* graph;
};
const ThreadCapture* thread_capture();
// Throws `message` as a mixtape::Error, and makes this thread's capture fail at capture_end.
[[noreturn]] void fail_capture(const std::string& message);
// Writes {seed, offset} to a graph's Philox slot in stream order (core/cuda/graph_philox.cu).
cudaError_t launch_write_philox_state(uint64_t* slot, uint64_t seed, uint64_t offset, cudaStream_t stream);
}  // namespace detail

}  // namespace mixtape::cuda
