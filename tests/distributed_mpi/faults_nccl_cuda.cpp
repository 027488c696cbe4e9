// tests/distributed_mpi/faults_nccl_cuda.cpp — the NCCL watchdog's fault scenarios (CUDA builds;
// on the CUDA emulator, whose NCCL can make a collective never complete:
// MIXTAPE_CUDA_EMULATOR_NCCL_STUCK, tests/cuda_emulator/nccl.cpp). Each rank checks what it
// sees, printing "nccl watchdog check failed: ..." (ctest fails on it) for anything wrong, then
// ends the job through abort_if_distributed with the watchdog's error, as the main job does.
// Also: a CUDA graph holding an NCCL collective refuses to replay once the watchdog has aborted
// the communicator (docs/DISTRIBUTED.md, "DDP in a CUDA graph").
#include <chrono>
#include <iostream>
#include <string>
#include <thread>

#include "core/cuda/graph.h"
#include "core/cuda/stream.h"
#include "core/cuda_api.h"
#include "distributed_mpi/faults.h"

namespace mixtape::dist_faults {
namespace {

using Clock = std::chrono::steady_clock;

void require(bool ok, const std::string& what) {
  if (ok) return;
  std::cerr << "nccl watchdog check failed: " << what << "\n" << std::flush;
  MT_ERROR("nccl watchdog check failed");
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The error `fn` throws ("" if it throws none).
template <typename F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Collective #1 works; #2 (MIXTAPE_CUDA_EMULATOR_NCCL_STUCK=2 on every rank) never completes, and
// #3 is queued behind it before the watchdog fires. `async`: the emulator also reports an
// asynchronous NCCL error, which must abort at once rather than after the timeout.
// `flat`: the stuck collective is a reduce_scatter and the one behind it an all_gather_into
// (ZeRO-1's pair; the watchdog watches them as it watches all_reduce).
void stuck_collective(distributed::ProcessGroup& pg, bool async, bool flat = false) {
  require(cuda::is_available() && cuda::device_count() >= pg.world_size(),
          "needs one CUDA device per rank: " + std::to_string(cuda::device_count()) + " device(s)");
  require(std::string(pg.cuda_backend_name()) == "nccl", "CUDA tensors must take NCCL, not " +
                                                             std::string(pg.cuda_backend_name()));
  const Device dev = Device::CUDA(pg.rank());
  cuda::set_device(dev.index());
  const double r = pg.rank();
  Tensor first = tensor({1.0 + r, 2.0}, {2}).to(dev);
  distributed::Work w1 = pg.all_reduce_async(first, distributed::ReduceOp::Sum, "first");
  w1.wait();
  require(first.to_vector<double>() == std::vector<double>{3.0, 4.0}, "collective #1 must be a plain sum");

  const auto t0 = Clock::now();
  Tensor stuck = ones({3}).to(dev), behind = ones({2}).to(dev);
  const Tensor whole = ones({3 * pg.world_size()}).to(dev), gathered = ones({2 * pg.world_size()}).to(dev);
  distributed::Work w = flat ? pg.reduce_scatter_async(stuck, whole, distributed::ReduceOp::Sum, "stuck")
                             : pg.all_reduce_async(stuck, distributed::ReduceOp::Sum, "stuck");
  distributed::Work w2 = flat ? pg.all_gather_into_async(gathered, behind, "behind")
                              : pg.all_reduce_async(behind, distributed::ReduceOp::Sum, "behind");
  // Poll as a training loop's host would (is_completed never waits).
  std::string error;
  // (async: well before the timeout, which it must not wait for)
  const auto limit = async ? pg.timeout() / 2 : pg.timeout() * 3 + std::chrono::seconds(5);
  while (error.empty()) {
    bool done = false;
    error = error_of([&] { done = w.is_completed(); });
    require(!done, "the stuck collective reported completion");
    require(Clock::now() - t0 < limit, "the watchdog did not fire in time");
    if (error.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  const double timeout = pg.timeout().count() / 1000.0;
  const std::string who = "on rank " + std::to_string(pg.rank()) + " of 2";
  const std::string what = flat ? "reduce_scatter (stuck) of f32[" + std::to_string(3 * pg.world_size()) + "]@cuda:" +
                                       std::to_string(pg.rank()) + " into f32[3] on cuda"
                                 : "all_reduce (stuck) of f32[3]@cuda:" + std::to_string(pg.rank());
  if (async) {
    require(waited < timeout / 2, "an asynchronous NCCL error must abort at once, not after " + std::to_string(waited) + " s");
    require(contains(error, what + " failed " + who + ": NCCL reported an asynchronous error: ") &&
                contains(error, "a peer's connection was lost") && contains(error, "aborted the communicator"),
            "the error must name the collective, the rank and NCCL's error");
  } else {
    require(waited >= timeout, "the watchdog fired before the timeout: " + std::to_string(waited) + " s");
    require(waited < timeout + 3, "the watchdog fired " + std::to_string(waited - timeout) + " s after the timeout");
    require(contains(error, what + " timed out after " + std::to_string(static_cast<int>(timeout)) + " s " + who) &&
                contains(error, "the NCCL watchdog aborted the communicator"),
            "the error must name the collective, the rank, the timeout and the abort");
  }
  // The same error from the Work, and from the collective queued behind it (aborted with it).
  require(error_of([&] { w.wait(); }) == error, "Work::wait must throw the watchdog's error");
  require(error_of([&] { w.wait(); }) == error, "a second Work::wait must throw it again, not return");
  require(error_of([&] { (void)w2.is_completed(); }) == error, "the collective behind it must fail with it");
  require(error_of([&] { w2.wait(); }) == error, "the collective behind it must fail with it on wait()");
  // One that completed before the abort still says so.
  bool first_done = false;
  require(error_of([&] { first_done = w1.is_completed(); }).empty() && first_done,
          "a collective that completed before the abort must still report completion");
  // Every later collective refuses, CUDA or host, naming the stuck one.
  const std::string refused = "unusable after '" + what + " on NCCL (the watchdog aborted the communicator: ";
  Tensor later = ones({2}).to(dev);
  require(contains(error_of([&] { pg.all_reduce(later); }), refused), "a later CUDA collective must refuse");
  require(contains(error_of([&] { pg.barrier(); }), refused), "a later host collective must refuse");
  // The aborted collectives' kernels returned: the device drains, nothing hangs, nothing written.
  cuda::synchronize(dev.index());
  // (An aborted reduce_scatter's output is undefined: the copy of its chunk, queued after the
  // aborted kernel, still runs.)
  if (!flat)
    require(stuck.to_vector<double>() == std::vector<double>{1.0, 1.0, 1.0}, "the aborted collective wrote its operand");
  throw Error(error);  // the main job's path: abort_if_distributed ends every rank
}

// An all_reduce captured in a CUDA graph replays (a sum each time); then eager collective #2
// (MIXTAPE_CUDA_EMULATOR_NCCL_STUCK=2: captured collectives are not counted) sticks, the watchdog
// aborts the communicator, and the next replay throws the watchdog's error before launching.
void replay_after_abort(distributed::ProcessGroup& pg) {
  require(cuda::is_available() && cuda::device_count() >= pg.world_size(), "needs one CUDA device per rank");
  const Device dev = Device::CUDA(pg.rank());
  cuda::set_device(dev.index());
  Tensor first = ones({2}).to(dev);
  pg.all_reduce(first);  // #1: sets the communicator up, outside the capture
  Tensor t = ones({2}).to(dev);
  cuda::Graph g;
  g.capture_begin();
  pg.all_reduce_async(t, distributed::ReduceOp::Sum, "captured").wait();
  g.capture_end();
  require(t.to_vector<double>() == std::vector<double>{1.0, 1.0}, "a captured collective must not run at capture");
  g.replay();
  g.replay();
  require(t.to_vector<double>() == std::vector<double>{4.0, 4.0}, "each replay must run the captured sum");
  Tensor stuck = ones({3}).to(dev);
  distributed::Work w = pg.all_reduce_async(stuck, distributed::ReduceOp::Sum, "stuck");  // #2
  std::string error;
  const auto t0 = Clock::now();
  while (error.empty()) {
    error = error_of([&] { (void)w.is_completed(); });
    require(Clock::now() - t0 < pg.timeout() * 3 + std::chrono::seconds(5), "the watchdog did not fire in time");
    if (error.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  require(contains(error, "all_reduce (stuck) of f32[3]"), "the watchdog must name the stuck collective: " + error);
  require(error_of([&] { g.replay(); }) == error, "a replay after the abort must throw the watchdog's error");
  require(t.to_vector<double>() == std::vector<double>{4.0, 4.0}, "the refused replay must not have run");
  throw Error("replay refused: " + error);
}

}  // namespace

int run_cuda(const std::string& name, distributed::ProcessGroup& pg) {
  if (name == "nccl-stuck") return guarded([&] { stuck_collective(pg, false); });
  if (name == "nccl-async-error") return guarded([&] { stuck_collective(pg, true); });
  if (name == "nccl-stuck-reduce-scatter") return guarded([&] { stuck_collective(pg, false, true); });
  if (name == "nccl-replay-after-abort") return guarded([&] { replay_after_abort(pg); });
  return -1;
}

}  // namespace mixtape::dist_faults
