// tests/distributed_mpi/test_zero_redundancy.cpp — ZeroRedundancyOptimizer (ZeRO-1) against
// DistributedDataParallel with the unsharded optimizer, on 2 ranks and on 3 (AnyRanks*: ctest runs
// them in distributed_two_ranks and distributed_three_ranks): bit for bit in FP64, FP32 and 16 bits
// over several buckets of odd sizes, with accumulation and LR schedules; the GradScaler's skip on a
// rank whose shard is clean; parameters unused on some or all ranks; clipping by the global norm;
// state of about 1/N per rank; the gathered state dict and its resumes on this world size and on a
// world of one.
#include <gtest/gtest.h>

#include <cstring>

#include "common/error_of.h"
#include "distributed/backend.h"
#include "distributed/dist_test_util.h"

namespace mixtape {
namespace {

using distributed::DistributedDataParallel;
using distributed::ZeroRedundancyOptimizer;
using testing::error_of;

distributed::ProcessGroup& pg() { return *distributed::world(); }

bool same_bits(const Tensor& a, const Tensor& b) {
  Tensor x = a.contiguous(), y = b.contiguous();
  return x.dtype() == y.dtype() && x.nbytes() == y.nbytes() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// MLP 20 -> 7 -> 5 -> 10: parameters of 140, 7, 35, 5, 50 and 10 elements, split between ranks
// at odd places.
std::shared_ptr<models::MLP> make_net(DType dt) {
  manual_seed(31);
  auto m = std::make_shared<models::MLP>(20, std::vector<int64_t>{7, 5}, 10);
  m->to(dt);
  return m;
}
// Small caps: several buckets, most of several parameters.
const distributed::DataParallelOptions kSmallBuckets{.bucket_cap_bytes = 256, .first_bucket_cap_bytes = 64};

using Factory = ZeroRedundancyOptimizer::OptimizerFactory;

struct TrainRun {
  DType dt = DType::Float32;
  Factory make;
  bool two_groups = false;  // weights and biases apart, with their own lr and weight decay
  int accumulate = 1;       // micro-batches per step, all but the last under no_sync
  double clip = 0;          // max_norm (0: none)
  double clip_norm_type = 2.0;
  bool schedule = false;    // StepLR(2, 0.5)
  int steps = 3;
  distributed::DataParallelOptions ddp = kSmallBuckets;
};

struct Result {
  std::vector<Tensor> params;
  std::vector<double> norms;  // the clip's total norm per step
  int64_t state_bytes = 0;    // this rank's optimizer's
};

// DDP over `group` with the unsharded optimizer (zero = false) or with ZeroRedundancyOptimizer.
struct Trainer {
  Trainer(const TrainRun& r, bool zero, distributed::ProcessGroup& g = pg()) : run(r), group(g) {
    net = make_net(run.dt);
    ddp = std::make_unique<DistributedDataParallel>(net, group, run.ddp);
    std::vector<optim::ParamGroup> groups;
    if (run.two_groups) {
      std::vector<Tensor> weights, biases;
      for (const Tensor& p : net->parameters()) (p.dim() == 2 ? weights : biases).push_back(p);
      groups.emplace_back(weights);
      groups.emplace_back(biases, optim::HyperParams{{"lr", 0.03}, {"weight_decay", 0.0}});
    } else {
      groups.emplace_back(net->parameters());
    }
    if (zero)
      sharded = std::make_unique<ZeroRedundancyOptimizer>(*ddp, groups, run.make);
    else
      plain = run.make(groups);
    opt = zero ? &sharded->optimizer() : plain.get();
    if (run.schedule) sched = std::make_unique<optim::StepLR>(*opt, 2, 0.5);
  }
  // One optimizer step on step `index`'s global batch, this rank's share of each micro-batch.
  void step(int index) {
    const int w = group.world_size(), r = group.rank();
    const int64_t local = 6;  // samples per rank and micro-batch
    opt->zero_grad();
    auto gb = dist_test::global_batch(local * w * run.accumulate, index, run.dt);
    for (int m = 0; m < run.accumulate; ++m) {
      const int64_t at = (m * w + r) * local;
      auto loss = [&] {
        return cross_entropy((*ddp)(gb.x.narrow(0, at, local)).to(DType::Float32), gb.y.narrow(0, at, local));
      };
      if (m + 1 < run.accumulate) {
        auto guard = ddp->no_sync();
        loss().backward();
      } else {
        loss().backward();
      }
    }
    if (run.clip > 0)
      norms.push_back(sharded ? sharded->clip_grad_norm_(run.clip, run.clip_norm_type)
                              : optim::clip_grad_norm_(net->parameters(), run.clip, run.clip_norm_type));
    opt->step();
    if (sched) sched->step();
  }
  StateDict state_dict() { return sharded ? sharded->state_dict() : opt->state_dict(); }
  void load_state_dict(const StateDict& sd) { sharded ? sharded->load_state_dict(sd) : opt->load_state_dict(sd); }
  Result result() const {
    Result out{.params = {}, .norms = norms, .state_bytes = opt->state_bytes()};
    for (const Tensor& p : net->parameters()) out.params.push_back(p.clone());
    return out;
  }

  const TrainRun run;
  distributed::ProcessGroup& group;
  std::shared_ptr<models::MLP> net;
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<optim::Optimizer> plain;
  std::unique_ptr<ZeroRedundancyOptimizer> sharded;  // destroyed before ddp
  optim::Optimizer* opt = nullptr;
  std::unique_ptr<optim::StepLR> sched;
  std::vector<double> norms;
};

// Trains run.steps steps of DDP with the unsharded optimizer (zero = false) or with
// ZeroRedundancyOptimizer, on the same data.
Result train(const TrainRun& run, bool zero) {
  Trainer t(run, zero);
  for (int step = 0; step < run.steps; ++step) t.step(step);
  return t.result();
}

void expect_same_params(const Result& a, const Result& b, const std::string& what) {
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t k = 0; k < a.params.size(); ++k)
    EXPECT_TRUE(same_bits(a.params[k], b.params[k]))
        << what << ": parameter " << k << " differs by " << dist_test::max_abs_diff(a.params[k], b.params[k])
        << " on rank " << pg().rank();
}

Factory adam(double wd = 0.0, bool amsgrad = false) {
  return [=](std::vector<optim::ParamGroup> g) {
    return std::make_unique<optim::Adam>(std::move(g), optim::AdamOptions{.lr = 0.01, .weight_decay = wd, .amsgrad = amsgrad});
  };
}
Factory adamw() {
  return [](std::vector<optim::ParamGroup> g) {
    return std::make_unique<optim::AdamW>(std::move(g), optim::AdamWOptions{.lr = 0.01});
  };
}
Factory sgd() {
  return [](std::vector<optim::ParamGroup> g) {
    return std::make_unique<optim::SGD>(std::move(g),
                                        optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
  };
}

TEST(AnyRanksZero, ShardedStepsAreBitIdenticalToDDPsInFp64AndFp32) {
  for (DType dt : {DType::Float64, DType::Float32}) {
    const std::vector<std::pair<const char*, Factory>> opts{
        {"Adam", adam()}, {"Adam amsgrad wd", adam(0.01, true)}, {"AdamW", adamw()}, {"SGD nesterov", sgd()}};
    for (const auto& [name, make] : opts) {
      TrainRun run{.dt = dt, .make = make};
      const std::string what = std::string(name) + " " + std::string(dtype_name(dt));
      expect_same_params(train(run, false), train(run, true), what);
    }
  }
}

// A 16-bit model: the shard's FP32 masters, their RNE all-gathered in 16 bits.
// Each reduction precision (reduce_dtype, with and without predivision: the loss-scaled FP16
// reduction divides after the sum, in FP32) shards as DDP reduces: the same steps, bit for bit.
TEST(AnyRanksZero, EachReductionPrecisionMatchesDDP) {
  for (DType rd : {DType::Float32, DType::BFloat16, DType::Float16})
    for (bool predivide : {true, false}) {
      TrainRun run{.dt = DType::Float32, .make = adam()};
      run.ddp.reduce_dtype = rd;
      run.ddp.predivide = predivide;
      expect_same_params(train(run, false), train(run, true),
                         std::string(dtype_name(rd)) + (predivide ? " predivided" : " divided after the sum"));
    }
}

TEST(AnyRanksZero, SixteenBitModelsGetTheMastersRoundingOnEveryRank) {
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    TrainRun run{.dt = dt, .make = adam()};
    const Result a = train(run, false), b = train(run, true);
    expect_same_params(a, b, std::string(dtype_name(dt)));
    EXPECT_EQ(b.params[0].dtype(), dt);
  }
}

// A 16-bit gradient dtype the user chose (set_grad_dtype before the optimizer: the unsharded
// optimizer keeps it, docs/AMP.md "Master weights") holds on the shard's pieces too: the averaged
// gradient is rounded to it as DDP rounds the parameter's .grad, so the steps stay DDP's.
TEST(AnyRanksZero, AnExplicitSixteenBitGradDtypeIsTheShardsToo) {
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    std::vector<Result> results;
    for (bool zero : {false, true}) {
      manual_seed(31);
      auto net = std::make_shared<models::MLP>(20, std::vector<int64_t>{7, 5}, 10);
      net->to(dt);
      for (const Tensor& p : net->parameters()) p.set_grad_dtype(dt);
      // FP32 buckets (the default for 16-bit gradients): the rounding to the grad dtype is visible.
      DistributedDataParallel ddp(net, pg(), kSmallBuckets);
      std::unique_ptr<optim::Optimizer> plain;
      std::unique_ptr<ZeroRedundancyOptimizer> sharded;
      if (zero)
        sharded = std::make_unique<ZeroRedundancyOptimizer>(ddp, adam());
      else
        plain = adam()({optim::ParamGroup(net->parameters())});
      optim::Optimizer& opt = zero ? sharded->optimizer() : *plain;
      const int w = pg().world_size(), r = pg().rank();
      for (int step = 0; step < 3; ++step) {
        auto gb = dist_test::global_batch(6 * w, step, dt);
        opt.zero_grad();
        cross_entropy(ddp(gb.x.narrow(0, 6 * r, 6)).to(DType::Float32), gb.y.narrow(0, 6 * r, 6)).backward();
        if (zero) {
          for (const auto& pc : sharded->pieces()) {
            if (pc.shard.grad().defined()) {
              EXPECT_EQ(pc.shard.grad().dtype(), dt) << pc.shard.name();
            }
          }
        }
        opt.step();
      }
      Result res;
      for (const Tensor& p : net->parameters()) res.params.push_back(p.clone());
      results.push_back(res);
    }
    expect_same_params(results[0], results[1], std::string("explicit grad dtype ") + std::string(dtype_name(dt)));
  }
}

TEST(AnyRanksZero, AccumulationGroupsAndSchedulesMatchDDP) {
  TrainRun run{.dt = DType::Float32, .make = adam(0.01), .two_groups = true, .accumulate = 3, .schedule = true, .steps = 4};
  expect_same_params(train(run, false), train(run, true), "Adam, 2 groups, 3 micro-batches, StepLR");
  run.make = sgd();
  expect_same_params(train(run, false), train(run, true), "SGD, 2 groups, 3 micro-batches, StepLR");
}

// One bucket (the default caps): the last bias, its first 10 elements, lies in rank 0's chunk
// only, so its group is empty on the other ranks: they get an empty placeholder, their schedule
// still writes that group's lr, and the steps stay DDP's.
TEST(AnyRanksZero, AGroupARankHoldsNothingOfGetsAPlaceholder) {
  const int r = pg().rank();
  std::vector<std::vector<Tensor>> after;
  for (bool zero : {false, true}) {
    auto net = make_net(DType::Float32);
    DistributedDataParallel ddp(net, pg());
    ASSERT_EQ(ddp.bucket_layout().size(), 1u);
    std::vector<Tensor> rest = net->parameters();
    const Tensor last = rest.back();
    rest.pop_back();
    std::vector<optim::ParamGroup> groups{optim::ParamGroup(rest),
                                          optim::ParamGroup({last}, optim::HyperParams{{"lr", 0.03}})};
    std::unique_ptr<optim::Optimizer> plain;
    std::unique_ptr<ZeroRedundancyOptimizer> sharded;
    if (zero)
      sharded = std::make_unique<ZeroRedundancyOptimizer>(ddp, groups, adam());
    else
      plain = adam()(groups);
    optim::Optimizer& opt = zero ? sharded->optimizer() : *plain;
    if (zero) {
      ASSERT_EQ(opt.param_groups().size(), 2u);
      EXPECT_EQ(opt.param_groups()[1].params[0].numel(), r == 0 ? 10 : 0) << "rank " << r;
    }
    optim::StepLR sched(opt, 1, 0.5);
    for (int step = 0; step < 3; ++step) {
      auto gb = dist_test::global_batch(4, step);
      opt.zero_grad();
      cross_entropy(ddp(gb.x), gb.y).backward();
      opt.step();
      sched.step();
    }
    EXPECT_EQ(opt.param_groups()[1].lr(), 0.03 / 8);
    after.emplace_back();
    for (const Tensor& p : net->parameters()) after.back().push_back(p.clone());
  }
  for (size_t k = 0; k < after[0].size(); ++k) EXPECT_TRUE(same_bits(after[0][k], after[1][k])) << "parameter " << k;
}

// The global norm is the same sum of squares as the unsharded one, added in another order; the
// inf norm is a max, exact.
TEST(AnyRanksZero, ClippingUsesTheNormOfEveryShard) {
  for (DType dt : {DType::Float64, DType::Float32}) {
    TrainRun run{.dt = dt, .make = sgd(), .clip = 0.05};
    const Result a = train(run, false), b = train(run, true);
    ASSERT_EQ(a.norms.size(), b.norms.size());
    for (size_t s = 0; s < a.norms.size(); ++s) {
      EXPECT_GT(a.norms[s], run.clip) << "the clip must act";
      EXPECT_NEAR(b.norms[s], a.norms[s], 1e-13 * a.norms[s]) << dtype_name(dt) << " step " << s;
    }
    for (size_t k = 0; k < a.params.size(); ++k)
      EXPECT_LE(dist_test::max_abs_diff(a.params[k], b.params[k]), (dt == DType::Float32 ? 1e-6 : 1e-14) *
                                                                        (1 + dist_test::max_abs(a.params[k])))
          << dtype_name(dt) << " parameter " << k;
    run.clip_norm_type = INFINITY;
    run.clip = 0.01;
    const Result c = train(run, false), d = train(run, true);
    EXPECT_EQ(c.norms, d.norms) << dtype_name(dt);
    for (double n : c.norms) EXPECT_GT(n, run.clip);
    expect_same_params(c, d, "inf-norm clip " + std::string(dtype_name(dt)));
  }
}

TEST(AnyRanksZero, EachRankHoldsAboutOneNthOfTheState) {
  const int w = pg().world_size();
  for (DType dt : {DType::Float32, DType::BFloat16}) {
    TrainRun run{.dt = dt, .make = adam(), .steps = 1};
    const Result a = train(run, false);
    auto net = make_net(dt);
    DistributedDataParallel ddp(net, pg(), kSmallBuckets);
    ZeroRedundancyOptimizer zero(ddp, adam());
    zero.zero_grad();
    cross_entropy(ddp(dist_test::global_batch(4, 0, dt).x).to(DType::Float32),
                  dist_test::global_batch(4, 0, dt).y).backward();
    zero.step();
    // Masters (16 bits: 4 B) and two moments (4 B each) per element, shared out by bucket chunks.
    const int64_t elements = 140 + 7 + 35 + 5 + 50 + 10;
    EXPECT_EQ(a.state_bytes, elements * (dt == DType::Float32 ? 8 : 12)) << dtype_name(dt);
    EXPECT_EQ(zero.optimizer_state_bytes_all_ranks(), a.state_bytes) << dtype_name(dt);
    const int64_t buckets = static_cast<int64_t>(ddp.bucket_layout().size());
    EXPECT_LE(zero.optimizer_state_bytes(), (elements / w + buckets) * (dt == DType::Float32 ? 8 : 12))
        << dtype_name(dt) << ": at most ceil(n / N) of each bucket's n";
    // The last ranks' chunks are the short ones: up to N - 1 elements per bucket fewer.
    EXPECT_GE(zero.optimizer_state_bytes(), (elements / w - (w - 1) * buckets) * (dt == DType::Float32 ? 8 : 12));
  }
}

// The targets on SmallCNN (fc1 holds 401,408 of its 421,642 weights): Adam's state per
// rank at most 0.55x the unsharded at N = 2, 0.4x at N = 3 (1/N plus a bucket's rounding).
TEST(AnyRanksZero, SmallCnnStatePerRankMeetsTheTargets) {
  const int w = pg().world_size();
  manual_seed(3);
  auto net = std::make_shared<models::SmallCNN>(10, 1);
  DistributedDataParallel ddp(net, pg());
  ZeroRedundancyOptimizer zero(ddp, adam());
  Generator g(11);
  zero.zero_grad();
  cross_entropy(ddp(randn({2, 1, 28, 28}, {}, &g)), tensor({1.0, 7.0}, {2}, TensorOptions(DType::Int64))).backward();
  zero.step();
  const double ratio = static_cast<double>(zero.optimizer_state_bytes()) /
                       static_cast<double>(zero.optimizer_state_bytes_all_ranks());
  EXPECT_LE(ratio, w == 2 ? 0.55 : w == 3 ? 0.4 : 1.0 / w + 0.05) << w << " ranks";
  EXPECT_EQ(zero.optimizer_state_bytes_all_ranks(), 421642 * 8);
}

// Rank 0's shard gets an inf; every other rank's shard is clean, and still skips: the scaler's
// found_inf is reduced over the ranks (as the unsharded DDP run, whose all-reduced gradient holds
// the inf on every rank, skips).
TEST(AnyRanksZero, AnInfInOneShardSkipsTheStepOnEveryRank) {
  const int r = pg().rank();
  auto net = make_net(DType::Float32);
  DistributedDataParallel ddp(net, pg(), kSmallBuckets);
  ZeroRedundancyOptimizer zero(ddp, adam());
  amp::GradScaler scaler({.init_scale = 1024.0});
  scaler.set_found_inf_reducer(distributed::found_inf_reducer(pg()));
  std::vector<Tensor> before;
  for (const Tensor& p : net->parameters()) before.push_back(p.clone());
  auto gb = dist_test::global_batch(8, 0);
  zero.zero_grad();
  scaler.scale(cross_entropy(ddp(gb.x), gb.y)).backward();
  ASSERT_FALSE(zero.pieces().empty());
  if (r == 0) {
    Tensor g = zero.pieces().front().shard.grad();
    g.narrow(0, 0, 1).fill_(INFINITY);
  } else {
    for (const auto& pc : zero.pieces()) {
      if (!pc.shard.grad().defined()) continue;
      for (double v : pc.shard.grad().to_vector<double>()) ASSERT_TRUE(std::isfinite(v)) << "rank " << r;
    }
  }
  EXPECT_FALSE(scaler.step(zero.optimizer())) << "rank " << r;
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 512.0);
  for (size_t k = 0; k < before.size(); ++k) EXPECT_TRUE(same_bits(before[k], net->parameters()[k])) << k;
  EXPECT_EQ(zero.optimizer().state_bytes(), 0) << "no state: the step never ran";
  // The next iteration is clean and steps everywhere.
  zero.zero_grad();
  scaler.scale(cross_entropy(ddp(gb.x), gb.y)).backward();
  EXPECT_TRUE(scaler.step(zero.optimizer()));
  scaler.update();
  EXPECT_FALSE(same_bits(before[0], net->parameters()[0]));
}

