// tests/distributed_mpi/test_two_ranks.cpp — two ranks under mpirun: the collectives' values,
// 16-bit rounding and overflow, refused mismatches, and DistributedDataParallel against one
// process training on the whole batch (FP64 to rounding, FP32 within the summation-order bound,
// the FP16 loss-scale trajectory), an inf on one rank only, no_sync, buffers, checkpointing,
// and bit-identical states on both ranks after training.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/error_of.h"
#include "distributed/dist_test_util.h"

namespace mixtape {
namespace {

using distributed::DistributedDataParallel;
using distributed::ReduceOp;
using testing::error_of;

distributed::ProcessGroup& pg() { return *distributed::world(); }
int rank() { return pg().rank(); }

TEST(TwoRanks, CollectivesCombineEveryRanksValues) {
  ASSERT_EQ(pg().world_size(), 2);
  ASSERT_STREQ(pg().backend_name(), "mpi");
  const double r = rank();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    auto make = [&] { return tensor({1.0 + r, -2.0 * (r + 1), 0.5}, {3}, TensorOptions(dt)); };
    Tensor s = make(), m = make(), a = make();
    pg().all_reduce(s, ReduceOp::Sum);
    pg().all_reduce(m, ReduceOp::Max);
    pg().all_reduce(a, ReduceOp::Avg);
    EXPECT_EQ(s.to_vector<double>(), (std::vector<double>{3.0, -6.0, 1.0})) << dtype_name(dt);
    EXPECT_EQ(m.to_vector<double>(), (std::vector<double>{2.0, -2.0, 0.5})) << dtype_name(dt);
    EXPECT_EQ(a.to_vector<double>(), (std::vector<double>{1.5, -3.0, 0.5})) << dtype_name(dt);
  }
  Tensor i = tensor({5.0 * (r + 1)}, {1}, TensorOptions(DType::Int64));
  pg().all_reduce(i, ReduceOp::Sum);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{15}));

  Tensor b = tensor({r, r + 10}, {2});
  pg().broadcast(b, 1);
  EXPECT_EQ(b.to_vector<double>(), (std::vector<double>{1.0, 11.0}));
  auto parts = pg().all_gather(tensor({r * 2}, {1}));
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].to_vector<double>()[0], 0.0);
  EXPECT_EQ(parts[1].to_vector<double>()[0], 2.0);
  EXPECT_EQ(pg().all_gather_string(rank() == 0 ? "r0" : "rank-one"), (std::vector<std::string>{"r0", "rank-one"}));
}

TEST(TwoRanks, SixteenBitSumsRoundOnceTheirOwnWayAndCanOverflow) {
  // 2048 + 1 = 2049 lies halfway between FP16's neighbours 2048 and 2050: ties to even -> 2048.
  Tensor h = tensor({rank() == 0 ? 2048.0 : 1.0, 40000.0}, {2}, TensorOptions(DType::Float16));
  pg().all_reduce(h, ReduceOp::Sum);
  auto hv = h.to_vector<double>();
  EXPECT_EQ(hv[0], 2048.0);
  EXPECT_TRUE(std::isinf(hv[1]));  // 80000 > 65504: the sum overflows where neither rank's value did
  // BF16: 256 + 1 -> 256 (spacing 2 at 256).
  Tensor bf = tensor({rank() == 0 ? 256.0 : 1.0}, {1}, TensorOptions(DType::BFloat16));
  pg().all_reduce(bf, ReduceOp::Sum);
  EXPECT_EQ(bf.to_vector<double>()[0], 256.0);
  // Max propagates NaN from either rank, in every float dtype.
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    Tensor m = tensor({rank() == 1 ? std::nan("") : 1.0}, {1}, TensorOptions(dt));
    pg().all_reduce(m, ReduceOp::Max);
    EXPECT_TRUE(std::isnan(m.to_vector<double>()[0])) << dtype_name(dt);
  }
}

TEST(TwoRanks, AsyncCollectivesCompleteInIssueOrderWhateverTheWaitOrder) {
  std::vector<Tensor> ts;
  std::vector<distributed::Work> works;
  for (int k = 0; k < 4; ++k) {
    ts.push_back(full({1000 * (k + 1)}, static_cast<double>(k + rank())));
    works.push_back(pg().all_reduce_async(ts.back(), ReduceOp::Sum, "k=" + std::to_string(k)));
  }
  for (int k = 3; k >= 0; --k) works[static_cast<size_t>(k)].wait();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(ts[static_cast<size_t>(k)].to_vector<double>().back(), 2.0 * k + 1.0);
}

