// tests/distributed_mpi/main.cpp — the two-process test program, started by ctest through
// `mpirun -np 2` (tests/CMakeLists.txt). Every rank runs every test; only rank 0 prints the
// usual report, the others print their failures prefixed with their rank; the exit status is
// the worst of all ranks. `--fault=throw|hang` instead runs one fault scenario (ctest checks
// that the job ends with the failing rank named, never hangs).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <iostream>
#include <thread>

#include "mixtape/mixtape.h"

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::cerr << "[rank " << rank_ << "] " << (r.file_name() ? r.file_name() : "?") << ":" << r.line_number() << ": "
                << r.summary() << "\n";
  }

 private:
  int rank_;
};

// Rank 1 fails in the middle of a loop of collectives; rank 0 is inside one at the time.
int fault_throw(mixtape::distributed::ProcessGroup& pg) {
  try {
    for (int i = 0; i < 1000; ++i) {
      mixtape::Tensor t = mixtape::ones({4});
      if (pg.rank() == 1 && i == 3) MT_ERROR("injected failure at step ", i);
      pg.all_reduce(t);
    }
  } catch (const std::exception& e) {
    mixtape::distributed::abort_if_distributed(e.what());
    throw;
  }
  return 0;
}

// Rank 1 never joins the collective; rank 0's wait times out (MIXTAPE_DIST_TIMEOUT) and ends the job.
int fault_hang(mixtape::distributed::ProcessGroup& pg) {
  try {
    mixtape::Tensor t = mixtape::ones({4});
    if (pg.rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(120));
    pg.all_reduce(t);
  } catch (const std::exception& e) {
    mixtape::distributed::abort_if_distributed(e.what());
    throw;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  auto& pg = mixtape::distributed::init_process_group();
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--fault=throw") == 0) return fault_throw(pg);
    if (std::strcmp(argv[i], "--fault=hang") == 0) return fault_hang(pg);
  }
  ::testing::InitGoogleTest(&argc, argv);
  if (pg.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(pg.rank()));
  }
  int rc = RUN_ALL_TESTS();
  mixtape::Tensor worst = mixtape::tensor({static_cast<double>(rc)}, {1}, mixtape::TensorOptions(mixtape::DType::Int64));
  pg.all_reduce(worst, mixtape::distributed::ReduceOp::Max);
  const int result = static_cast<int>(worst.to_vector<int64_t>()[0]);
  mixtape::distributed::destroy_process_group();
  return result;
}
