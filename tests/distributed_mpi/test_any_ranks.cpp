// tests/distributed_mpi/test_any_ranks.cpp — cases that hold for any number of ranks; ctest runs
// them on 2 ranks (with the rest) and on 3 (distributed_three_ranks, under MIXTAPE_DIST_DEBUG=1,
// so every collective's kind, label and layout is also compared across the ranks): the
// collectives' values, gradients filling several buckets against the whole batch, and
// parameters unused on every rank or on some ranks only.
#include <gtest/gtest.h>

#include "distributed/dist_test_util.h"

namespace mixtape {
namespace {

using distributed::DistributedDataParallel;
using distributed::ReduceOp;

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

// "a" is used everywhere, "b" by rank 0 only, "c" by no rank.
class PartlyUsed : public nn::Module {
 public:
  PartlyUsed() : nn::Module("PartlyUsed") {
    manual_seed(5);
    a = register_module("a", std::make_shared<nn::Linear>(4, 3));
    b = register_module("b", std::make_shared<nn::Linear>(4, 3));
    c = register_module("c", std::make_shared<nn::Linear>(4, 3));
    to(DType::Float64);
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = (*a)(x);
    return use_b ? y + (*b)(x) : y;
  }
  std::shared_ptr<nn::Linear> a, b, c;
  bool use_b = true;
};

TEST(AnyRanksDDP, UnusedParametersGetNoGradientAndPartlyUsedOnesTheAverage) {
  const int w = pg().world_size(), r = pg().rank();
  auto net = std::make_shared<PartlyUsed>();
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

}  // namespace
}  // namespace mixtape
