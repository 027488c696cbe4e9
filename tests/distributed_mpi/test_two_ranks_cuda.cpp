// tests/distributed_mpi/test_two_ranks_cuda.cpp — two ranks with CUDA tensors (CUDA builds: on a
// GPU machine with two devices, or on the CUDA emulator, whose NCCL meets in shared memory):
// NCCL's collectives (reduce_scatter bit for bit all_reduce's chunk), DistributedDataParallel on a CUDA model against one process on the whole
// batch, gradient_as_bucket_view and reduce_dtype there, and ZeroRedundancyOptimizer on a CUDA model against DDP with the unsharded optimizer. Each rank uses device
// rank % device_count; with NCCL, fewer devices than ranks skips (NCCL refuses two ranks on one GPU).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cmath>
#include <cstring>
#include <tuple>
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

bool same_bits(const Tensor& a, const Tensor& b) {
  Tensor x = a.to(Device::CPU()).contiguous(), y = b.to(Device::CPU()).contiguous();
  return x.dtype() == y.dtype() && x.nbytes() == y.nbytes() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// Values that differ by rank and span magnitudes: the 16-bit rounding after each addition shows.
Tensor rank_values(int64_t n, DType dt, int rank, Device dev) {
  Generator g(700 + static_cast<uint64_t>(rank));
  return (randn({n}, TensorOptions(DType::Float64), &g) * (rank == 0 ? 1.0 : 1000.0)).to(dt).to(dev);
}

// reduce_scatter and all_gather_into on CUDA tensors, async: reduce_scatter is chunk r of
// all_reduce bit for bit (ZeRO-1's equivalence with DDP rests on it), all_gather_into the
// concatenation in rank order, in place (input = output's chunk r) or not.
TEST_F(TwoRanksCuda, ReduceScatterAndAllGatherIntoOnDeviceMemory) {
  const int w = pg().world_size(), r = pg().rank();
  const int64_t n = 5;
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
      const Tensor in = rank_values(w * n, dt, r, dev_), in_before = in.clone();
      Tensor all = in.clone();
      pg().all_reduce(all, op);
      Tensor out = zeros({n}, TensorOptions(dt)).to(dev_);
      const uint32_t v0 = out.version();
      auto work = pg().reduce_scatter_async(out, in, op, "grads");
      work.wait();
      EXPECT_GT(out.version(), v0);
      EXPECT_TRUE(out.device().is_cuda());
      EXPECT_TRUE(same_bits(out, all.narrow(0, r * n, n))) << dtype_name(dt) << " " << distributed::reduce_op_name(op);
      EXPECT_TRUE(same_bits(in, in_before)) << "the input is left as it was";
    }
    // The concatenation, checked against the host path's all_gather of CPU copies.
    const Tensor mine = rank_values(n, dt, r, dev_);
    auto expect = pg().all_gather(mine.to(Device::CPU()));
    Tensor out = zeros({w * n}, TensorOptions(dt)).to(dev_);
    auto work = pg().all_gather_into_async(out, mine.view({1, n}), "params");
    work.wait();
    for (int k = 0; k < w; ++k)
      EXPECT_TRUE(same_bits(out.narrow(0, k * n, n), expect[static_cast<size_t>(k)])) << dtype_name(dt) << " rank " << k;
    // NCCL's in-place form: the input is this rank's chunk of the output.
    Tensor flat = zeros({w * n}, TensorOptions(dt)).to(dev_);
    flat.narrow(0, r * n, n).copy_(mine);
    pg().all_gather_into(flat, flat.narrow(0, r * n, n));
    EXPECT_TRUE(same_bits(flat, out)) << dtype_name(dt) << " in place";
    // An input inside the output, but not at chunk r: read before the output is written.
    Tensor other = rank_values(w * n, dt, r, dev_);
    const Tensor other_in = other.narrow(0, (r + 1) % w * n, n).clone();
    auto expect_other = pg().all_gather(other_in.to(Device::CPU()));
    pg().all_gather_into(other, other.narrow(0, (r + 1) % w * n, n));
    for (int k = 0; k < w; ++k)
      EXPECT_TRUE(same_bits(other.narrow(0, k * n, n), expect_other[static_cast<size_t>(k)])) << dtype_name(dt);
  }
  // Strided outputs go through a contiguous copy, written back.
  Tensor wide = zeros({w * 2, 2}, TensorOptions(DType::Float64)).to(dev_);
  pg().all_gather_into(wide.select(1, 1), tensor({r * 1.0, r + 0.5}, {2}, TensorOptions(DType::Float64)).to(dev_));
  Tensor half = zeros({2, 2}, TensorOptions(DType::Float64)).to(dev_);
  pg().reduce_scatter(half.select(1, 0), tensor({1.0 + r, 2.0, 3.0, 4.0 * r}, {4}, TensorOptions(DType::Float64)).to(dev_));
  const std::vector<double> wide_col = wide.select(1, 1).to_vector<double>();
  for (int k = 0; k < w; ++k) {
    EXPECT_EQ(wide_col[static_cast<size_t>(2 * k)], k * 1.0);
    EXPECT_EQ(wide_col[static_cast<size_t>(2 * k + 1)], k + 0.5);
  }
  EXPECT_EQ(wide.select(1, 0).to_vector<double>(), std::vector<double>(static_cast<size_t>(w * 2), 0.0));
  EXPECT_EQ(half.to_vector<double>(), r == 0 ? (std::vector<double>{3.0, 0.0, 4.0, 0.0})
                                             : (std::vector<double>{6.0, 0.0, 4.0, 0.0}));
  // Operands on two devices are refused, naming the collective and the rank.
  EXPECT_EQ(testing::error_of([&] { pg().reduce_scatter(zeros({2}).to(dev_), zeros({2 * w})); }),
            "reduce_scatter on rank " + std::to_string(r) + ": the input and the output must be on the same device, got f32[" +
                std::to_string(2 * w) + "] and f32[2]@" + dev_.str());
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

