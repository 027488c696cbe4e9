// tests/distributed_mpi/test_two_ranks_graph_cuda.cpp — a DistributedDataParallel training step
// captured as one CUDA graph at two ranks (docs/DISTRIBUTED.md, "DDP in a CUDA graph"): its NCCL
// bucket all-reduces, the GradScaler's found_inf reducer and a loss all-reduce become graph nodes,
// and 3 eager warm-up steps then 8 replays equal 11 eager DDP steps bit for bit on both ranks
// (losses, parameters, momentum, the scaler's scale and tracker), FP32 and AMP FP16 (sync_free
// scaler, growth_interval 2: growths; an inf in rank 1's loss at one replayed step: both ranks
// skip it and halve the scale). gradient_as_bucket_view and ZeRO-1 are refused at capture, naming
// themselves.
// Needs NCCL (the emulator always has it): the host path cannot be captured, and is refused at
// capture (TwoRanksCudaGraphHostPath, run by ctest with MIXTAPE_DIST_CUDA=host).
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error_of.h"
#include "core/cuda/graph.h"
#include "core/cuda/graphed_step.h"
#include "core/cuda/stream.h"
#include "core/cuda_api.h"
#include "distributed/dist_test_util.h"
#include "distributed/device_collectives.h"

namespace mixtape {
namespace {

using distributed::ReduceOp;

distributed::ProcessGroup& pg() { return *distributed::world(); }

bool nccl_runs() {
  const char* force = std::getenv("MIXTAPE_DIST_CUDA");
  return distributed::built_with_nccl() && !(force && std::string(force) == "host");
}

class TwoRanksCudaGraph : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
    if (!nccl_runs()) GTEST_SKIP() << "CUDA graphs capture NCCL collectives only (no NCCL, or MIXTAPE_DIST_CUDA=host)";
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (cuda::device_count() < (local ? std::atoi(local) : pg().world_size()))
      GTEST_SKIP() << "NCCL needs one CUDA device per rank";
    dev_ = Device::CUDA(pg().rank() % cuda::device_count());
    cuda::set_device(dev_.index());
  }
  Device dev_;
};

