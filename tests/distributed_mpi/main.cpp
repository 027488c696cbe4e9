// tests/distributed_mpi/main.cpp — the two-process test program, started by ctest through
// `mpirun -np 2` (tests/CMakeLists.txt). Every rank runs every test; only rank 0 prints the
// usual report, the others print their failures prefixed with their rank; the exit status is
// the worst of all ranks. `--fault=<name>` instead runs one fault scenario (faults.h).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>

#include "distributed_mpi/faults.h"
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

}  // namespace

int main(int argc, char** argv) {
  // --fault=slow-start: the launcher's rank 1 starts its group 4 s late (a loaded machine); the
  // others' start-up must wait for it even under a collective timeout of a few seconds.
  for (int i = 1; i < argc; ++i) {
    const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
    if (std::strcmp(argv[i], "--fault=slow-start") == 0 && rank && std::atoi(rank) == 1)
      std::this_thread::sleep_for(std::chrono::seconds(4));
  }
  auto& pg = mixtape::distributed::init_process_group();
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--fault=", 8) != 0) continue;
    const int rc = mixtape::dist_faults::run(argv[i] + 8, pg);
    if (rc < 0) std::cerr << "unknown fault scenario " << argv[i] << "\n";
    return rc < 0 ? 2 : rc;
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