TEST(TwoRanks, StridedTensorsAreReducedThroughACopyAndWrittenBack) {
  Tensor m = tensor({1.0, 2.0, 3.0, 4.0}, {2, 2});
  const uint32_t v0 = m.version();
  pg().all_reduce(m.select(1, 0), ReduceOp::Sum);  // the column [1, 3], strided
  EXPECT_EQ(m.to_vector<double>(), (std::vector<double>{2.0, 2.0, 6.0, 4.0}));
  EXPECT_GT(m.version(), v0);  // written back through copy_: the version counter moved
  Tensor c = tensor({1.0, 2.0}, {2});
  const uint32_t vc = c.version();
  pg().all_reduce(c, ReduceOp::Sum);  // contiguous: reduced in place, and the version moves too
  EXPECT_EQ(c.to_vector<double>(), (std::vector<double>{2.0, 4.0}));
  EXPECT_GT(c.version(), vc);
}

TEST(TwoRanks, MismatchedShapesAreRefusedNamingEveryRank) {
  Tensor t = zeros({rank() == 0 ? 2 : 3});
  const std::string msg = error_of([&] { pg().broadcast(t, 0); });
  EXPECT_NE(msg.find("rank 0: f32[2], rank 1: f32[3]"), std::string::npos) << msg;
}

TEST(TwoRanksDDP, ConstructionCopiesRankZerosParametersAndBuffers) {
  auto m = dist_test::make_mlp(100 + static_cast<uint64_t>(rank()));
  DistributedDataParallel ddp(m, pg());
  auto want = dist_test::make_mlp(100);
  auto a = m->parameters(), b = want->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].to_vector<double>(), b[i].to_vector<double>());
}

TEST(TwoRanksDDP, DifferentModelsAreRefusedWithTheDifferenceNamed) {
  auto m = dist_test::make_mlp(0, DType::Float32, rank() == 0 ? 32 : 16);
  const std::string msg = error_of([&] { DistributedDataParallel ddp(m, pg()); });
  EXPECT_NE(msg.find("the replicas differ"), std::string::npos) << msg;
  EXPECT_NE(msg.find("parameter '1.weight' f32[32, 20]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 1 has parameter '1.weight' f32[16, 20]"), std::string::npos) << msg;
}

// Per-element bound on the difference between two orders of summing a mean-loss gradient:
// each element is (1/N) sum_n g_n, summed in two different orders (one rank's half, then the
// halves; or all N at once); each order errs by at most (N - 1) u sum_n |g_n| / N (Higham's
// gamma_{N-1}, to first order), so the two differ by at most 2 (N - 1) u S with S = sum_n |g_n| / N.
// S comes from per-sample gradients computed in FP64.
std::vector<Tensor> mean_abs_sample_grads(int seed, const Tensor& x, const Tensor& y) {
  auto m = dist_test::make_mlp(static_cast<uint64_t>(seed), DType::Float64);
  const int64_t n = x.size(0);
  std::vector<Tensor> acc;
  for (int64_t i = 0; i < n; ++i) {
    m->zero_grad();
    cross_entropy((*m)(x.narrow(0, i, 1).to(DType::Float64)), y.narrow(0, i, 1)).backward();
    auto ps = m->parameters();
    for (size_t k = 0; k < ps.size(); ++k) {
      Tensor a = ps[k].grad().abs() * (1.0 / static_cast<double>(n));
      if (acc.size() <= k) acc.push_back(a); else acc[k] = acc[k] + a;
    }
  }
  return acc;
}