// A one-element model: rank 0 owns the whole of it, every other rank's shard is empty (its
// optimizer holds only its placeholder, which never gets a gradient). Every rank still takes part
// in the found_inf reduction and decides alike: all step on a clean iteration, all skip when rank
// 0's element is inf (PyTorch's ShardedGradScaler gives a rank without gradients a zero flag).
TEST(AnyRanksZero, ARankWithAnEmptyShardDecidesWithTheOthers) {
  const int r = pg().rank();
  manual_seed(3);
  auto net = std::make_shared<nn::Linear>(1, 1, /*bias=*/false);
  DistributedDataParallel ddp(net, pg());
  ZeroRedundancyOptimizer zero(ddp, sgd());
  ASSERT_EQ(zero.pieces().empty(), r != 0);
  amp::GradScaler scaler({.init_scale = 1024.0});
  scaler.set_found_inf_reducer(distributed::found_inf_reducer(pg()));
  const Tensor x = full({2, 1}, 1.0 + r);
  const Tensor before = net->weight.clone();
  zero.zero_grad();
  scaler.scale(ddp(x).sum()).backward();
  scaler.unscale_(zero.optimizer());
  EXPECT_GT(zero.clip_grad_norm_(1e9), 0.0) << "rank " << r << ": the norm of every shard";
  EXPECT_TRUE(scaler.step(zero.optimizer())) << "rank " << r;
  scaler.update();
  EXPECT_FALSE(same_bits(before, net->weight)) << "rank " << r << ": the all-gather brought rank 0's update";
  const Tensor stepped = net->weight.clone();
  zero.zero_grad();
  scaler.scale(ddp(x).sum()).backward();
  if (r == 0) zero.pieces().front().shard.grad().fill_(INFINITY);
  EXPECT_FALSE(scaler.step(zero.optimizer())) << "rank " << r;
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 512.0) << "rank " << r;
  EXPECT_TRUE(same_bits(stepped, net->weight)) << "rank " << r;
}