// gradient_as_bucket_view on a CUDA model: the .grads are views of the device buckets, and the
// steps are bit for bit those of the default buckets.
TEST_F(TwoRanksCuda, GradientAsBucketViewMatchesTheDefaultBitForBit) {
  auto run = [&](bool views) {
    auto net = dist_test::make_mlp(17);
    net->to(dev_);
    distributed::DistributedDataParallel ddp(
        net, pg(), distributed::DataParallelOptions{.bucket_cap_bytes = 1024, .first_bucket_cap_bytes = 256,
                                                    .gradient_as_bucket_view = views});
    optim::SGD opt(net->parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    std::vector<Tensor> grads;
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      auto gb = dist_test::global_batch(16, step);
      cross_entropy(ddp(gb.x.to(dev_).narrow(0, pg().rank() * 8, 8)), gb.y.to(dev_).narrow(0, pg().rank() * 8, 8)).backward();
      for (const Tensor& p : net->parameters()) {
        EXPECT_TRUE(p.grad().device().is_cuda());
        grads.push_back(p.grad().to(Device::CPU()));
      }
      opt.step();
    }
    for (const Tensor& p : net->parameters()) grads.push_back(p.to(Device::CPU()));
    return grads;
  };
  const auto a = run(false), b = run(true);
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) EXPECT_TRUE(same_bits(a[k], b[k])) << "tensor " << k << " on rank " << pg().rank();
}

// reduce_dtype on a CUDA model: each gradient is what the documented arithmetic gives from the
// two ranks' local gradients (computed here on the host from an all_gather of them): cast to the
// reduction dtype, with predivide multiplied by 1/2 there, summed there (one rounding: two
// ranks), cast back, without predivide halved in FP32.
TEST_F(TwoRanksCuda, ReduceDtypeReducesInThatDtype) {
  for (DType rd : {DType::BFloat16, DType::Float16, DType::Float32}) {
    for (bool predivide : {true, false}) {
      auto net = dist_test::make_mlp(19), local = dist_test::make_mlp(19);
      net->to(dev_);
      local->to(dev_);
      distributed::DistributedDataParallel ddp(
          net, pg(), distributed::DataParallelOptions{.first_bucket_cap_bytes = 256, .reduce_dtype = rd, .predivide = predivide});
      auto gb = dist_test::global_batch(16, 3);
      Tensor x = gb.x.to(dev_).narrow(0, pg().rank() * 8, 8), y = gb.y.to(dev_).narrow(0, pg().rank() * 8, 8);
      // (scaled up: the FP16 and BF16 roundings show)
      (cross_entropy(ddp(x), y) * 1000.0).backward();
      (cross_entropy((*local)(x), y) * 1000.0).backward();
      auto got = net->parameters(), mine = local->parameters();
      for (size_t k = 0; k < got.size(); ++k) {
        auto g = pg().all_gather(mine[k].grad().to(Device::CPU()));
        Tensor expect;
        if (predivide)
          expect = ((g[0].to(rd) * 0.5).to(rd) + (g[1].to(rd) * 0.5).to(rd)).to(rd).to(DType::Float32);
        else
          expect = (g[0].to(rd) + g[1].to(rd)).to(rd).to(DType::Float32) * 0.5;
        EXPECT_TRUE(same_bits(got[k].grad(), expect)) << dtype_name(rd) << (predivide ? " predivide" : "")
                                                      << " parameter " << k << " on rank " << pg().rank();
      }
    }
  }
}