void expect_ddp_matches_whole_batch(DType dt) {
  const double u = dt == DType::Float64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  const int64_t n = 128, local = n / 2;
  auto ref = dist_test::make_mlp(0, dt), inner = dist_test::make_mlp(0, dt);
  DistributedDataParallel ddp(inner, pg());
  auto gb = dist_test::global_batch(n, 0, dt);
  cross_entropy((*ref)(gb.x), gb.y).backward();
  cross_entropy(ddp(gb.x.narrow(0, rank() * local, local)), gb.y.narrow(0, rank() * local, local)).backward();
  auto S = mean_abs_sample_grads(0, gb.x, gb.y);
  auto a = ref->named_parameters(), b = inner->named_parameters();
  for (size_t k = 0; k < a.size(); ++k) {
    auto ga = a[k].second.grad().to_vector<double>(), gbv = b[k].second.grad().to_vector<double>();
    auto s = S[k].to_vector<double>();
    int bad = 0;
    for (size_t i = 0; i < ga.size(); ++i) {
      // + the final division and the forward's own rounding, which the two runs share exactly
      // (each sample's forward is the same computation on one or two ranks).
      const double bound = 2.0 * (n - 1) * u * s[i] + 2 * u * std::fabs(ga[i]);
      if (std::fabs(ga[i] - gbv[i]) > bound && ++bad <= 3)
        ADD_FAILURE() << dtype_name(dt) << " " << a[k].first << "[" << i << "]: whole batch " << ga[i] << ", DDP "
                      << gbv[i] << ", bound " << bound;
    }
    EXPECT_EQ(bad, 0) << a[k].first;
  }
}

TEST(TwoRanksDDP, Float64GradientsEqualTheWholeBatchsToRounding) { expect_ddp_matches_whole_batch(DType::Float64); }
TEST(TwoRanksDDP, Float32GradientsEqualTheWholeBatchsWithinTheOrderBound) {
  expect_ddp_matches_whole_batch(DType::Float32);
}

TEST(TwoRanksDDP, Float64TrainingFollowsTheWholeBatchRun) {
  auto ref = dist_test::make_mlp(1, DType::Float64), inner = dist_test::make_mlp(1, DType::Float64);
  DistributedDataParallel ddp(inner, pg());
  optim::SGD o_ref(ref->parameters(), {.lr = 0.1, .momentum = 0.9}), o(inner->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 5; ++step) {
    auto gb = dist_test::global_batch(128, step, DType::Float64);
    o_ref.zero_grad();
    cross_entropy((*ref)(gb.x), gb.y).backward();
    o_ref.step();
    o.zero_grad();
    cross_entropy(ddp(gb.x.narrow(0, rank() * 64, 64)), gb.y.narrow(0, rank() * 64, 64)).backward();
    o.step();
  }
  auto a = ref->parameters(), b = inner->parameters();
  for (size_t k = 0; k < a.size(); ++k)
    EXPECT_LE(dist_test::max_abs_diff(a[k], b[k]), 1e-13 * (1.0 + dist_test::max_abs(a[k])));
}

// One FP16-autocast run of `steps` iterations with dynamic loss scaling: the scaler's history and
// each iteration's (scaled) gradients as backward left them, averaged over the ranks under DDP.
struct Fp16Run {
  std::vector<amp::ScaleRecord> history;
  std::vector<std::vector<Tensor>> grads;
};
Fp16Run fp16_run(bool distributed_run, int steps) {
  auto model = dist_test::make_mlp(2);
  std::unique_ptr<DistributedDataParallel> ddp;
  if (distributed_run) ddp = std::make_unique<DistributedDataParallel>(model, pg());
  optim::SGD opt(model->parameters(), {.lr = 0.05});
  // 2^30: the first iterations overflow in FP16 and back off; growth every 3 clean steps.
  amp::GradScaler scaler({.init_scale = std::ldexp(1.0, 30), .growth_interval = 3});
  if (distributed_run) scaler.set_found_inf_reducer(distributed::found_inf_reducer(pg()));
  Fp16Run out;
  for (int step = 0; step < steps; ++step) {
    auto gb = dist_test::global_batch(128, step);
    Tensor x = distributed_run ? gb.x.narrow(0, rank() * 64, 64) : gb.x;
    Tensor y = distributed_run ? gb.y.narrow(0, rank() * 64, 64) : gb.y;
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast(DeviceType::CPU, DType::Float16);
      loss = cross_entropy(distributed_run ? (*ddp)(x) : (*model)(x), y);
    }
    scaler.scale(loss).backward();
    out.grads.emplace_back();
    for (const Tensor& p : model->parameters()) out.grads.back().push_back(p.grad().clone());
    scaler.step(opt);
    scaler.update();
  }
  out.history = scaler.scale_history();
  return out;
}