// A GradScaler without the found_inf reducer decides on this rank's shard alone: ranks would
// disagree (one steps and waits in the all-gather, one skips) the first time one shard overflows.
// Refused at the first step, on every rank that steps, before anything changes; with the reducer
// the same step runs. (A world of one has nothing to disagree with.)
TEST(AnyRanksZero, AScalerWithoutTheFoundInfReducerIsRefusedAtTheFirstStep) {
  const int r = pg().rank(), w = pg().world_size();
  auto net = make_net(DType::Float32);
  DistributedDataParallel ddp(net, pg(), kSmallBuckets);
  ZeroRedundancyOptimizer zero(ddp, adam());
  amp::GradScaler scaler({.init_scale = 1024.0});
  std::vector<Tensor> before;
  for (const Tensor& p : net->parameters()) before.push_back(p.clone());
  auto gb = dist_test::global_batch(8, 0);
  zero.zero_grad();
  scaler.scale(cross_entropy(ddp(gb.x), gb.y)).backward();
  EXPECT_EQ(error_of([&] { scaler.step(zero.optimizer()); }),
            "ZeroRedundancyOptimizer: rank " + std::to_string(r) + " of " + std::to_string(w) +
                ": a GradScaler steps the shard's optimizer, but its inf/NaN flag was not reduced over the ranks "
                "since the last backward. Each rank holds only its shard's gradients, so the ranks would disagree on "
                "skipping (one steps and waits in the all-gather for one that skipped). Call "
                "scaler.set_found_inf_reducer(distributed::found_inf_reducer(group)) before the first step. Refused "
                "before the step changed anything");
  for (size_t k = 0; k < before.size(); ++k) EXPECT_TRUE(same_bits(before[k], net->parameters()[k])) << k;
  EXPECT_EQ(zero.optimizer().state_bytes(), 0);
  // The next iteration, with the reducer: the step runs everywhere.
  amp::GradScaler fixed({.init_scale = 1024.0});
  fixed.set_found_inf_reducer(distributed::found_inf_reducer(pg()));
  zero.zero_grad();
  fixed.scale(cross_entropy(ddp(gb.x), gb.y)).backward();
  EXPECT_TRUE(fixed.step(zero.optimizer()));
  fixed.update();
  EXPECT_FALSE(same_bits(before[0], net->parameters()[0]));
  // A plain step (no scaler, nothing to decide) needs no reduction.
  zero.zero_grad();
  cross_entropy(ddp(gb.x), gb.y).backward();
  EXPECT_NO_THROW(zero.step());
}

