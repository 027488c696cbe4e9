// tests/distributed_mpi/test_any_ranks.cpp — cases that hold for any number of ranks; ctest runs
// them on 2 ranks (with the rest) and on 3 (distributed_three_ranks, under MIXTAPE_DIST_DEBUG=1,
// so every collective's kind, label and layout is also compared across the ranks): the
// collectives' values (reduce_scatter bit for bit all_reduce's chunk, all_gather_into the
// concatenation), gradients filling several buckets against the whole batch, and parameters
// unused on every rank or on some ranks only.
#include <gtest/gtest.h>

#include <cstring>

#include "common/error_of.h"
#include "distributed/dist_test_util.h"

namespace mixtape {
namespace {

using distributed::DistributedDataParallel;
using distributed::ReduceOp;
using testing::error_of;

distributed::ProcessGroup& pg() { return *distributed::world(); }

TEST(AnyRanks, CollectivesCombineEveryRanksValues) {
  const int w = pg().world_size(), r = pg().rank();
  ASSERT_GE(w, 2);
  Tensor s = tensor({r + 1.0, -1.0}, {2}, TensorOptions(DType::Float64));
  pg().all_reduce(s, ReduceOp::Sum);
  EXPECT_EQ(s.to_vector<double>(), (std::vector<double>{w * (w + 1) / 2.0, -1.0 * w}));
  Tensor m = tensor({static_cast<double>(r)}, {1});
  pg().all_reduce(m, ReduceOp::Max);
  EXPECT_EQ(m.to_vector<double>()[0], w - 1.0);
  Tensor b = tensor({static_cast<double>(r)}, {1});
  pg().broadcast(b, w - 1);
  EXPECT_EQ(b.to_vector<double>()[0], w - 1.0);
  auto parts = pg().all_gather(tensor({r * 10.0}, {1}));
  ASSERT_EQ(parts.size(), static_cast<size_t>(w));
  for (int k = 0; k < w; ++k) EXPECT_EQ(parts[static_cast<size_t>(k)].to_vector<double>()[0], k * 10.0);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  Tensor x = a.contiguous(), y = b.contiguous();
  return x.dtype() == y.dtype() && x.nbytes() == y.nbytes() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// Every rank's values differ and span magnitudes, so that the order of the additions and the
// 16-bit rounding after each one show in the low bits.
Tensor rank_values(int64_t n, DType dt, int rank) {
  Generator g(300 + static_cast<uint64_t>(rank));
  return (randn({n}, TensorOptions(DType::Float64), &g) * std::pow(10.0, rank % 3)).to(dt);
}

TEST(AnyRanks, ReduceScatterIsAllReducesChunkBitForBit) {
  const int w = pg().world_size(), r = pg().rank();
  const int64_t n = 7;  // per rank
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
      const Tensor in = rank_values(w * n, dt, r), in_before = in.clone();
      Tensor all = in.clone();
      pg().all_reduce(all, op);
      Tensor out = zeros({n}, TensorOptions(dt));
      pg().reduce_scatter(out, in, op);
      EXPECT_TRUE(same_bits(out, all.narrow(0, r * n, n))) << dtype_name(dt) << " " << distributed::reduce_op_name(op);
      EXPECT_TRUE(same_bits(in, in_before)) << "the input is left as it was";
    }
  }
  // A 16-bit sum is rounded to 16 bits: 2048 (rank 0) + 1 (rank 1) + 0 (the others) is 2048 in
  // FP16 (ties to even), whatever the order of the additions.
  Tensor h = full({w * 2}, r == 0 ? 2048.0 : r == 1 ? 1.0 : 0.0, TensorOptions(DType::Float16));
  Tensor got = zeros({2}, TensorOptions(DType::Float16));
  pg().reduce_scatter(got, h);
  EXPECT_EQ(got.to_vector<double>(), (std::vector<double>{2048.0, 2048.0}));
}

TEST(AnyRanks, AllGatherIntoIsTheConcatenationInRankOrder) {
  const int w = pg().world_size(), r = pg().rank();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    const Tensor in = rank_values(6, dt, r).view({2, 3});
    Tensor out = zeros({w * 6}, TensorOptions(dt));
    pg().all_gather_into(out, in);
    auto parts = pg().all_gather(in);
    for (int k = 0; k < w; ++k)
      EXPECT_TRUE(same_bits(out.narrow(0, k * 6, 6), parts[static_cast<size_t>(k)].view({6}))) << dtype_name(dt) << " rank " << k;
    EXPECT_TRUE(same_bits(out.narrow(0, r * 6, 6), in.view({6})));
    // In place: the input is this rank's chunk of the output (torch's usual ZeRO layout).
    Tensor flat = zeros({w * 6}, TensorOptions(dt));
    flat.narrow(0, r * 6, 6).copy_(in.view({6}));
    pg().all_gather_into(flat, flat.narrow(0, r * 6, 6));
    EXPECT_TRUE(same_bits(flat, out)) << dtype_name(dt);
  }
  // A strided output is staged and written back by wait().
  Tensor wide = zeros({w * 2, 2}, TensorOptions(DType::Float64));
  pg().all_gather_into(wide.select(1, 1), tensor({r * 1.0, r + 0.5}, {2}, TensorOptions(DType::Float64)));
  for (int k = 0; k < w; ++k) {
    EXPECT_EQ(wide.select(1, 1).to_vector<double>()[static_cast<size_t>(2 * k)], k * 1.0);
    EXPECT_EQ(wide.select(1, 1).to_vector<double>()[static_cast<size_t>(2 * k + 1)], k + 0.5);
  }
  EXPECT_EQ(wide.select(1, 0).to_vector<double>(), std::vector<double>(static_cast<size_t>(w * 2), 0.0));
}

