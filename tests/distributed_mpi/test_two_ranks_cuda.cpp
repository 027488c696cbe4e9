// tests/distributed_mpi/test_two_ranks_cuda.cpp — two ranks with CUDA tensors (CUDA builds: on a
// GPU machine with two devices, or on the CUDA emulator, whose NCCL meets in shared memory):
// NCCL's collectives, DistributedDataParallel on a CUDA model against one process on the whole
// batch, and ZeroRedundancyOptimizer's refusal of CUDA parameters. Each rank uses device
// rank % device_count; with NCCL, fewer devices than ranks skips (NCCL refuses two ranks on one GPU).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/cuda/stream.h"
#include "core/cuda_api.h"
#include "common/error_of.h"
#include "distributed/dist_test_util.h"
#include "distributed/device_collectives.h"

namespace mixtape {
namespace {

using distributed::ReduceOp;

distributed::ProcessGroup& pg() { return *distributed::world(); }

// The path CUDA tensors take: NCCL when the build has it and MIXTAPE_DIST_CUDA=host is not set.
bool expect_nccl() {
  const char* force = std::getenv("MIXTAPE_DIST_CUDA");
  return distributed::built_with_nccl() && !(force && std::string(force) == "host");
}
// Ranks on this host (mpirun's OMPI_COMM_WORLD_LOCAL_SIZE; the world without it).
int ranks_here() {
  const char* s = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  return s ? std::atoi(s) : pg().world_size();
}

class TwoRanksCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
    if (expect_nccl() && cuda::device_count() < ranks_here())
      GTEST_SKIP() << "NCCL needs one CUDA device per rank: " << ranks_here() << " ranks on this host, "
                   << cuda::device_count() << " device(s)";
    dev_ = Device::CUDA(pg().rank() % cuda::device_count());
    cuda::set_device(dev_.index());
  }
  Device dev_;
};

// Through NCCL when the build has it (the emulator always does), else through host memory.
TEST_F(TwoRanksCuda, CollectivesOnDeviceMemory) {
  const double r = pg().rank();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    auto make = [&] { return tensor({1.0 + r, -2.0 * (r + 1), 0.5}, {3}, TensorOptions(dt)).to(dev_); };
    Tensor s = make(), m = make(), a = make();
    const uint32_t v0 = s.version();
    pg().all_reduce(s, ReduceOp::Sum);
    pg().all_reduce(m, ReduceOp::Max);
    auto w = pg().all_reduce_async(a, ReduceOp::Avg, "avg");
    w.wait();  // the current stream waits; the read below is ordered after it
    EXPECT_GT(s.version(), v0);
    EXPECT_EQ(s.to_vector<double>(), (std::vector<double>{3.0, -6.0, 1.0})) << dtype_name(dt);
    EXPECT_EQ(m.to_vector<double>(), (std::vector<double>{2.0, -2.0, 0.5})) << dtype_name(dt);
    EXPECT_EQ(a.to_vector<double>(), (std::vector<double>{1.5, -3.0, 0.5})) << dtype_name(dt);
  }
  // The communicator exists and took them (or the build has no NCCL).
  EXPECT_STREQ(pg().cuda_backend_name(), expect_nccl() ? "nccl" : "host");
  Tensor b = tensor({r, r + 10}, {2}).to(dev_);
  pg().broadcast(b, 1);
  EXPECT_EQ(b.to_vector<double>(), (std::vector<double>{1.0, 11.0}));
  // A strided operand takes the same path as a contiguous one on every rank (here: NCCL through a copy).
  Tensor m2 = tensor({1.0, 2.0, 3.0, 4.0}, {2, 2}).to(dev_);
  pg().all_reduce(m2.select(1, 0), ReduceOp::Sum);
  EXPECT_EQ(m2.to_vector<double>(), (std::vector<double>{2.0, 2.0, 6.0, 4.0}));
  auto parts = pg().all_gather(tensor({r * 2, r}, {2}).to(dev_));
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].to_vector<double>(), (std::vector<double>{0.0, 0.0}));
  EXPECT_EQ(parts[1].to_vector<double>(), (std::vector<double>{2.0, 1.0}));
  EXPECT_TRUE(parts[1].device().is_cuda());
}

TEST_F(TwoRanksCuda, DataParallelOnACudaModelMatchesTheWholeBatch) {
  auto ref = dist_test::make_mlp(11, DType::Float64), inner = dist_test::make_mlp(11, DType::Float64);
  ref->to(dev_);
  inner->to(dev_);
  distributed::DistributedDataParallel ddp(inner, pg());
  auto gb = dist_test::global_batch(128, 0, DType::Float64);
  Tensor x = gb.x.to(dev_), y = gb.y.to(dev_);
  cross_entropy((*ref)(x), y).backward();
  cross_entropy(ddp(x.narrow(0, pg().rank() * 64, 64)), y.narrow(0, pg().rank() * 64, 64)).backward();
  auto a = ref->parameters(), b = inner->parameters();
  for (size_t k = 0; k < a.size(); ++k)
    EXPECT_LE(dist_test::max_abs_diff(a[k].grad(), b[k].grad()), 1e-13 * (1.0 + dist_test::max_abs(a[k].grad())));
  auto hashes = pg().all_gather_string(dist_test::hash_state(inner->state_dict()));
  EXPECT_EQ(hashes[0], hashes[1]);
}

// ZeRO-1 takes CPU parameters only so far: a CUDA model is refused, naming the parameter.
TEST_F(TwoRanksCuda, ZeroRedundancyOptimizerRefusesCudaParameters) {
  auto net = dist_test::make_mlp(11);
  net->to(dev_);
  distributed::DistributedDataParallel ddp(net, pg());
  auto make = [](std::vector<optim::ParamGroup> g) { return std::make_unique<optim::Adam>(std::move(g)); };
  EXPECT_EQ(testing::error_of([&] { distributed::ZeroRedundancyOptimizer z(ddp, make); }),
            "ZeroRedundancyOptimizer: parameter '" + net->named_parameters().front().first + "' is on " + dev_.str() +
                "; sharding supports CPU parameters only so far (reduce_scatter and all_gather_into take CPU tensors)");
}

}  // namespace
}  // namespace mixtape
