// distributed/process_group.h — the ranks of a data-parallel job and their collectives
// (torch.distributed's process group, on MPI).
//
// Invariant: every rank issues the same collectives in the same order (as MPI requires); each
// collective runs on the group's one communication thread, in the order issued, so an async
// collective overlaps with the caller's work and never reorders with another. A collective that
// does not complete within the timeout throws on the waiting rank (naming the collective, its
// rank and the timeout) instead of hanging; a failed MPI call throws with MPI's own message.
// Design, the thread model and the failure rules: docs/DISTRIBUTED.md.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace mixtape::distributed {

enum class ReduceOp : uint8_t { Sum, Max, Avg };
const char* reduce_op_name(ReduceOp op);

// A collective issued with *_async: wait() before reading or writing its tensor again.
class Work {
 public:
  // Blocks until the collective finished; throws its error (or a timeout error). The CUDA or
  // non-contiguous tensors a collective staged through host memory are written back here.
  void wait();
  bool is_completed() const;
  // Seconds the communication thread spent inside the collective (after it started), for the
  // overlap measurements of bench/ddp_step (0 for a collective that ran on a device).
  double busy_seconds() const;

  // A collective already queued on a device (NCCL): wait() runs `on_wait` (make the caller's
  // stream wait for it; the host does not block) once; is_completed() asks `done`.
  static Work on_device(std::string what, std::function<void()> on_wait, std::function<bool()> done);

 private:
  friend class ProcessGroup;
  struct State;
  std::shared_ptr<State> state_;
};

struct ProcessGroupOptions {
  // How long wait() waits for one collective before failing (a peer that crashed or took
  // another path). MIXTAPE_DIST_TIMEOUT=<seconds> overrides it.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

class Backend;            // distributed/backend.h
class DeviceCollectives;  // distributed/device_collectives.h

class ProcessGroup {
 public:
  ProcessGroup(std::unique_ptr<Backend> backend, ProcessGroupOptions options);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const char* backend_name() const;
  // Who reduces CUDA tensors: "nccl" (device to device, on a communication stream) when the
  // build has NCCL and more than one rank runs, else "host" (through host memory and MPI).
  // MIXTAPE_DIST_CUDA=host forces the host path. The ranks settle it together at the first CUDA
  // collective (host if any rank asks for it); before that this is the path this rank proposes.
  const char* cuda_backend_name();
  std::chrono::milliseconds timeout() const { return options_.timeout; }