// The gathered dict is the unsharded optimizer's, key for key and bit for bit; loaded, it resumes
// sharded on this world size and on a world of one (one shard: the whole model, cut differently),
// exactly as the unsharded optimizer resumes from it.
TEST(AnyRanksZero, StateDictIsTheUnshardedOnesAndResumesOnAnyWorldSize) {
  TrainRun run{.dt = DType::BFloat16, .make = adam(0.01, true), .two_groups = true};
  Trainer plain(run, false), sharded(run, true);
  for (int s = 0; s < 2; ++s) plain.step(s), sharded.step(s);
  const StateDict sd = plain.state_dict();
  const StateDict got = sharded.state_dict();
  std::vector<std::string> keys, got_keys;
  for (const auto& [k, t] : sd) keys.push_back(k);
  for (const auto& [k, t] : got) got_keys.push_back(k);
  EXPECT_EQ(got_keys, keys);
  EXPECT_EQ(dist_test::hash_state(got), dist_test::hash_state(sd));
  ASSERT_TRUE(sd.count("state.0.exp_avg") && sd.count("state.0.master") && sd.count("state.5.max_exp_avg_sq"));

  auto resumed = [&](Trainer& t) {
    {
      autograd::NoGradGuard no_grad;
      for (size_t k = 0; k < t.net->parameters().size(); ++k) t.net->parameters()[k].copy_(plain.net->parameters()[k]);
    }
    t.load_state_dict(sd);
    for (int s = 2; s < 4; ++s) t.step(s);
    return t.result();
  };
  Trainer plain_n(run, false), sharded_n(run, true);
  const Result a = resumed(plain_n), b = resumed(sharded_n);
  expect_same_params(a, b, "resumed on " + std::to_string(pg().world_size()) + " ranks");
  EXPECT_EQ(dist_test::hash_state(sharded_n.state_dict()), dist_test::hash_state(plain_n.state_dict()));
  distributed::ProcessGroup one(distributed::make_single_backend(), {});
  Trainer plain_1(run, false, one), sharded_1(run, true, one);
  ASSERT_EQ(sharded_1.sharded->pieces().size(), 6u) << "one shard: every parameter whole";
  const Result c = resumed(plain_1), d = resumed(sharded_1);
  expect_same_params(c, d, "resumed on one process");
  EXPECT_FALSE(same_bits(c.params[0], a.params[0])) << "a world of one trains on its own batches";
}

