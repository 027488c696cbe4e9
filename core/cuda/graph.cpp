// core/cuda/graph.cpp — cuda::Graph and this thread's capture state (rules in core/cuda/graph.h).
// Invariant: while Graph::capturing_ is set, this thread's capture state names its device,
// stream and pool, the stream is the current one and the device's allocator serves the pool; every
// way out of a capture (capture_end, reset, the destructor, a failed capture_begin) undoes all
// three together.
#include "core/cuda/graph.h"

#include <atomic>
#include <cstdio>
#include <string>

#include "core/cuda/caching_allocator_cuda.h"
#include "core/cuda/check.h"
#include "core/cuda/deferred_check.h"
#include "core/cuda/handles.h"
#include "core/cuda/stream.h"
#include "core/cuda_api.h"
#include "core/rng.h"

namespace mixtape::cuda {
namespace {
thread_local detail::ThreadCapture t_capture{};
thread_local bool t_capturing = false;
thread_local std::string t_capture_error;  // the first refusal of this capture: capture_end reports it
std::atomic<uint64_t> g_next_pool{1};
}  // namespace

const detail::ThreadCapture* detail::thread_capture() { return t_capturing ? &t_capture : nullptr; }

bool is_capturing() { return t_capturing; }

void detail::fail_capture(const std::string& message) {
  if (t_capture_error.empty()) t_capture_error = message;
  MT_ERROR(message);
}

void check_not_capturing(const char* op, const char* what) {
  if (!t_capturing) return;
  detail::fail_capture(std::string(op) + ": " + what +
                       " during CUDA graph capture, which cannot be captured (do it before capture_begin() or after "
                       "capture_end(); docs/CUDA.md, \"CUDA graphs\")");
}

Graph::Graph() = default;

void detail::add_captured_check(CapturedCheck check) {
  MT_CHECK(t_capturing, "cuda::Graph: a deferred check was added outside a capture");
  t_capture.graph->checks_.push_back(std::move(check));
}

void detail::add_replay_hook(ReplayHook hook) {
  MT_CHECK(t_capturing, "cuda::Graph: a replay hook was added outside a capture");
  t_capture.graph->hooks_.push_back(std::move(hook));
}

Graph::~Graph() {
  try {
    reset();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mixtape: cuda::Graph could not be released: %s\n", e.what());
  }
}

void Graph::capture_begin() {
  MT_CHECK(!capturing_, "cuda::Graph::capture_begin: this graph is capturing already");
  MT_CHECK(!exec_, "cuda::Graph::capture_begin: this graph holds a capture already (reset() it first)");
  // Refused without failing the capture under way: nothing was done.
  MT_CHECK(!t_capturing, "cuda::Graph::capture_begin: this thread is capturing another graph (nested captures are "
           "not supported)");
  const int device = current_device();
  // Warm-up of what is made at first use: a capture may not create handles or allocate a
  // thread's cuBLASLt workspace outside its pool.
  (void)cublas_handle();
  (void)cublaslt_handle();
  (void)cublas_workspace(nullptr);
  (void)cudnn_handle();

  cudaStream_t previous = current_stream(device);
  cudaStream_t stream = create_stream();
  {
    // The capture stream's cuBLAS workspace (handles.h), before the capture: kept until reset().
    StreamGuard on(stream);
    (void)cublas_handle();
  }
  {
    // The captured work is ordered after what was issued before, as on the previous stream.
    Event ready;
    ready.record(previous);
    ready.wait(stream);
  }
  if (!philox_slot_) {
    void* slot = nullptr;
    MT_CUDA_CHECK(cudaMalloc(&slot, 2 * sizeof(uint64_t)), "cuda::Graph::capture_begin");
    philox_slot_ = static_cast<uint64_t*>(slot);
  }
  const uint64_t pool = g_next_pool.fetch_add(1);
  try {
    detail::begin_graph_pool(device, pool, stream);
  } catch (...) {
    release_cublas_workspace(stream, device);
    (void)cudaStreamDestroy(stream);
    (void)cudaFree(philox_slot_);
    philox_slot_ = nullptr;
    throw;
  }
  const cudaError_t status = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (status != cudaSuccess) {
    detail::end_graph_pool(device);
    detail::release_graph_pool(device, pool);
    release_cublas_workspace(stream, device);
    (void)cudaStreamDestroy(stream);
    (void)cudaFree(philox_slot_);
    philox_slot_ = nullptr;
    MT_CUDA_CHECK(status, "cuda::Graph::capture_begin");
  }
  device_ = device;
  pool_ = pool;
  capture_stream_ = stream;
  previous_stream_ = previous;
  capturing_ = true;
  checks_.clear();
  hooks_.clear();
  philox_seed_ = default_generator().seed();
  philox_base_ = default_generator().offset();
  philox_blocks_ = 0;
  t_capture = detail::ThreadCapture{device, stream, pool, this};
  t_capturing = true;
  t_capture_error.clear();
  set_current_stream(stream, device);
}

void Graph::end_capture_state() {
  // Nothing ran during the capture: the generator goes back to where it was, and what the captured
  // draws reserved is what each replay reserves.
  philox_blocks_ = default_generator().offset() - philox_base_;
  default_generator().set_state(philox_seed_, philox_base_);
  set_current_stream(previous_stream_, device_);
  t_capturing = false;
  capturing_ = false;
  detail::end_graph_pool(device_);
}

void Graph::capture_end() {
  MT_CHECK(capturing_, "cuda::Graph::capture_end: capture_begin() was not called (or the capture already ended)");
  DeviceGuard guard(device_);
  cudaGraph_t graph = nullptr;
  const cudaError_t status = cudaStreamEndCapture(capture_stream_, &graph);
  end_capture_state();
  if (status == cudaSuccess && !t_capture_error.empty()) {
    // A refused call threw (before reaching CUDA) and the program went on: the graph would lack
    // that op's work, so it is not kept.
    (void)cudaGraphDestroy(graph);
    const std::string first = std::move(t_capture_error);
    t_capture_error.clear();
    reset();
    MT_ERROR("cuda::Graph::capture_end: the capture was abandoned after a call that cannot be captured; "
             "nothing was captured. The call: ", first);
  }
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    t_capture_error.clear();
    reset();
    MT_CHECK(status != cudaErrorStreamCaptureInvalidated,
             "cuda::Graph::capture_end: the capture was invalidated by a call that cannot be captured (the error "
             "it raised named the op); nothing was captured");
    MT_CUDA_CHECK(status, "cuda::Graph::capture_end");
  }
  graph_ = graph;
  const cudaError_t inst = cudaGraphInstantiate(&exec_, graph_, 0);
  if (inst != cudaSuccess) {
    exec_ = nullptr;
    reset();
    MT_CUDA_CHECK(inst, "cuda::Graph::capture_end");
  }
}