bool all_finite(const Tensor& t) {
  for (double v : t.to_vector<double>())
    if (!std::isfinite(v)) return false;
  return true;
}

TEST(TwoRanksDDP, Fp16LossScaleTrajectoryIsTheWholeBatchRuns) {
  auto one = fp16_run(false, 12), two = fp16_run(true, 12);
  ASSERT_EQ(one.history.size(), two.history.size());
  int skipped = 0;
  for (size_t i = 0; i < one.history.size(); ++i) {
    EXPECT_EQ(one.history[i].scale, two.history[i].scale) << "iteration " << i;
    EXPECT_EQ(one.history[i].skipped, two.history[i].skipped) << "iteration " << i;
    skipped += one.history[i].skipped;
    if (two.history[i].skipped) {  // where it overflowed may differ (64 rows or 128), not that it did
      bool any = false;
      for (const Tensor& g : two.grads[i]) any = any || !all_finite(g);
      EXPECT_TRUE(any) << "iteration " << i;
      continue;
    }
    // The averaged gradients are the whole batch's, up to FP16 autocast's rounding (its GEMMs' outputs round to 2^-11 relative; the
    // two runs multiply 128 rows at once or two halves of 64): 4 ulps of the largest element.
    for (size_t k = 0; k < one.grads[i].size(); ++k) {
      const Tensor& a = one.grads[i][k];
      const Tensor& b = two.grads[i][k];
      ASSERT_TRUE(all_finite(a) && all_finite(b)) << "iteration " << i << ", parameter " << k;
      EXPECT_LE(dist_test::max_abs_diff(a, b), 4 * std::ldexp(1.0, -11) * dist_test::max_abs(a))
          << "iteration " << i << ", parameter " << k;
    }
  }
  EXPECT_GT(skipped, 0);             // the trajectory had backoffs to reproduce
  EXPECT_LT(skipped, static_cast<int>(one.history.size()));
}

TEST(TwoRanksDDP, AnInfOnOneRankSkipsTheStepEverywhereAndHalvesTheScale) {
  auto model = dist_test::make_mlp(4);
  DistributedDataParallel ddp(model, pg());
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  amp::GradScaler scaler({.init_scale = 1024.0});
  auto before = model->state_dict();
  std::vector<Tensor> snap;
  for (auto& [k, v] : before) snap.push_back(v.clone());
  auto gb = dist_test::global_batch(64, 0);
  Tensor loss = cross_entropy(ddp(gb.x.narrow(0, rank() * 32, 32)), gb.y.narrow(0, rank() * 32, 32));
  if (rank() == 1) loss = loss * std::numeric_limits<double>::infinity();
  scaler.scale(loss).backward();
  EXPECT_FALSE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 512.0);
  size_t i = 0;
  for (auto& [k, v] : model->state_dict()) EXPECT_EQ(v.to_vector<double>(), snap[i++].to_vector<double>()) << k;
}

TEST(TwoRanksScaler, TheReducerMakesRanksWithDifferentGradientsDecideAlike) {
  // No DDP: the gradients differ by rank (as with sharded or local-only parameters).
  for (bool reduce : {false, true}) {
    Tensor w = tensor({1.0, 2.0}, {2}).requires_grad_();
    optim::SGD opt({w}, {.lr = 0.1});
    amp::GradScaler scaler({.init_scale = 1024.0});
    if (reduce) scaler.set_found_inf_reducer(distributed::found_inf_reducer(pg()));
    const double c = rank() == 1 ? std::numeric_limits<double>::infinity() : 1.0;
    scaler.scale((w * c).sum()).backward();
    const bool stepped = scaler.step(opt);
    scaler.update();
    if (reduce) {
      EXPECT_FALSE(stepped) << "rank " << rank();
      EXPECT_EQ(scaler.get_scale(), 512.0);
    } else {
      EXPECT_EQ(stepped, rank() == 0);  // without it the ranks diverge: the point of the reducer
    }
  }
}