// "a" is used everywhere, "b" by rank 0 only, "c" by no rank: the used counts reach every chunk,
// so each shard of b gets rank 0's gradient over N and c's pieces no gradient (the optimizer
// skips them: no weight decay, no momentum), as with DDP and the unsharded optimizer (dist_test::PartlyUsed).
TEST(AnyRanksZero, PartlyUsedAndUnusedParametersMatchDDP) {
  const int r = pg().rank();
  std::vector<std::vector<Tensor>> after;
  for (bool zero : {false, true}) {
    auto net = std::make_shared<dist_test::PartlyUsed>();
    DistributedDataParallel ddp(net, pg(), {.bucket_cap_bytes = 40, .first_bucket_cap_bytes = 40});
    std::unique_ptr<optim::Optimizer> plain;
    std::unique_ptr<ZeroRedundancyOptimizer> sharded;
    if (zero)
      sharded = std::make_unique<ZeroRedundancyOptimizer>(ddp, sgd());
    else
      plain = sgd()({optim::ParamGroup(net->parameters())});
    optim::Optimizer& opt = zero ? sharded->optimizer() : *plain;
    net->use_b = r == 0;
    for (int step = 0; step < 2; ++step) {
      Generator g(7 + static_cast<uint64_t>(r) + 10 * static_cast<uint64_t>(step));
      opt.zero_grad();
      ddp(randn({5, 4}, {}, &g)).sum().backward();
      opt.step();
    }
    after.emplace_back();
    for (const Tensor& p : net->parameters()) after.back().push_back(p.clone());
  }
  for (size_t k = 0; k < after[0].size(); ++k) EXPECT_TRUE(same_bits(after[0][k], after[1][k])) << "parameter " << k;
  manual_seed(5);
  auto fresh = std::make_shared<dist_test::PartlyUsed>();
  EXPECT_TRUE(same_bits(after[1][4], fresh->c->parameters()[0])) << "c is never updated";
}