// ZeRO-1 on a CUDA model (its reduce_scatter and all_gather_into on NCCL): bit for bit DDP with
// the unsharded optimizer, clipping by the inf-norm over every shard included, and its state_dict the
// unsharded one's.
TEST_F(TwoRanksCuda, ZeroRedundancyOptimizerMatchesDDPBitForBit) {
  const distributed::DataParallelOptions small{.bucket_cap_bytes = 1024, .first_bucket_cap_bytes = 256};
  auto adam = [](std::vector<optim::ParamGroup> g) {
    return std::make_unique<optim::Adam>(std::move(g), optim::AdamOptions{.lr = 0.01, .weight_decay = 0.01});
  };
  for (DType dt : {DType::Float64, DType::Float32}) {
    auto run = [&](bool zero) {
      auto net = dist_test::make_mlp(13, dt);
      net->to(dev_);
      distributed::DistributedDataParallel ddp(net, pg(), small);
      std::unique_ptr<distributed::ZeroRedundancyOptimizer> sharded;
      std::unique_ptr<optim::Optimizer> plain;
      if (zero)
        sharded = std::make_unique<distributed::ZeroRedundancyOptimizer>(ddp, adam);
      else
        plain = adam({optim::ParamGroup(net->parameters())});
      optim::Optimizer& opt = zero ? sharded->optimizer() : *plain;
      std::vector<double> norms;
      for (int step = 0; step < 3; ++step) {
        opt.zero_grad();
        auto gb = dist_test::global_batch(16, step, dt);
        Tensor x = gb.x.to(dev_).narrow(0, pg().rank() * 8, 8), y = gb.y.to(dev_).narrow(0, pg().rank() * 8, 8);
        cross_entropy(ddp(x), y).backward();
        // The inf-norm: a max, the same bits however the shards split it (a 2-norm's sum is not).
        norms.push_back(zero ? sharded->clip_grad_norm_(0.01, INFINITY)
                             : optim::clip_grad_norm_(net->parameters(), 0.01, INFINITY));
        opt.step();
      }
      std::vector<Tensor> params;
      for (const Tensor& p : net->parameters()) params.push_back(p.to(Device::CPU()));
      StateDict sd = zero ? sharded->state_dict() : opt.state_dict();
      return std::make_tuple(params, norms, sd);
    };
    auto [p_ddp, n_ddp, sd_ddp] = run(false);
    auto [p_zero, n_zero, sd_zero] = run(true);
    ASSERT_EQ(p_ddp.size(), p_zero.size());
    for (size_t k = 0; k < p_ddp.size(); ++k)
      EXPECT_TRUE(same_bits(p_ddp[k], p_zero[k])) << dtype_name(dt) << " parameter " << k << " on rank " << pg().rank();
    EXPECT_EQ(n_ddp, n_zero) << dtype_name(dt);
    for (double n : n_ddp) EXPECT_GT(n, 0.01) << "the clip must act";
    ASSERT_EQ(sd_ddp.size(), sd_zero.size()) << dtype_name(dt);
    for (const auto& [k, t] : sd_ddp) {
      auto it = sd_zero.find(k);
      ASSERT_NE(it, sd_zero.end()) << k;
      EXPECT_TRUE(same_bits(t, it->second)) << dtype_name(dt) << " " << k << ": " << t.describe() << " against "
                                             << it->second.describe();
    }
  }
}

}  // namespace
}  // namespace mixtape