TEST(TwoRanksDDP, NoSyncAccumulatesLocallyAndTheSyncedBackwardAveragesTheSums) {
  auto ref = dist_test::make_mlp(6, DType::Float64), inner = dist_test::make_mlp(6, DType::Float64);
  DistributedDataParallel ddp(inner, pg());
  auto m0 = dist_test::global_batch(64, 0, DType::Float64), m1 = dist_test::global_batch(64, 1, DType::Float64);
  const int64_t c0 = pg().collectives();
  {
    auto guard = ddp.no_sync();
    (cross_entropy(ddp(m0.x.narrow(0, rank() * 32, 32)), m0.y.narrow(0, rank() * 32, 32)) * 0.5).backward();
  }
  EXPECT_EQ(pg().collectives(), c0);  // nothing communicated for the first micro-batch
  (cross_entropy(ddp(m1.x.narrow(0, rank() * 32, 32)), m1.y.narrow(0, rank() * 32, 32)) * 0.5).backward();
  // The forward's and the backward's step checks, and the buckets.
  EXPECT_EQ(pg().collectives(), c0 + 2 + static_cast<int64_t>(ddp.bucket_layout().size()));
  (cross_entropy((*ref)(m0.x), m0.y) * 0.5).backward();
  (cross_entropy((*ref)(m1.x), m1.y) * 0.5).backward();
  auto a = ref->parameters(), b = inner->parameters();
  for (size_t k = 0; k < a.size(); ++k)
    EXPECT_LE(dist_test::max_abs_diff(a[k].grad(), b[k].grad()), 1e-14 * (1.0 + dist_test::max_abs(a[k].grad())));
}

TEST(TwoRanksDDP, SixteenBitBucketsOverflowWithoutPredivisionAndNotInFp32) {
  struct Case {
    bool in_fp32;
    bool predivide;
    bool overflow;
  };
  for (Case c : {Case{false, false, true}, Case{false, true, false}, Case{true, false, false}}) {
    manual_seed(0);
    auto lin = std::make_shared<nn::Linear>(1, 1, /*bias=*/false);
    lin->to(DType::Float16);
    DistributedDataParallel ddp(lin, pg(), {.reduce_16bit_in_fp32 = c.in_fp32, .predivide = c.predivide});
    Tensor x = ones({1, 1}, TensorOptions(DType::Float16));
    (ddp(x) * 40000.0).sum().backward();  // each rank's gradient: 40000, finite in FP16
    const double g = lin->parameters()[0].grad().to_vector<double>()[0];
    if (c.overflow)
      EXPECT_TRUE(std::isinf(g)) << g;
    else
      EXPECT_EQ(g, 40000.0);
  }
}

// y = w * x elementwise: the gradient of sum(y) is x, so each rank chooses its own gradient.
class Probe : public nn::Module {
 public:
  explicit Probe(int64_t n, DType dt = DType::Float32) : nn::Module("Probe") {
    w = register_parameter("w", zeros({n}, TensorOptions(dt)));
  }
  Tensor forward(const Tensor& x) override { return w * x; }
  Tensor w;
};