void Graph::replay() {
  MT_CHECK(exec_, "cuda::Graph::replay: nothing captured (capture_begin() and capture_end() first)");
  check_not_capturing("cuda::Graph::replay", "replays a graph");
  DeviceGuard guard(device_);
  cudaStream_t stream = current_stream(device_);
  for (const detail::ReplayHook& h : hooks_)
    if (h.before) h.before();
  if (philox_blocks_ > 0) {
    const Generator::Range r = default_generator().reserve(philox_blocks_ * 4);
    MT_CUDA_CHECK(detail::launch_write_philox_state(philox_slot_, r.seed, r.offset, stream), "cuda::Graph::replay");
  }
  MT_CUDA_CHECK(cudaGraphLaunch(exec_, stream), "cuda::Graph::replay");
  if (!checks_.empty()) detail::replay_captured_checks(checks_, device_, stream);
  for (const detail::ReplayHook& h : hooks_)
    if (h.after) h.after(stream);
}

void Graph::reset() {
  if (capturing_) {  // a capture abandoned (an op threw): end it, keep nothing
    DeviceGuard guard(device_);
    cudaGraph_t broken = nullptr;
    (void)cudaStreamEndCapture(capture_stream_, &broken);
    if (broken) (void)cudaGraphDestroy(broken);
    (void)cudaGetLastError();
    end_capture_state();
    t_capture_error.clear();
  }
  if (device_ < 0) return;
  DeviceGuard guard(device_);
  // Replays may still be running: the pool's memory is given back only after them.
  MT_CUDA_CHECK(cudaDeviceSynchronize(), "cuda::Graph::reset");
  if (exec_) MT_CUDA_CHECK(cudaGraphExecDestroy(exec_), "cuda::Graph::reset");
  if (graph_) MT_CUDA_CHECK(cudaGraphDestroy(graph_), "cuda::Graph::reset");
  exec_ = nullptr;
  graph_ = nullptr;
  if (capture_stream_) {
    release_cublas_workspace(capture_stream_, device_);  // the replays that used it are done
    MT_CUDA_CHECK(cudaStreamDestroy(capture_stream_), "cuda::Graph::reset");
  }
  capture_stream_ = nullptr;
  checks_.clear();  // their slots go back to the pool first
  hooks_.clear();
  if (philox_slot_) MT_CUDA_CHECK(cudaFree(philox_slot_), "cuda::Graph::reset");
  philox_slot_ = nullptr;
  philox_blocks_ = 0;
  detail::release_graph_pool(device_, pool_);
  pool_ = 0;
  device_ = -1;
}

CapturedPhilox captured_philox(const char* op, uint64_t seed, uint64_t offset) {
  MT_CHECK(t_capturing, op, ": captured_philox called outside a capture");
  Graph& g = *t_capture.graph;
  if (seed != g.philox_seed_ || offset < g.philox_base_)
    detail::fail_capture(std::string(op) + ": draws random numbers from a generator other than the default one (seed " +
                         std::to_string(seed) + ", the default generator's at capture_begin: " +
                         std::to_string(g.philox_seed_) +
                         ") during CUDA graph capture, which cannot be captured (only the default generator's draws "
                         "advance per replay; docs/CUDA.md, \"CUDA graphs\")");
  return CapturedPhilox{g.philox_slot_, offset - g.philox_base_};
}

int64_t Graph::pool_reserved_bytes() const {
  if (device_ < 0) return 0;
  return detail::graph_pool_reserved_bytes(device_, pool_);
}

}  // namespace mixtape::cuda