// A parameter with no elements (no rank holds a piece of it) in a 16-bit model: the gathered
// dict still has its empty master, as the unsharded optimizer's has, and loads into one.
class WithEmpty : public nn::Module {
 public:
  WithEmpty() : nn::Module("WithEmpty") {
    w = register_parameter("w", full({3}, 0.5));
    e = register_parameter("e", zeros({2, 0}));
  }
  Tensor forward(const Tensor& x) override { return (w * x).sum() + e.sum(); }
  Tensor w, e;
};

TEST(AnyRanksZero, AnEmptyParameterKeepsItsMasterInTheStateDict) {
  auto net = std::make_shared<WithEmpty>();
  net->to(DType::BFloat16);
  DistributedDataParallel ddp(net, pg());
  ZeroRedundancyOptimizer zero(ddp, adam());
  zero.zero_grad();
  ddp(full({3}, 1.0, TensorOptions(DType::BFloat16))).to(DType::Float32).backward();
  zero.step();
  StateDict sd;
  ASSERT_EQ(error_of([&] { sd = zero.state_dict(); }), "(no error)");
  ASSERT_TRUE(sd.count("state.1.master"));
  EXPECT_EQ(sd.at("state.1.master").sizes(), (IntList{2, 0}));
  EXPECT_EQ(sd.at("state.1.master").dtype(), DType::Float32);
  auto copy = std::make_shared<WithEmpty>();
  copy->to(DType::BFloat16);
  optim::Adam plain(copy->parameters(), optim::AdamOptions{.lr = 0.01});
  EXPECT_EQ(error_of([&] { plain.load_state_dict(sd); }), "(no error)");
  EXPECT_EQ(error_of([&] { zero.load_state_dict(sd); }), "(no error)");
}