// reduce_dtype: each rank's FP32 gradient is cast to the reduction dtype, divided by 2 there
// (predivide, PyTorch's fp16_compress_hook order: cast, then divide) or not, summed there (two
// ranks: one rounding, whatever the order) and cast back, divided in FP32 when not predivided.
// The reference is those casts and operations on this process; the hand-written values pin what
// they mean.
TEST(TwoRanksDDP, EachReduceDtypeIsItsCastSumAndCastBack) {
  const std::vector<double> mine = rank() == 0
      ? std::vector<double>{1.0 + std::ldexp(1.0, -20), 3e-8, 50000.0, 1e5, 0.1, -7.0}
      : std::vector<double>{1.0, 3e-8, 50000.0, 1.0, 0.2, 7.0};
  const std::vector<double> other_v = rank() == 0
      ? std::vector<double>{1.0, 3e-8, 50000.0, 1.0, 0.2, 7.0}
      : std::vector<double>{1.0 + std::ldexp(1.0, -20), 3e-8, 50000.0, 1e5, 0.1, -7.0};
  const int64_t n = static_cast<int64_t>(mine.size());
  const Tensor c0 = tensor(mine, {n}), c1 = tensor(other_v, {n});
  for (DType dt : {DType::Float32, DType::BFloat16, DType::Float16}) {
    for (bool predivide : {true, false}) {
      auto probe = std::make_shared<Probe>(n);
      DistributedDataParallel ddp(probe, pg(), {.reduce_dtype = dt, .predivide = predivide});
      ddp(c0).sum().backward();
      const Tensor got = probe->w.grad();
      ASSERT_EQ(got.dtype(), DType::Float32);
      const Tensor a = c0.to(dt), b = c1.to(dt);
      const Tensor ref = predivide ? (a * Scalar(0.5) + b * Scalar(0.5)).to(DType::Float32)
                                   : (a + b).to(DType::Float32) * Scalar(0.5);
      const auto g = got.to_vector<double>(), r = ref.to_vector<double>();
      for (int64_t i = 0; i < n; ++i) {
        if (std::isnan(r[static_cast<size_t>(i)])) {
          EXPECT_TRUE(std::isnan(g[static_cast<size_t>(i)])) << dtype_name(dt) << " predivide " << predivide << " [" << i << "]";
        } else {
          EXPECT_EQ(g[static_cast<size_t>(i)], r[static_cast<size_t>(i)])
              << dtype_name(dt) << " predivide " << predivide << " [" << i << "]";
        }
      }
      // What the casts mean: FP32 keeps 2^-20; BF16 loses it and keeps 3e-8; FP16 flushes
      // 3e-8 / 2 and turns 1e5 into inf when it casts (as fp16_compress_hook does), and its
      // undivided sum of 50000 + 50000 overflows.
      EXPECT_EQ(g[0] == 1.0 + std::ldexp(1.0, -21), dt == DType::Float32) << dtype_name(dt);
      EXPECT_EQ(g[1] == 0.0, dt == DType::Float16 && predivide) << dtype_name(dt) << " " << g[1];
      EXPECT_EQ(std::isinf(g[2]), dt == DType::Float16 && !predivide) << dtype_name(dt);
      EXPECT_EQ(std::isinf(g[3]), dt == DType::Float16) << dtype_name(dt);
      EXPECT_EQ(g[5], 0.0);
      EXPECT_EQ(ddp.last_stats().bytes, 2 * (n / 2 + 1) * static_cast<int64_t>(element_size(dt)))
          << "one bucket: 2 chunks of n/2 gradients and the 1 used count, in the reduction dtype";
    }
  }
  auto probe = std::make_shared<Probe>(2);
  EXPECT_EQ(error_of([&] { DistributedDataParallel d(probe, pg(), {.reduce_dtype = DType::Float64}); }),
            "DistributedDataParallel: reduce_dtype must be Float32, BFloat16 or Float16 (or unset), got Float64");
}

// The loss-scaled FP16 reduction (reduce_dtype Float16, no predivision) under a GradScaler: the
// scaled gradients travel in FP16 (half FP32's bytes) and are summed there; a sum past 65504
// is inf on every rank, so every rank's scaler skips the step and halves the scale, with no
// collective of its own; at the halved scale the same gradients fit and the step runs.
TEST(TwoRanksDDP, LossScaledFp16ReductionOverflowIsInfOnEveryRankAndSkipped) {
  const Tensor x = full({4}, 40.0);  // each rank's gradient 40, scaled by 1024: 40960 (finite in FP16)
  auto probe = std::make_shared<Probe>(4);
  DistributedDataParallel ddp(probe, pg(), {.reduce_dtype = DType::Float16, .predivide = false});
  optim::SGD opt(probe->parameters(), {.lr = 0.5});
  amp::GradScaler scaler({.init_scale = 1024.0});
  scaler.scale(ddp(x).sum()).backward();
  for (double g : probe->w.grad().to_vector<double>()) EXPECT_TRUE(std::isinf(g)) << "rank " << rank() << ": " << g;
  EXPECT_EQ(ddp.last_stats().bytes, 2 * (2 + 1) * 2);
  EXPECT_FALSE(scaler.step(opt)) << "rank " << rank();
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 512.0);
  EXPECT_EQ(probe->w.to_vector<double>(), std::vector<double>(4, 0.0));
  opt.zero_grad();
  scaler.scale(ddp(x).sum()).backward();  // 20480 + 20480 = 40960: fits
  EXPECT_EQ(probe->w.grad().to_vector<double>(), std::vector<double>(4, 512.0 * 40.0));
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(probe->w.to_vector<double>(), std::vector<double>(4, -0.5 * 40.0));
}

