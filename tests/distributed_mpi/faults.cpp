// tests/distributed_mpi/faults.cpp — the fault scenarios (see faults.h). Each rank catches its
// error and ends the job through abort_if_distributed, as the main job does.
#include "distributed_mpi/faults.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <map>
#include <thread>

#include "distributed/dist_test_util.h"

namespace mixtape::dist_faults {
int guarded(const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    distributed::abort_if_distributed(e.what());
    throw;
  }
  return 0;
}

namespace {

// A loop of small all-reduces; `on_step(i)` runs before step i's.
void reduce_loop(distributed::ProcessGroup& pg, const std::function<void(int)>& on_step) {
  for (int i = 0; i < 1000; ++i) {
    Tensor t = ones({4});
    on_step(i);
    pg.all_reduce(t);
  }
}

// The main job's loop under DDP: forward, backward, the step's loss averaged; the last rank
// skips step 1's backward.
void ddp_skips_a_backward(distributed::ProcessGroup& pg) {
  auto model = dist_test::make_mlp(3);
  distributed::DistributedDataParallel ddp(model, pg);
  const bool skipper = pg.rank() == pg.world_size() - 1;
  for (int step = 0; step < 4; ++step) {
    auto gb = dist_test::global_batch(16, step);
    model->zero_grad();
    Tensor loss = cross_entropy(ddp(gb.x), gb.y);
    if (!(skipper && step == 1)) loss.backward();
    Tensor l = tensor({loss.item<double>()}, {1}, TensorOptions(DType::Float64));
    pg.all_reduce(l, distributed::ReduceOp::Avg);
  }
}

}  // namespace

int run(const std::string& name, distributed::ProcessGroup& pg) {
  const int r = pg.rank();
  const std::map<std::string, std::function<void()>> scenarios = {
      // Rank 1 started late (main.cpp): once the group is up, collectives run as usual.
      {"slow-start", [&] {
         reduce_loop(pg, [](int) {});
         if (r == 0) std::cout << "both ranks started and reduced\n" << std::flush;
       }},
      // Rank 1 throws in the middle of a loop of collectives; rank 0 is inside one at the time.
      {"throw", [&] { reduce_loop(pg, [&](int i) { if (r == 1 && i == 3) MT_ERROR("injected failure at step ", i); }); }},
      // Rank 1 never joins; rank 0's wait times out (MIXTAPE_DIST_TIMEOUT) and ends the job.
      {"hang", [&] { reduce_loop(pg, [&](int) { if (r == 1) std::this_thread::sleep_for(std::chrono::seconds(120)); }); }},
      // Rank 1 dies (SIGKILL) at step 3: mpirun ends the job.
      {"kill", [&] { reduce_loop(pg, [&](int i) { if (r == 1 && i == 3) ::kill(::getpid(), SIGKILL); }); }},
      // Rank 1 is frozen (SIGSTOP) at step 3: rank 0 times out naming it and ends the job.
      {"stop", [&] { reduce_loop(pg, [&](int i) { if (r == 1 && i == 3) ::kill(::getpid(), SIGSTOP); }); }},
      // Rank 1 is frozen after its last collective, while rank 0 ends the group (MPI_Finalize).
      {"stop-at-end", [&] {
         reduce_loop(pg, [](int) {});
         if (r == 1) ::kill(::getpid(), SIGSTOP);
         distributed::destroy_process_group();
       }},
      // Rank 0 ends the group 5 s after rank 1 (a long epilogue of its own) under a 2 s timeout:
      // rank 1 waits for it, since its heartbeat is current, instead of ending the job.
      {"late-end", [&] {
         reduce_loop(pg, [](int) {});
         if (r == 0) std::this_thread::sleep_for(std::chrono::seconds(5));
         distributed::destroy_process_group();
         std::cout << "rank " << r << " ended the group\n" << std::flush;
       }},
      // The last rank skips step 1's backward under DDP: every rank fails at once, naming it.
      {"skip-backward", [&] { ddp_skips_a_backward(pg); }},
      // Run under MIXTAPE_DIST_DEBUG=1: rank 1 skips step 3's all-reduce (the next descriptors
      // differ in their labels), or issues a broadcast there instead (they differ in kind).
      {"debug-skip", [&] {
         for (int i = 0; i < 10; ++i) {
           Tensor t = ones({4});
           if (r == 1 && i == 3) continue;
           pg.all_reduce_async(t, distributed::ReduceOp::Sum, "step " + std::to_string(i)).wait();
         }
       }},
      {"debug-kind", [&] {
         reduce_loop(pg, [&](int i) {
           if (r == 1 && i == 3) pg.broadcast(ones({4}), 0);
         });
       }},
  };
  auto it = scenarios.find(name);
#if MIXTAPE_WITH_CUDA
  if (it == scenarios.end()) return run_cuda(name, pg);
#endif
  if (it == scenarios.end()) return -1;
  return guarded(it->second);
}

}  // namespace mixtape::dist_faults