bool same_bits(const Tensor& a, const Tensor& b) {
  Tensor x = a.to(Device::CPU()).contiguous(), y = b.to(Device::CPU()).contiguous();
  return x.sizes() == y.sizes() && x.dtype() == y.dtype() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

constexpr int kWarmup = 3, kReplays = 8, kSteps = kWarmup + kReplays, kInfStep = 6;

struct Outcome {
  std::vector<Tensor> losses, params, momenta;
  std::vector<double> scales;  // after each step (FP16)
  Tensor tracker;
};

Outcome train(bool fp16, bool graphed, Device dev) {
  const int rank = pg().rank();
  auto net = dist_test::make_mlp(23);
  net->to(dev);
  // Small buckets: several all-reduces per backward, each a node of the graph.
  distributed::DistributedDataParallel ddp(
      net, pg(), distributed::DataParallelOptions{.bucket_cap_bytes = 1024, .first_bucket_cap_bytes = 256});
  optim::SGD opt(net->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  opt.set_capturable(true);
  amp::GradScaler scaler(
      amp::GradScalerOptions{.init_scale = 256.0, .growth_interval = 2, .enabled = fp16, .sync_free = true});
  scaler.set_found_inf_reducer(distributed::found_inf_reducer(pg()));

  const TensorOptions on_dev = TensorOptions().with_device(dev);
  Tensor static_x = zeros({8, 20}, on_dev), static_y = zeros({8}, on_dev.with_dtype(DType::Int64));
  Tensor static_mult = ones({}, on_dev);  // rank 1's loss factor: inf at the injected step
  Tensor loss_out = zeros({}, on_dev);    // the step's loss averaged over the ranks
  auto step = [&] {
    opt.zero_grad();
    Tensor loss;
    {
      std::optional<amp::AutocastGuard> ac;
      if (fp16) ac.emplace(DeviceType::CUDA, DType::Float16);
      loss = cross_entropy(ddp(static_x), static_y).to(DType::Float32) * static_mult;
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    autograd::NoGradGuard no_grad;
    Tensor avg = loss.detach().clone();
    pg().all_reduce(avg, ReduceOp::Avg);  // NCCL: captured too
    loss_out.copy_(avg);
  };
  std::unique_ptr<cuda::GraphedStep> g;
  if (graphed) g = std::make_unique<cuda::GraphedStep>(step, kWarmup);

  Outcome out;
  for (int s = 0; s < kSteps; ++s) {
    auto gb = dist_test::global_batch(16, s);
    static_x.copy_(gb.x.narrow(0, rank * 8, 8));
    static_y.copy_(gb.y.narrow(0, rank * 8, 8));
    const bool inf = fp16 && s == kInfStep && rank == 1;
    static_mult.fill_(inf ? std::numeric_limits<double>::infinity() : 1.0);
    graphed ? (*g)() : step();
    out.losses.push_back(loss_out.to(Device::CPU()));
    if (fp16) out.scales.push_back(scaler.scale_tensor().to(Device::CPU()).to_vector<double>()[0]);
  }
  if (graphed) {
    EXPECT_TRUE(g->captured());
  }
  for (const Tensor& p : net->parameters()) {
    out.params.push_back(p.to(Device::CPU()));
    out.momenta.push_back(opt.state(p, "momentum_buffer").to(Device::CPU()));
  }
  if (fp16) out.tracker = scaler.growth_tracker_tensor().to(Device::CPU());
  return out;
}

void expect_graphed_equals_eager(bool fp16, Device dev) {
  SCOPED_TRACE(std::string(fp16 ? "AMP FP16" : "FP32") + " on rank " + std::to_string(pg().rank()));
  const Outcome want = train(fp16, false, dev), got = train(fp16, true, dev);
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i) EXPECT_TRUE(same_bits(got.losses[i], want.losses[i])) << "loss " << i;
  ASSERT_EQ(got.params.size(), want.params.size());
  for (size_t i = 0; i < want.params.size(); ++i) {
    EXPECT_TRUE(same_bits(got.params[i], want.params[i])) << "parameter " << i;
    EXPECT_TRUE(same_bits(got.momenta[i], want.momenta[i])) << "momentum " << i;
  }
  EXPECT_EQ(got.scales, want.scales);
  if (fp16) {
    EXPECT_TRUE(same_bits(got.tracker, want.tracker));
  }
  // The run trained, and the replicas agree.
  EXPECT_FALSE(same_bits(want.losses[kWarmup], want.losses[kSteps - 1]));
  auto hashes = pg().all_gather_string(dist_test::hash_state([&] {
    StateDict sd;
    for (size_t i = 0; i < got.params.size(); ++i) sd["p" + std::to_string(i)] = got.params[i];
    return sd;
  }()));
  EXPECT_EQ(hashes[0], hashes[1]);
  if (fp16) {
    // A replayed step saw rank 1's inf: both ranks skipped it and halved the scale; and it grew.
    EXPECT_EQ(want.scales[kInfStep], want.scales[kInfStep - 1] / 2);
    EXPECT_GT(want.scales[kWarmup + 1], 256.0);
  }
}

TEST_F(TwoRanksCudaGraph, Fp32DdpStepReplayedEqualsEagerBitForBit) { expect_graphed_equals_eager(false, dev_); }

TEST_F(TwoRanksCudaGraph, Fp16DdpStepWithScalerReplayedEqualsEagerBitForBit) { expect_graphed_equals_eager(true, dev_); }

// A DDP mode with host-side work in its backward is refused at capture on every rank alike
// (before anything is exchanged in that backward), naming the mode; the step ran eagerly first.
void expect_refused_at_capture(distributed::DistributedDataParallel& ddp, Device dev, const std::string& message) {
  Tensor x = zeros({4, 20}, TensorOptions().with_device(dev)), y = zeros({4}, TensorOptions(DType::Int64).with_device(dev));
  cuda::GraphedStep step([&] { cross_entropy(ddp(x), y).backward(); }, 1);
  step();  // warm-up: eager
  const std::string e = testing::error_of([&] { step(); });
  EXPECT_NE(e.find(message + " during CUDA graph capture"), std::string::npos) << e;
  EXPECT_FALSE(step.captured());
  EXPECT_FALSE(cuda::is_capturing());
}

// gradient_as_bucket_view sends its used counts through MPI on the host.
TEST_F(TwoRanksCudaGraph, GradientAsBucketViewIsRefusedAtCapture) {
  auto net = dist_test::make_mlp(29);
  net->to(dev_);
  distributed::DistributedDataParallel ddp(net, pg(), distributed::DataParallelOptions{.gradient_as_bucket_view = true});
  expect_refused_at_capture(ddp, dev_, "DistributedDataParallel (gradient_as_bucket_view): all-reduces the used counts "
                            "through host memory and MPI");
}

// ZeRO-1's sharded backward hands each shard to the optimizer with host-side bookkeeping.
TEST_F(TwoRanksCudaGraph, ShardedModeIsRefusedAtCapture) {
  auto net = dist_test::make_mlp(31);
  net->to(dev_);
  distributed::DistributedDataParallel ddp(net, pg());
  distributed::ZeroRedundancyOptimizer zero(ddp, [](std::vector<optim::ParamGroup> g) {
    return std::make_unique<optim::SGD>(std::move(g), optim::SGDOptions{.lr = 0.1});
  });
  expect_refused_at_capture(ddp, dev_, "DistributedDataParallel (sharded: ZeroRedundancyOptimizer): hands each "
                            "bucket's shard to the optimizer with host-side bookkeeping");
}

// MIXTAPE_DIST_CUDA=host: a CUDA tensor's collective goes through host memory and MPI, which a
// graph cannot replay: refused at capture on every rank alike (before anything is exchanged),
// naming the path; the group stays usable.
TEST(TwoRanksCudaGraphHostPath, HostPathCollectiveIsRefusedAtCapture) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  if (nccl_runs()) GTEST_SKIP() << "CUDA tensors take NCCL here (ctest runs this with MIXTAPE_DIST_CUDA=host)";
  const Device dev = Device::CUDA(pg().rank() % cuda::device_count());
  cuda::set_device(dev.index());
  Tensor t = ones({2}).to(dev);
  pg().all_reduce(t);  // the path is settled (host) outside the capture
  ASSERT_STREQ(pg().cuda_backend_name(), "host");
  cuda::Graph g;
  g.capture_begin();
  const std::string e = testing::error_of([&] { pg().all_reduce(t); });
  g.reset();
  EXPECT_NE(e.find("ProcessGroup (a collective of a CUDA tensor): reduces through host memory and MPI (the host path: "
                   "no NCCL in this build, or MIXTAPE_DIST_CUDA=host), which a graph cannot replay; only NCCL "
                   "collectives during CUDA graph capture"), std::string::npos) << e;
  pg().all_reduce(t);
  EXPECT_EQ(t.to_vector<double>(), (std::vector<double>{4.0, 4.0}));
}

}  // namespace
}  // namespace mixtape