// Queued with the other collectives, in the order issued; observers see the new kinds (and under
// MIXTAPE_DIST_DEBUG, on 3 ranks, so do the descriptors).
TEST(AnyRanks, FlatCollectivesQueueInOrderWithTheOthers) {
  const int w = pg().world_size(), r = pg().rank();
  std::vector<std::string> seen;
  const int id = pg().add_collective_observer([&](const std::string& what) { seen.push_back(what); });
  Tensor in = full({w * 3}, r + 1.0);
  Tensor scattered = zeros({3}), summed = full({4}, 1.0), gathered = zeros({w * 3});
  const int64_t c0 = pg().collectives();
  auto a = pg().reduce_scatter_async(scattered, in, ReduceOp::Sum, "grads");
  auto b = pg().all_reduce_async(summed, ReduceOp::Sum, "loss");
  auto c = pg().all_gather_into_async(gathered, scattered, "params");  // reads scattered: after a, by order
  c.wait();
  b.wait();
  a.wait();
  pg().remove_collective_observer(id);
  const double total = w * (w + 1) / 2.0;
  EXPECT_EQ(scattered.to_vector<double>(), std::vector<double>(3, total));
  EXPECT_EQ(summed.to_vector<double>(), std::vector<double>(4, 1.0 * w));
  EXPECT_EQ(gathered.to_vector<double>(), std::vector<double>(static_cast<size_t>(w * 3), total));
  EXPECT_EQ(pg().collectives() - c0, pg().debug() ? 6 : 3);  // each with its descriptor exchange under debug
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0], "reduce_scatter (grads) of f32[" + std::to_string(w * 3) + "] into f32[3] sum");
  EXPECT_EQ(seen[1], "all_reduce (loss) of f32[4] sum");
  EXPECT_EQ(seen[2], "all_gather_into (params) of f32[3] into f32[" + std::to_string(w * 3) + "]");
}

TEST(AnyRanks, FlatCollectivesRefuseMismatchedShapesNamingTheRank) {
  const int w = pg().world_size(), r = pg().rank();
  const int64_t c0 = pg().collectives();
  EXPECT_EQ(error_of([&] { pg().reduce_scatter(zeros({2}), zeros({2 * w + 1})); }),
            "reduce_scatter on rank " + std::to_string(r) + ": the input must hold world_size (" + std::to_string(w) +
                ") x the output's 2 = " + std::to_string(2 * w) + " elements, got " + std::to_string(2 * w + 1) +
                " (f32[" + std::to_string(2 * w + 1) + "])");
  EXPECT_EQ(error_of([&] { pg().all_gather_into(zeros({2}), zeros({2})); }),
            "all_gather_into on rank " + std::to_string(r) + ": the output must hold world_size (" + std::to_string(w) +
                ") x the input's 2 = " + std::to_string(2 * w) + " elements, got 2 (f32[2])");
  EXPECT_EQ(pg().collectives(), c0);  // refused before anything was exchanged: the ranks stay in step
}

