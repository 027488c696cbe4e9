// distributed/cuda/nccl_collectives.cpp — DeviceCollectives on NCCL: one communicator for this
// process's device, its unique id made by rank 0 and sent to the others over MPI (as llm.c
// does), collectives on a stream of their own ordered after the caller's stream by events, and a
// watchdog thread per communicator (PyTorch's ProcessGroupNCCL has one too): it polls the event
// recorded after each collective and ncclCommGetAsyncError, and a collective outstanding longer
// than the group's timeout, or an asynchronous NCCL error, aborts the communicator
// (ncclCommAbort: the stuck kernels return) and fails the group, naming the collective.
// Invariants: see distributed/device_collectives.h; after an abort every later collective, and
// wait()/is_completed() of every collective not seen complete before it, throws the watchdog's
// error. Built only with NCCL (MIXTAPE_WITH_NCCL).
// Under CUDA graph capture (docs/DISTRIBUTED.md, "DDP in a CUDA graph") a collective is queued on
// the capturing stream itself (a node of the graph, ordered by the stream: no event is made) and the
// watchdog tracks nothing then; the graph's replays are what run it, and each replay of a graph
// holding collectives hands the watchdog one event recorded behind it on the launch stream.
#include "distributed/device_collectives.h"

#if MIXTAPE_WITH_NCCL
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/cuda/check.h"
#include "core/cuda/graph.h"
#include "core/cuda/stream.h"
#include "ops/creation.h"

namespace mixtape::distributed {
namespace {

void check(ncclResult_t r, const char* call, ncclComm_t comm, int rank, int world) {
  if (r == ncclSuccess) return;
  const char* detail = comm ? ncclGetLastError(comm) : "";
  MT_ERROR(call, " failed on rank ", rank, " of ", world, ": ", ncclGetErrorString(r),
           detail && *detail ? std::string(" (") + detail + ")" : std::string());
}

ncclDataType_t nccl_type(DType dt, const char* op) {
  switch (dt) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Int64: return ncclInt64;
    default: MT_ERROR(op, ": NCCL has no reduction for ", dtype_name(dt));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Avg: return ncclAvg;
  }
  return ncclSum;
}

// One collective as the watchdog sees it: what it is, when it was queued, and the event recorded
// after it on the communication stream. Shared with the Work returned for it.
struct Queued {
  std::string what;
  std::chrono::steady_clock::time_point issued;
  std::shared_ptr<cuda::Event> done;
  std::atomic<bool> completed{false};  // seen done (by the watchdog, or by is_completed)
};

// Whether the watchdog aborted the communicator, and why; shared with the Works, which may
// outlive the communicator.
class Health {
 public:
  void set(const std::string& error) {
    std::lock_guard lk(m_);
    if (error_.empty()) error_ = error;
  }
  std::string error() const {
    std::lock_guard lk(m_);
    return error_;
  }
  // The watchdog marks every collective that finished before the one it gave up on as completed
  // before it sets the error: any other is part of the aborted queue.
  void throw_if_aborted(const Queued* q) const {
    if (q && q->completed.load()) return;
    std::string e = error();
    if (!e.empty()) throw Error(e);
  }

