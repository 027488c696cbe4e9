// tests/optim/test_lr_scheduler.cpp — LR schedules beyond the torch fixture: skipped AMP steps do
// not advance them (GradScaler addition (a); docs/amp-behaviours.md behaviour 30), state_dict
// round trips, WarmupCosine with eta_min and past its end, and errors.
#include <cmath>

#include "optim_test_util.h"

namespace mixtape::testing {
namespace {

using optim::CosineAnnealingLR;
using optim::ParamGroup;
using optim::SGD;
using optim::StepLR;
using optim::WarmupCosine;

struct OneParam {
  Tensor p = param_from({0}, {1}, DType::Float32);
  SGD opt{std::vector<Tensor>{p}, {.lr = 0.1}};
};

TEST(LRScheduler, SkippedOptimizerStepDoesNotAdvanceTheSchedule) {
  OneParam s;
  WarmupCosine sched(s.opt, /*warmup_steps=*/4, /*total_steps=*/10);
  EXPECT_EQ(sched.last_epoch(), 0);
  EXPECT_EQ(s.opt.param_groups()[0].lr(), 0.0) << "warmup starts at 0";
  // The GradScaler skips the first step (inf found while the scale calibrates): sched.step(false).
  sched.step(/*optimizer_stepped=*/false);
  EXPECT_EQ(sched.last_epoch(), 0) << "the schedule index stays 0 (behaviour 30)";
  EXPECT_EQ(sched.get_last_lr()[0], 0.0);
  sched.step(true);
  EXPECT_EQ(sched.last_epoch(), 1);
  EXPECT_EQ(sched.get_last_lr()[0], 0.1 * (1.0 / 4.0));
  sched.step();
  EXPECT_EQ(sched.get_last_lr()[0], 0.1 * (2.0 / 4.0));
}

TEST(LRScheduler, WarmupCosineWithEtaMinAndAfterTheEnd) {
  OneParam s;
  const double eta = 0.001, base = 0.1;
  WarmupCosine sched(s.opt, 2, 6, eta);
  std::vector<double> lrs{sched.get_last_lr()[0]};
  for (int i = 0; i < 8; ++i) {
    sched.step();
    lrs.push_back(sched.get_last_lr()[0]);
  }
  EXPECT_EQ(lrs[0], 0.0);
  EXPECT_EQ(lrs[1], base * 0.5);
  EXPECT_EQ(lrs[2], eta + (base - eta) * 1.0) << "the peak: progress 0";
  EXPECT_NEAR(lrs[4], eta + (base - eta) * 0.5, 1e-15) << "half way: cos(pi / 2) = 0";
  for (int t = 6; t <= 8; ++t) EXPECT_EQ(lrs[t], eta) << "at and after total_steps: eta_min, t = " << t;
  for (int t = 2; t < 6; ++t) EXPECT_GT(lrs[t], lrs[t + 1]) << "decreasing";
}

TEST(LRScheduler, StepLRMultipleGroupsAndStateDictResume) {
  Tensor a = param_from({0}, {1}, DType::Float32), b = param_from({0}, {1}, DType::Float32);
  SGD opt({ParamGroup({a}), ParamGroup({b}, {{"lr", 1.0}})}, {.lr = 0.1});
  StepLR sched(opt, 2, 0.5);
  for (int i = 0; i < 3; ++i) sched.step();
  StateDict saved = sched.state_dict();
  EXPECT_EQ(saved.at("last_epoch").item<int64_t>(), 3);
  EXPECT_EQ(saved.at("step_size").describe(), "i64[]");
  EXPECT_EQ(saved.at("gamma").item<double>(), 0.5);
  EXPECT_EQ(saved.at("base_lrs.1").item<double>(), 1.0);
  std::vector<std::vector<double>> expect;
  for (int i = 0; i < 5; ++i) {
    sched.step();
    expect.push_back(sched.get_last_lr());
  }
  // Resume: a new optimizer (its lrs from the optimizer's state_dict) and a new scheduler.
  Tensor a2 = param_from({0}, {1}, DType::Float32), b2 = param_from({0}, {1}, DType::Float32);
  SGD opt2({ParamGroup({a2}), ParamGroup({b2}, {{"lr", 1.0}})}, {.lr = 0.1});
  StepLR sched2(opt2, 7, 0.9);  // hyperparameters come from the dict
  opt2.param_groups()[0].set_lr(0.1 * 0.5);
  opt2.param_groups()[1].set_lr(1.0 * 0.5);
  sched2.load_state_dict(saved);
  EXPECT_EQ(sched2.last_epoch(), 3);
  for (int i = 0; i < 5; ++i) {
    sched2.step();
    EXPECT_EQ(sched2.get_last_lr(), expect[i]) << "step " << i;
  }
}

TEST(LRScheduler, CosineStateDictAndErrors) {
  OneParam s;
  CosineAnnealingLR sched(s.opt, 5, 0.01);
  sched.step();
  StateDict sd = sched.state_dict();
  auto with = [&](const std::string& k, const Tensor& v) {
    StateDict d = sd;
    d[k] = v;
    return d;
  };
  expect_error([&] { sched.load_state_dict(StateDict{}); }, {"CosineAnnealingLR.load_state_dict: missing key 'last_epoch'"});
  expect_error([&] { sched.load_state_dict(with("T_max", full({}, 5.0))); }, {"'T_max' must be a 0-d i64 tensor, got f32[]"});
  expect_error([&] { sched.load_state_dict(with("base_lrs.1", full({}, 1.0, TensorOptions(DType::Float64)))); },
               {"unexpected key 'base_lrs.1'", "1 param groups"});
  Tensor zero = Tensor::empty({}, TensorOptions(DType::Int64));
  *zero.data_ptr<int64_t>() = 0;
  expect_error([&] { sched.load_state_dict(with("T_max", zero)); }, {"T_max must be >= 1, got 0"});
  StateDict after = sched.state_dict();
  EXPECT_EQ(after.at("T_max").item<int64_t>(), 5) << "a rejected load leaves the scheduler as it was";
  sched.load_state_dict(sd);
}

TEST(LRScheduler, ConstructionErrors) {
  OneParam s;
  expect_error([&] { StepLR(s.opt, 0); }, {"StepLR: step_size must be >= 1, got 0"});
  expect_error([&] { CosineAnnealingLR(s.opt, 0); }, {"CosineAnnealingLR: T_max must be >= 1"});
  expect_error([&] { WarmupCosine(s.opt, 10, 5); }, {"WarmupCosine: total_steps must be >= warmup_steps"});
  // A group added after the scheduler was made is an error at the next step.
  StepLR sched(s.opt, 3);
  s.opt.add_param_group(ParamGroup({param_from({0}, {1}, DType::Float32)}));
  expect_error([&] { sched.step(); }, {"StepLR: the optimizer has 2 param groups, but the scheduler was created for 1"});
}

}  // namespace
}  // namespace mixtape::testing