// Small caps: the MLP's four gradients fill one bucket each, reduced in bucket order on every
// rank (under MIXTAPE_DIST_DEBUG each bucket's label is compared across the ranks too).
TEST(AnyRanksDDP, GradientsFillingSeveralBucketsEqualTheWholeBatchs) {
  const int w = pg().world_size(), r = pg().rank();
  const int64_t n = 12 * w, local = 12;
  auto ref = dist_test::make_mlp(21, DType::Float64), inner = dist_test::make_mlp(21, DType::Float64);
  DistributedDataParallel ddp(inner, pg(), {.bucket_cap_bytes = 8, .first_bucket_cap_bytes = 8});
  ASSERT_EQ(ddp.bucket_layout().size(), 4u);
  // Reverse registration order: the last parameter (backward's first gradient) is bucket 0's.
  EXPECT_EQ(ddp.bucket_layout()[0], (std::vector<std::string>{inner->named_parameters().back().first}));
  auto gb = dist_test::global_batch(n, 0, DType::Float64);
  cross_entropy((*ref)(gb.x), gb.y).backward();
  cross_entropy(ddp(gb.x.narrow(0, r * local, local)), gb.y.narrow(0, r * local, local)).backward();
  EXPECT_EQ(ddp.last_stats().buckets, 4);
  auto a = ref->named_parameters(), b = inner->named_parameters();
  for (size_t k = 0; k < a.size(); ++k)
    EXPECT_LE(dist_test::max_abs_diff(a[k].second.grad(), b[k].second.grad()),
              1e-14 * (1.0 + dist_test::max_abs(a[k].second.grad())))
        << a[k].first;
}

// dist_test::PartlyUsed: "a" is used everywhere, "b" by rank 0 only, "c" by no rank.
TEST(AnyRanksDDP, UnusedParametersGetNoGradientAndPartlyUsedOnesTheAverage) {
  const int w = pg().world_size(), r = pg().rank();
  auto net = std::make_shared<dist_test::PartlyUsed>(DType::Float64);
  DistributedDataParallel ddp(net, pg());
  optim::SGD opt(net->parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1});
  const Tensor c_before = net->c->parameters()[0].clone();
  Generator g(7 + static_cast<uint64_t>(r));
  Tensor x = randn({5, 4}, TensorOptions(DType::Float64), &g);
  net->use_b = r == 0;
  ddp(x).sum().backward();
  for (const Tensor& p : net->c->parameters()) EXPECT_FALSE(p.grad().defined()) << "rank " << r;
  // b: rank 0's gradient (the only one) over the world size, on every rank.
  Generator g0(7);
  Tensor x0 = randn({5, 4}, TensorOptions(DType::Float64), &g0);
  // The loss sums the 5 x 3 outputs: each row of b's weight gets the column sums of x, its bias 5.
  Tensor want_w = ones({3, 1}, TensorOptions(DType::Float64)) * sum(x0, {0}, true) * (1.0 / w);
  Tensor want_b = full({3}, 5.0 / w, TensorOptions(DType::Float64));
  ASSERT_TRUE(net->b->parameters()[0].grad().defined()) << "rank " << r;
  EXPECT_LE(dist_test::max_abs_diff(net->b->parameters()[0].grad(), want_w), 1e-14);
  EXPECT_LE(dist_test::max_abs_diff(net->b->parameters()[1].grad(), want_b), 1e-14);
  opt.step();
  // The optimizer skips c: no weight decay, no momentum without a gradient (as in PyTorch).
  EXPECT_EQ(net->c->parameters()[0].to_vector<double>(), c_before.to_vector<double>());
}