 private:
  mutable std::mutex m_;
  std::string error_;
};

class NcclCollectives final : public DeviceCollectives {
 public:
  NcclCollectives(ProcessGroup& host, int device)
      : host_(host), device_(device), rank_(host.rank()), world_(host.world_size()), timeout_(host.timeout()) {
    cuda::DeviceGuard on(device_);
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (rank_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId", nullptr, rank_, world_);
    Tensor bytes = empty({static_cast<int64_t>(sizeof(id))}, TensorOptions(DType::UInt8));
    std::memcpy(bytes.data_ptr(), &id, sizeof(id));
    host.broadcast(bytes, 0);  // over MPI
    std::memcpy(&id, bytes.data_ptr(), sizeof(id));
    check(ncclCommInitRank(&comm_, world_, id, rank_), "ncclCommInitRank", nullptr, rank_, world_);
    stream_ = cuda::create_stream();
    watchdog_ = std::thread([this] { watch(); });  // last: nothing after it may throw
  }
  ~NcclCollectives() override {
    // At exit the CUDA context may already be going away: errors are not reported here.
    // Whatever is still queued finishes first, with the watchdog still watching: on a stuck
    // collective it aborts the communicator after the timeout, which releases this wait (and
    // ncclCommDestroy, which would otherwise wait for the stuck work itself).
    alive_->store(false);  // a graph that captured collectives of this communicator refuses to replay
    if (stream_) (void)cudaStreamSynchronize(stream_);
    {
      std::lock_guard lk(watch_mu_);
      stop_ = true;
    }
    watch_cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    if (comm_) ncclCommDestroy(comm_);  // (null when the watchdog aborted it)
    if (stream_) cudaStreamDestroy(stream_);
  }

  const char* name() const override { return "nccl"; }

  Work all_reduce(const Tensor& t, ReduceOp op, const std::string& what) override {
    check_device("all_reduce", t);
    cuda::DeviceGuard on(device_);
    std::lock_guard lk(comm_mu_);
    health_->throw_if_aborted(nullptr);
    cudaStream_t stream = issue_stream("all_reduce");
    check(ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.dtype(), "all_reduce"),
                        nccl_op(op), comm_, stream),
          "ncclAllReduce", comm_, rank_, world_);
    return queued_work(t, what);
  }