  // In place on `t` (f32, f64, f16, bf16; Sum and Max also i64), on every rank. Avg sums and
  // divides by the world size in t's dtype. 16-bit sums round after every addition (MPI has no
  // 16-bit type: mixtape's own reduction, docs/DISTRIBUTED.md). CPU tensors are reduced in their
  // own memory when contiguous; CUDA tensors by NCCL on the device (cuda_backend_name()), or
  // through host memory. A world of one returns at once and touches nothing.
  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum);
  Work all_reduce_async(const Tensor& t, ReduceOp op = ReduceOp::Sum, std::string what = "");
  // Rank `root`'s values into `t` on every rank (same shape and dtype everywhere: checked first,
  // two small collectives, unless the caller has established it — check_layout = false, as
  // DistributedDataParallel does for its per-forward buffer copies after its replica check).
  void broadcast(const Tensor& t, int root = 0, bool check_layout = true);
  // Every rank's `t`, in rank order (same shape and dtype everywhere).
  std::vector<Tensor> all_gather(const Tensor& t);
  // torch's reduce_scatter_tensor: `input` holds world_size chunks of output.numel() elements
  // (flat, chunk r at offset r * output.numel()); rank r receives in `output` the reduction of
  // every rank's chunk r. Same dtypes and ops as all_reduce; `input` is not changed. On MPI it
  // reduces the whole input with all_reduce's own call and keeps chunk r, so chunk r is bit for
  // bit all_reduce's (16-bit sums included): it moves an all_reduce's bytes, not 1/N of them.
  // CUDA tensors (input and output on one device) go the way all_reduce's do: on NCCL an
  // ncclAllReduce of the whole input, out of place, then chunk r copied on the device — the same
  // bits as all_reduce again, for ZeRO's equivalence with DDP (docs/DISTRIBUTED.md: why not
  // ncclReduceScatter). A world of one copies input into output.
  void reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum);
  Work reduce_scatter_async(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum,
                            std::string what = "");
  // torch's all_gather_into_tensor: every rank's `input`, in rank order, into the flat `output`
  // (world_size * input.numel() elements of input's dtype; rank r's at offset r * input.numel()).
  // `input` may be a view of `output`'s chunk r (on NCCL its in-place form). CUDA tensors as
  // reduce_scatter's: ncclAllGather on the device, or through host memory.
  void all_gather_into(const Tensor& output, const Tensor& input);
  Work all_gather_into_async(const Tensor& output, const Tensor& input, std::string what = "");
  // Every rank's string, in rank order (any lengths): consistency checks and error reports.
  std::vector<std::string> all_gather_string(const std::string& s);
  void barrier();

  // Ends the whole job: prints "mixtape: rank R of N failed: <why>" to stderr and makes every
  // rank exit with `code` (MPI_Abort). World size 1: exits this process.
  [[noreturn]] void abort(const std::string& why, int code = 1);

  // Collectives issued so far (every rank counts the same) and bytes this rank sent into them.
  int64_t collectives() const { return collectives_; }
  int64_t bytes_reduced() const { return bytes_reduced_; }
  // Whether MIXTAPE_DIST_DEBUG is on (for every rank: agreed at construction). Then every public
  // collective first exchanges a fixed-size descriptor (its number in this rank's sequence, kind,
  // label, layout, op or root) and throws naming every rank's when they differ, before the
  // collective itself is issued (the group stays usable).
  bool debug() const { return debug_; }

  // Marks the group unusable (as a timed-out collective does): every later collective throws,
  // naming `why`. For a caller that finds the ranks' sequences of collectives out of step after
  // it queued some (DistributedDataParallel's step check): they can never pair up again.
  void mark_failed(const std::string& why);

  // `fn(what)` runs on the calling thread at the start of every public collective (what names
  // it, e.g. "all_reduce (x) of f32[4]"), before anything is exchanged; collectives issued from
  // inside an observer do not call the observers again. Returns an id for remove.
  int add_collective_observer(std::function<void(const std::string&)> fn);
  void remove_collective_observer(int id);

 private:
  Work submit(std::string what, std::function<void()> job, std::function<void()> finish);
  void worker_loop();
  void check_same_everywhere(const char* op, const Tensor& t);
  // The start of every public collective: observers, then (debug) the descriptor check.
  void begin_collective(const std::string& descriptor);
  std::vector<std::string> gather_strings(const std::string& s);

  DeviceCollectives* device_collectives(const Tensor& t);

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<DeviceCollectives> device_;
  bool device_tried_ = false;
  bool debug_ = false;  // MIXTAPE_DIST_DEBUG, agreed by every rank at construction
  std::string device_error_;  // NCCL's set-up failed: every later CUDA collective says why
  ProcessGroupOptions options_;
  int rank_ = 0, world_size_ = 1;
  int64_t collectives_ = 0, bytes_reduced_ = 0;
  int64_t issued_ = 0;  // public collectives issued (the debug descriptors' sequence numbers)
  std::vector<std::pair<int, std::function<void(const std::string&)>>> observers_;
  int next_observer_ = 0;
  bool observing_ = false;
  struct Queue;
  std::unique_ptr<Queue> queue_;
};

// What must agree across ranks for a collective or a replica: dtype, shape and the kind of device
// ("f32[2, 3]", "f16[4] on cuda"); the device index may differ (one GPU per rank).
std::string layout_of(const Tensor& t);

// Whether this build has the MPI backend (found libopenmpi-dev at configure time).
bool built_with_mpi();
// The world size the launcher announced (mpirun's OMPI_COMM_WORLD_SIZE, or PMI's), 1 if none.
int launcher_world_size();

// The process group of every rank the launcher started, created on first call: MPI when the
// program runs under mpirun, a world of one (every collective a no-op) otherwise. Throws when
// mpirun started several ranks but the build has no MPI.
ProcessGroup& init_process_group(ProcessGroupOptions options = {});
// The group init_process_group made, or null.
ProcessGroup* world();
// Ends the group and finalises MPI. Call it once every collective was waited for (with one still
// queued it ends the whole job instead, as an exit would), before main returns (PyTorch:
// destroy_process_group): at exit the CUDA runtime may already be gone when NCCL's communicator is
// destroyed. A no-op without a group; no group can be made again afterwards (MPI is finalised).
void destroy_process_group();
// Ends every rank with `why` when a group exists with more than one rank; otherwise returns.
// For a main()'s last catch: the failing rank takes the others down instead of leaving them in
// a collective until the timeout.
void abort_if_distributed(const std::string& why, int code = 1);

}  // namespace mixtape::distributed
