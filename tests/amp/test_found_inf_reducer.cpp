// tests/amp/test_found_inf_reducer.cpp — GradScaler::set_found_inf_reducer, the hook that makes
// every process of a data-parallel job take the same skip/step decision (the two-process run
// is in tests/distributed_mpi): the reducer's verdict, not the local gradients, decides.
#include <limits>
#include <stdexcept>

#include "scaler_test_util.h"

namespace mixtape::testing {
namespace {

TEST(FoundInfReducer, AnotherProcessesInfSkipsTheStepHereAndBacksOff) {
  Tensor w = make_param({1.0, 2.0}, {2});
  optim::SGD opt({w}, {.lr = 0.5});
  amp::GradScaler scaler({.init_scale = 1024.0});
  int calls = 0;
  float local = -1;
  scaler.set_found_inf_reducer([&](const Tensor& found_inf) {
    ++calls;
    local = found_inf.item<float>();
    const_cast<Tensor&>(found_inf).fill_(1.0);  // as if another rank had found an inf
  });
  Tensor before = snapshot(w);
  scaler.scale((w * 3.0).sum()).backward();
  EXPECT_FALSE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(local, 0.0f);  // this process's own gradients were finite
  EXPECT_TRUE(same_bytes(w, before));
  EXPECT_EQ(scaler.get_scale(), 512.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
}

TEST(FoundInfReducer, ALocalInfReachesTheReducerAndAllFiniteStepsNormally) {
  Tensor w = make_param({1.0, 2.0}, {2});
  optim::SGD opt({w}, {.lr = 0.5});
  amp::GradScaler scaler({.init_scale = 1024.0});
  std::vector<float> seen;
  scaler.set_found_inf_reducer([&](const Tensor& f) { seen.push_back(f.item<float>()); });
  // A finite iteration: the reducer keeps 0 and the step runs.
  scaler.scale((w * 3.0).sum()).backward();
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  opt.zero_grad();
  // An inf gradient here: the reducer sees it.
  scaler.scale((w * std::numeric_limits<double>::infinity()).sum()).backward();
  EXPECT_FALSE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], 0.0f);
  EXPECT_GT(seen[1], 0.0f);
}

// A reducer that throws (a collective timeout) after the gradients were unscaled in place: a
// retried step() must run the reduction again and step once with the gradient unscaled once
// (w = 1 - 3 = -2; a second division by S gave 1 - 3/1024).
TEST(FoundInfReducer, ARetryAfterAFailingReducerUnscalesOnce) {
  for (bool explicit_unscale : {false, true}) {
    Tensor w = make_param({1.0}, {1});
    optim::SGD opt({w}, {.lr = 1.0});
    amp::GradScaler scaler({.init_scale = 1024.0});
    std::vector<float> seen;
    scaler.set_found_inf_reducer([&](const Tensor& f) {
      seen.push_back(f.item<float>());
      if (seen.size() == 1) {
        const_cast<Tensor&>(f).fill_(7.0);  // a half-done collective may leave anything behind
        throw std::runtime_error("all-reduce timed out");
      }
    });
    scaler.scale((w * 3.0).sum()).backward();
    auto first = [&] {
      if (explicit_unscale)
        scaler.unscale_(opt);
      else
        scaler.step(opt);
    };
    EXPECT_THROW(first(), std::runtime_error);
    EXPECT_EQ(w.item<float>(), 1.0f) << "nothing stepped";
    EXPECT_EQ(w.grad().item<float>(), 3.0f) << "unscaled once, before the reducer";
    if (explicit_unscale)
      scaler.unscale_(opt);  // the retry of unscale_ itself
    else  // step() may have left 16-bit gradients scaled for the optimizer: only step() may retry
      expect_error([&] { scaler.unscale_(opt); }, {"GradScaler.unscale_", "reducer failed during step()", "retry step()"});
    EXPECT_TRUE(scaler.step(opt));
    EXPECT_EQ(w.grad().item<float>(), 3.0f) << (explicit_unscale ? "unscale_" : "step") << ": unscaled twice";
    EXPECT_EQ(w.item<float>(), -2.0f);
    ASSERT_EQ(seen.size(), 2u);
    EXPECT_EQ(seen[1], 0.0f) << "the retry reduces this process's own flag again, not the failed call's leftovers";
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 1024.0);
  }
}

// At scale 1, step() leaves its inverse scale at 1.0 exactly, as unscale_() does: the refusal of
// unscale_() after a failed step() must follow who unscaled, not that value.
TEST(FoundInfReducer, AtScaleOneUnscaleAfterAFailedStepIsStillRefused) {
  Tensor w = make_param({1.0}, {1});
  optim::SGD opt({w}, {.lr = 1.0});
  amp::GradScaler scaler({.init_scale = 1.0});
  int calls = 0;
  scaler.set_found_inf_reducer([&](const Tensor&) {
    if (++calls == 1) throw std::runtime_error("all-reduce timed out");
  });
  scaler.scale((w * 3.0).sum()).backward();
  EXPECT_THROW(scaler.step(opt), std::runtime_error);
  expect_error([&] { scaler.unscale_(opt); }, {"GradScaler.unscale_", "reducer failed during step()", "retry step()"});
  EXPECT_TRUE(scaler.step(opt));
  EXPECT_EQ(w.item<float>(), -2.0f);
  EXPECT_EQ(calls, 2);
}

// A reducer removed after it failed: the retry decides on this process's own flags, as a scaler
// without a reducer does (it used to call the empty std::function: std::bad_function_call).
TEST(FoundInfReducer, ARetryAfterTheReducerWasRemovedUsesTheLocalFlags) {
  for (bool finite : {true, false}) {
    Tensor w = make_param({1.0}, {1});
    optim::SGD opt({w}, {.lr = 1.0});
    amp::GradScaler scaler({.init_scale = 1024.0});
    scaler.set_found_inf_reducer([](const Tensor&) { throw std::runtime_error("all-reduce timed out"); });
    scaler.scale((w * (finite ? 3.0 : std::numeric_limits<double>::infinity())).sum()).backward();
    EXPECT_THROW(scaler.step(opt), std::runtime_error);
    scaler.set_found_inf_reducer({});
    EXPECT_EQ(scaler.step(opt), finite);
    EXPECT_EQ(w.item<float>(), finite ? -2.0f : 1.0f);
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), finite ? 1024.0 : 512.0);
  }
}

}  // namespace
}  // namespace mixtape::testing