  Work reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op, const std::string& what) override {
    check_device("reduce_scatter", output);
    check_device("reduce_scatter", input);
    cuda::DeviceGuard on(device_);
    // The whole reduction lands here (allocated for the caller's stream, used on stream_ and
    // released to it by record_stream): ncclAllReduce out of place, with all_reduce's count.
    Tensor whole = empty({input.numel()}, TensorOptions(input.dtype()).with_device(input.device()));
    std::lock_guard lk(comm_mu_);
    health_->throw_if_aborted(nullptr);
    cudaStream_t stream = issue_stream("reduce_scatter");
    check(ncclAllReduce(input.data_ptr(), whole.data_ptr(), static_cast<size_t>(input.numel()),
                        nccl_type(input.dtype(), "reduce_scatter"), nccl_op(op), comm_, stream),
          "ncclAllReduce (reduce_scatter)", comm_, rank_, world_);
    keep_for(input, stream);
    keep_for(whole, stream);
    const char* chunk = static_cast<const char*>(whole.data_ptr()) + static_cast<size_t>(rank_) * output.nbytes();
    MT_CUDA_CHECK(cudaMemcpyAsync(output.data_ptr(), chunk, output.nbytes(), cudaMemcpyDeviceToDevice, stream),
                  "reduce_scatter");
    return queued_work(output, what);
  }

  Work all_gather_into(const Tensor& output, const Tensor& input, const std::string& what) override {
    check_device("all_gather_into", output);
    check_device("all_gather_into", input);
    cuda::DeviceGuard on(device_);
    std::lock_guard lk(comm_mu_);
    health_->throw_if_aborted(nullptr);
    cudaStream_t stream = issue_stream("all_gather_into");
    // Bytes, as all_gather does: a gather moves them unchanged whatever the dtype.
    check(ncclAllGather(input.data_ptr(), output.data_ptr(), input.nbytes(), ncclUint8, comm_, stream),
          "ncclAllGather (all_gather_into)", comm_, rank_, world_);
    keep_for(input, stream);
    return queued_work(output, what);
  }

  void broadcast(const Tensor& t, int root) override {
    check_device("broadcast", t);
    cuda::DeviceGuard on(device_);
    Work w;
    {
      std::lock_guard lk(comm_mu_);
      health_->throw_if_aborted(nullptr);
      cudaStream_t stream = issue_stream("broadcast");
      check(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.nbytes(), ncclUint8, root, comm_, stream), "ncclBroadcast",
            comm_, rank_, world_);
      w = queued_work(t, "broadcast of " + t.describe() + " from rank " + std::to_string(root));
    }
    w.wait();  // the caller's stream now waits for it
  }

  std::vector<Tensor> all_gather(const Tensor& t) override {
    check_device("all_gather", t);
    cuda::DeviceGuard on(device_);
    IntList sizes = t.sizes();
    sizes.insert(sizes.begin(), world_);
    Tensor out = empty(sizes, TensorOptions(t.dtype()).with_device(t.device()));
    Work w;
    {
      std::lock_guard lk(comm_mu_);
      health_->throw_if_aborted(nullptr);
      cudaStream_t stream = issue_stream("all_gather");
      check(ncclAllGather(t.data_ptr(), out.data_ptr(), t.nbytes(), ncclUint8, comm_, stream), "ncclAllGather", comm_,
            rank_, world_);
      keep_for(t, stream);
      w = queued_work(out, "all_gather of " + t.describe());
    }
    w.wait();
    std::vector<Tensor> parts;
    for (int r = 0; r < world_; ++r) parts.push_back(out.select(0, r));
    return parts;
  }

 private:
  void check_device(const char* op, const Tensor& t) const {
    MT_CHECK(t.device().index() == device_, op, ": this process's NCCL communicator is on cuda:", device_,
             ", the tensor on ", t.device().str(), " (one device per rank)");
  }
  // The stream the collective `op` goes on. Eagerly the communication stream, made to wait for
  // what the caller's stream queued before the collective. Under this thread's CUDA graph capture
  // the capturing stream itself: the graph orders the collective after the captured work before it
  // and before the work after it, and no event is made (creating one is refused during capture;
  // and a second stream joined to the capture would need one).
  cudaStream_t issue_stream(const char* op) {
    if (const cuda::detail::ThreadCapture* cap = cuda::detail::thread_capture()) {
      if (cap->device != device_)
        cuda::detail::fail_capture(std::string(op) + ": this process's NCCL communicator is on cuda:" +
                                   std::to_string(device_) + ", the CUDA graph capture on cuda:" +
                                   std::to_string(cap->device) + " (one device per rank)");
      return cap->stream;
    }
    cuda::Event ready;
    ready.record(cuda::current_stream());
    ready.wait(stream_);
    return stream_;
  }
  // `t` is used on `stream`: off the caller's stream, keep its memory from reuse until that is
  // done. A captured collective is on the caller's (capturing) stream, whose order protects it
  // already; and tensors a graph uses must outlive the graph anyway (docs/CUDA.md, "CUDA graphs").
  static void keep_for(const Tensor& t, cudaStream_t stream) {
    if (!cuda::is_capturing()) cuda::record_stream(t, stream);
  }
  // `t` was written on the communication stream: keep its memory from reuse until that is done,
  // bump its version (an in-place write), hand the collective to the watchdog, and let wait()
  // order the caller's stream after it.
  Work queued_work(const Tensor& t, const std::string& what) {
    if (cuda::is_capturing()) return captured_work(t, what);
    cuda::record_stream(t, stream_);
    t.bump_version();
    auto q = std::make_shared<Queued>();
    q->what = what;
    q->issued = std::chrono::steady_clock::now();
    q->done = std::make_shared<cuda::Event>();
    q->done->record(stream_);
    {
      std::lock_guard lk(watch_mu_);
      queued_.push_back(q);
    }
    // wait() may run after the DeviceGuard is gone, on a thread whose current device is another:
    // the stream that must wait is this device's current one.
    auto on_wait = [q, h = health_, d = device_] {
      h->throw_if_aborted(q.get());
      q->done->wait(cuda::current_stream(d));
    };
    auto done = [q, h = health_] {
      h->throw_if_aborted(q.get());
      if (!q->completed.load() && !q->done->query()) return false;
      h->throw_if_aborted(q.get());  // the abort lets a stuck collective's event complete too
      q->completed.store(true);
      return true;
    };
    return Work::on_device(what, std::move(on_wait), std::move(done));
  }

  // A collective captured into this thread's graph: already in stream order (wait() has nothing to
  // do), and nothing for the watchdog now. The capture's first one hooks the graph's replays:
  // before each, a communicator the watchdog aborted (or one destroyed) refuses the launch; after
  // each, one event recorded on the launch stream behind the graph goes to the watchdog, standing
  // for all of the graph's collectives (the timeout then covers the replay as it covers an eager
  // collective: a peer that never replays makes it time out and abort).
  Work captured_work(const Tensor& t, const std::string& what) {
    t.bump_version();
    const cuda::detail::ThreadCapture* cap = cuda::detail::thread_capture();
    if (cap->pool != hooked_capture_) {
      hooked_capture_ = cap->pool;
      captured_ = std::make_shared<std::vector<std::string>>();
      cuda::detail::ReplayHook hook;
      hook.before = [alive = alive_, h = health_, rank = rank_] {
        MT_CHECK(alive->load(), "cuda::Graph::replay: the graph holds NCCL collectives of rank ", rank,
                 "'s communicator, which was destroyed (destroy_process_group) after the capture");
        h->throw_if_aborted(nullptr);
      };
      hook.after = [this, alive = alive_, names = captured_](cudaStream_t launch) {
        if (!alive->load()) return;
        auto q = std::make_shared<Queued>();
        q->what = "the " + std::to_string(names->size()) + " NCCL collective(s) replayed by a CUDA graph (" +
                  names->front() + (names->size() > 1 ? " ... " + names->back() : std::string()) + ")";
        q->issued = std::chrono::steady_clock::now();
        q->done = std::make_shared<cuda::Event>();
        q->done->record(launch);
        std::lock_guard lk(watch_mu_);
        queued_.push_back(q);
      };
      cuda::detail::add_replay_hook(std::move(hook));
    }
    captured_->push_back(what);
    return Work::on_device(what, nullptr, [] { return true; });
  }

  // The watchdog thread: every poll, the collectives done since the last one are dropped (in
  // stream order, so the first one not done is the oldest outstanding); that one outstanding for
  // longer than the timeout, or an asynchronous NCCL error, aborts the communicator. One
  // failure ends the watch (nothing can be issued afterwards).
  void watch() {
    try {
      cuda::set_device(device_);  // (cudaEventQuery and NCCL find the device themselves; this is for clarity)
    } catch (const std::exception&) {
    }
    const auto poll = std::min<std::chrono::milliseconds>(std::chrono::milliseconds(100), timeout_ / 4 + std::chrono::milliseconds(1));
    std::unique_lock lk(watch_mu_);
    while (!watch_cv_.wait_for(lk, poll, [&] { return stop_; })) {
      std::vector<std::shared_ptr<Queued>> queued(queued_.begin(), queued_.end());
      lk.unlock();
      const std::string error = inspect(queued);
      if (!error.empty()) {
        abort_communicator(error, queued);
        return;
      }
      lk.lock();
      while (!queued_.empty() && queued_.front()->completed.load()) queued_.pop_front();
    }
  }

  // What is wrong, if anything: an empty string while every collective is in time.
  std::string inspect(const std::vector<std::shared_ptr<Queued>>& queued) {
    const Queued* oldest = nullptr;  // the oldest collective not done
    try {
      for (const auto& q : queued) {
        if (q->completed.load()) continue;
        oldest = q.get();
        if (!q->done->query()) break;
        q->completed.store(true);
        oldest = nullptr;
      }
    } catch (const std::exception& e) {  // a CUDA error (a fault in some kernel): nothing will complete
      return describe(oldest, queued) + " failed on rank " + std::to_string(rank_) + " of " + std::to_string(world_) +
             ": the NCCL watchdog's event query failed: " + e.what() + "; it aborted the NCCL communicator";
    }
    if (std::string async = async_error(); !async.empty())
      return describe(oldest, queued) + " failed on rank " + std::to_string(rank_) + " of " + std::to_string(world_) +
             ": NCCL reported an asynchronous error: " + async +
             " (a peer failed or exited); the NCCL watchdog aborted the communicator";
    if (oldest && std::chrono::steady_clock::now() - oldest->issued > timeout_)
      return oldest->what + " timed out after " + seconds(timeout_) + " s on rank " + std::to_string(rank_) + " of " +
             std::to_string(world_) +
             ": the NCCL collective did not complete (another rank failed, exited or issued a different collective); "
             "the NCCL watchdog aborted the communicator (MIXTAPE_DIST_TIMEOUT sets the limit)";
    return "";
  }

  std::string describe(const Queued* oldest, const std::vector<std::shared_ptr<Queued>>& queued) const {
    if (oldest) return oldest->what;
    return queued.empty() ? std::string("the NCCL communicator") : "the NCCL communicator (after " + queued.back()->what + ")";
  }

  std::string async_error() {
    std::lock_guard lk(comm_mu_);
    if (!comm_) return "";
    ncclResult_t state = ncclSuccess;
    if (ncclResult_t r = ncclCommGetAsyncError(comm_, &state); r != ncclSuccess) state = r;
    if (state == ncclSuccess || state == ncclInProgress) return "";
    const char* detail = ncclGetLastError(comm_);
    return std::string(ncclGetErrorString(state)) + (detail && *detail ? std::string(" (") + detail + ")" : "");
  }

  // The error first (a collective issued meanwhile is refused, or, already queued, fails with
  // the rest), then the abort, then the host group (whose later collectives could never pair
  // up with the other ranks' again) and stderr (the main thread may be busy elsewhere).
  void abort_communicator(const std::string& error, const std::vector<std::shared_ptr<Queued>>& queued) {
    health_->set(error);
    {
      std::lock_guard lk(comm_mu_);
      if (comm_) ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    const Queued* oldest = nullptr;
    for (const auto& q : queued)
      if (!q->completed.load()) {
        oldest = q.get();
        break;
      }
    host_.mark_failed(describe(oldest, queued) + " on NCCL (the watchdog aborted the communicator: " +
                      (error.find(" timed out after ") != std::string::npos ? "timed out after " + seconds(timeout_) + " s"
                                                                            : std::string("an NCCL error")) +
                      ")");
    const std::string line = "mixtape: rank " + std::to_string(rank_) + " of " + std::to_string(world_) + ": " + error + "\n";
    std::cerr << line << std::flush;  // one write: the ranks' lines do not interleave
  }

  static std::string seconds(std::chrono::milliseconds t) {
    std::ostringstream os;
    os << t.count() / 1000.0;
    return os.str();
  }

  ProcessGroup& host_;
  int device_, rank_, world_;
  std::chrono::milliseconds timeout_;
  std::mutex comm_mu_;  // every NCCL call on comm_: the issuing thread's and the watchdog's
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<Health> health_ = std::make_shared<Health>();
  std::mutex watch_mu_;  // queued_ and stop_
  std::condition_variable watch_cv_;
  std::deque<std::shared_ptr<Queued>> queued_;  // in stream order; completed ones leave from the front
  // Set false by the destructor: graphs that captured collectives of this communicator outlive it.
  std::shared_ptr<std::atomic<bool>> alive_ = std::make_shared<std::atomic<bool>>(true);
  uint64_t hooked_capture_ = 0;  // the capture (its pool id) whose graph has this communicator's replay hook
  std::shared_ptr<std::vector<std::string>> captured_;  // that capture's collectives, in issue order
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace

std::unique_ptr<DeviceCollectives> make_nccl_collectives(ProcessGroup& host, int device) {
  return std::make_unique<NcclCollectives>(host, device);
}
bool built_with_nccl() { return true; }

}  // namespace mixtape::distributed
#endif