TEST(TwoRanksDDP, BuffersFollowRankZeroBeforeEachTrainingForward) {
  manual_seed(0);
  auto net = std::make_shared<nn::Sequential>(std::make_shared<nn::Conv2d>(1, 2, IntList{3}),
                                              std::make_shared<nn::BatchNorm2d>(2));
  DistributedDataParallel ddp(net, pg());
  Generator g(50 + static_cast<uint64_t>(rank()));
  ddp(randn({4, 1, 6, 6}, {}, &g));  // different data: the running statistics now differ by rank
  Tensor same = full({4, 1, 6, 6}, 0.25);
  const int64_t c0 = pg().collectives();
  ddp(same);  // rank 0's statistics are copied first, then updated alike
  // The step check, then one broadcast per buffer dtype (f32, i64), no layout checks.
  EXPECT_EQ(pg().collectives() - c0, 3);
  auto mean = net->named_buffers();
  for (auto& [name, t] : mean) {
    auto all = pg().all_gather(t);
    EXPECT_EQ(all[0].to_vector<double>(), all[1].to_vector<double>()) << name;
  }
}

TEST(TwoRanksDDP, CheckpointedForwardGivesTheSameGradients) {
  auto plain = dist_test::make_mlp(8), ck = dist_test::make_mlp(8);
  DistributedDataParallel d1(plain, pg()), d2(ck, pg());
  auto gb = dist_test::global_batch(64, 3);
  Tensor x = gb.x.narrow(0, rank() * 32, 32), y = gb.y.narrow(0, rank() * 32, 32);
  cross_entropy(d1(x), y).backward();
  cross_entropy(autograd::checkpoint([&](const Tensor& in) { return d2(in); }, x), y).backward();
  auto a = plain->parameters(), b = ck->parameters();
  for (size_t k = 0; k < a.size(); ++k) EXPECT_EQ(a[k].grad().to_vector<double>(), b[k].grad().to_vector<double>());
}

TEST(TwoRanksDDP, StatesAreBitIdenticalOnBothRanksAfterTraining) {
  // A BF16 model with FP32 masters, Adam, BF16 autocast and dynamic loss scaling at 2^127, the
  // largest power of two FP32 holds: step 2's inputs are 10^4 times larger on rank 1, whose
  // scaled gradients overflow there only; the averages and the found-inf reducer make every rank
  // skip that step, so the skip path's state (scale, growth tracker) must match too.
  auto model = dist_test::make_mlp(9 + static_cast<uint64_t>(rank()), DType::BFloat16);
  DistributedDataParallel ddp(model, pg());
  optim::Adam opt(model->parameters(), {.lr = 1e-2});
  amp::GradScaler scaler({.init_scale = std::ldexp(1.0, 127), .growth_interval = 2});
  scaler.set_found_inf_reducer(distributed::found_inf_reducer(pg()));
  for (int step = 0; step < 8; ++step) {
    auto gb = dist_test::global_batch(64, step);
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast(DeviceType::CPU, DType::BFloat16);
      Tensor x = gb.x.narrow(0, rank() * 32, 32);
      loss = cross_entropy(ddp(step == 2 && rank() == 1 ? x * 1e4 : x), gb.y.narrow(0, rank() * 32, 32));
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  }
  StateDict all;
  for (auto& [k, v] : model->state_dict()) all["model." + k] = v;
  for (auto& [k, v] : opt.state_dict()) all["optim." + k] = v;
  for (auto& [k, v] : scaler.state_dict()) all["scaler." + k] = v;
  auto hashes = pg().all_gather_string(dist_test::hash_state(all));
  EXPECT_EQ(hashes[0], hashes[1]);
  EXPECT_GT(opt.state_dict().size(), 4u);  // masters and moments were hashed too
  int skipped = 0;
  for (const auto& rec : scaler.scale_history()) skipped += rec.skipped;
  EXPECT_EQ(skipped, 1);  // step 2: the overflow and skip path ran, and only there
}

}  // namespace
}  // namespace mixtape