// gradient_as_bucket_view against the default, bit for bit, over steps that zero the gradients
// to none, zero them in place, and accumulate under no_sync (several buckets, parameters split
// between chunks, one used on rank 0 only, one by no rank); and each reduced .grad is its place
// in the bucket: a bucket's gradients lie back to back in one buffer.
TEST(AnyRanksDDP, GradientAsBucketViewIsBitIdenticalAndTheGradientsLiveInTheBuckets) {
  const int w = pg().world_size(), r = pg().rank();
  struct Run {
    std::vector<std::vector<Tensor>> grads, params;  // per step
  };
  auto train = [&](bool view, bool partly) {
    std::shared_ptr<nn::Module> net;
    std::shared_ptr<dist_test::PartlyUsed> pu;
    if (partly) {
      pu = std::make_shared<dist_test::PartlyUsed>(DType::Float64);
      pu->use_b = r == 0;
      net = pu;
    } else {
      net = dist_test::make_mlp(21, DType::Float32);
    }
    DistributedDataParallel ddp(net, pg(), {.bucket_cap_bytes = 4000, .first_bucket_cap_bytes = 100,
                                            .gradient_as_bucket_view = view});
    optim::SGD opt(net->parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
    Run out;
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad(/*set_to_none=*/step != 1);
      auto gb = dist_test::global_batch(8 * w * 2, step, partly ? DType::Float64 : DType::Float32);
      auto loss = [&](int m) {
        const Tensor x = gb.x.narrow(0, (m * w + r) * 8, 8);
        return partly ? ddp(x.narrow(1, 0, 4)).sum() : cross_entropy(ddp(x), gb.y.narrow(0, (m * w + r) * 8, 8));
      };
      if (step == 2) {
        auto ns = ddp.no_sync();
        loss(0).backward();
      }
      loss(1).backward();
      out.grads.emplace_back();
      for (const Tensor& p : net->parameters()) out.grads.back().push_back(p.grad().defined() ? p.grad().clone() : Tensor());
      if (view) {
        // Each bucket's used gradients, in bucket order, are adjacent in memory.
        auto named = net->named_parameters();
        for (const auto& bucket : ddp.bucket_layout()) {
          const char* expect = nullptr;
          for (const std::string& name : bucket) {
            Tensor p;
            for (const auto& [n, t] : named)
              if (n == name) p = t;
            const Tensor g = p.grad();
            if (!g.defined()) {
              expect = nullptr;
              continue;
            }
            if (expect) {
              EXPECT_EQ(static_cast<const char*>(g.data_ptr()), expect) << name << " step " << step;
            }
            expect = static_cast<const char*>(g.data_ptr()) + g.nbytes();
          }
        }
      }
      opt.step();
      out.params.emplace_back();
      for (const Tensor& p : net->parameters()) out.params.back().push_back(p.clone());
    }
    return out;
  };
  for (bool partly : {false, true}) {
    const Run a = train(false, partly), b = train(true, partly);
    for (size_t step = 0; step < a.grads.size(); ++step)
      for (size_t k = 0; k < a.grads[step].size(); ++k) {
        ASSERT_EQ(a.grads[step][k].defined(), b.grads[step][k].defined()) << "step " << step << " parameter " << k;
        if (a.grads[step][k].defined()) {
          EXPECT_TRUE(same_bits(a.grads[step][k], b.grads[step][k])) << "partly " << partly << " step " << step << " grad " << k;
        }
        EXPECT_TRUE(same_bits(a.params[step][k], b.params[step][k])) << "partly " << partly << " step " << step << " param " << k;
      }
  }
  auto net = dist_test::make_mlp(21);
  DistributedDataParallel ddp(net, pg(), {.gradient_as_bucket_view = true});
  EXPECT_EQ(error_of([&] { ddp.shard_gradients([](size_t, const Tensor&, const std::vector<bool>&) {}); }),
            "DistributedDataParallel::shard_gradients: gradient_as_bucket_view is on; a ZeroRedundancyOptimizer's "
            "shards hold the reduced gradients and the parameters keep none (make the DistributedDataParallel without "
            "it)");
}

}  // namespace
}  // namespace mixtape