TEST(AnyRanksZero, RefusesWhatItCannotShard) {
  auto net = make_net(DType::Float32), other = make_net(DType::Float32);
  DistributedDataParallel ddp(net, pg(), kSmallBuckets);
  EXPECT_EQ(error_of([&] { ZeroRedundancyOptimizer z(ddp, {optim::ParamGroup(other->parameters())}, adam()); }),
            "ZeroRedundancyOptimizer: param group 0 holds f32[7, 20], which is not a trainable parameter of the "
            "DistributedDataParallel's module");
  auto stochastic = [](std::vector<optim::ParamGroup> g) {
    auto opt = std::make_unique<optim::Adam>(std::move(g));
    opt->set_stochastic_rounding(true);
    return opt;
  };
  EXPECT_EQ(error_of([&] { ZeroRedundancyOptimizer z(ddp, stochastic); }),
            "ZeroRedundancyOptimizer: the shard optimizer rounds stochastically; sharded steps support "
            "round-to-nearest only (every rank would draw the same random stream for different elements)");
  ZeroRedundancyOptimizer zero(ddp, adam());
  zero.optimizer().set_stochastic_rounding(true);
  EXPECT_EQ(error_of([&] { zero.step(); }),
            "ZeroRedundancyOptimizer: the shard optimizer rounds stochastically; sharded steps support "
            "round-to-nearest only (every rank would draw the same random stream for different elements)");
  zero.optimizer().set_stochastic_rounding(false);
  EXPECT_EQ(error_of([&] { ZeroRedundancyOptimizer z(ddp, adam()); }),
            "ZeroRedundancyOptimizer: this DistributedDataParallel already shards its gradients for another "
            "ZeroRedundancyOptimizer");
  // A DDP whose .grads are bucket views: the shards hold the reduced gradients instead. The
  // refused wrapper leaves nothing registered (the found_inf reduction after it touches nothing).
  DistributedDataParallel viewed(make_net(DType::Float32), pg(), {.gradient_as_bucket_view = true});
  EXPECT_EQ(error_of([&] { ZeroRedundancyOptimizer z(viewed, adam()); }),
            "DistributedDataParallel::shard_gradients: gradient_as_bucket_view is on; a ZeroRedundancyOptimizer's "
            "shards hold the reduced gradients and the parameters keep none (make the DistributedDataParallel without "
            "it)");
  EXPECT_FALSE(viewed.sharded());
  Tensor flag = zeros({});
  distributed::found_inf_reducer(pg())(flag);
  EXPECT_EQ(flag.item<float>(), 0.0f);
}

}  // namespace
}  // namespace mixtape
