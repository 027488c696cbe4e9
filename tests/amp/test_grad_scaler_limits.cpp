// tests/amp/test_grad_scaler_limits.cpp — the ends of the GradScaler's ranges: a scale is a
// positive normal float32 at every entry point (constructor, update(new_scale), load_state_dict)
// and after every backoff, which stops at 2^-126 and says the scale has collapsed; a growth
// tracker at INT32_MAX grows instead of overflowing (docs/AMP.md, "The scale's range").
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>

#include "amp/amp_functors.h"
#include "amp/scaler_kernels.h"
#include "scaler_test_util.h"

namespace mixtape::testing {
namespace {

using amp::GradScaler;
using optim::SGD;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Tensor f32(std::vector<double> v) { return tensor(v, {static_cast<int64_t>(v.size())}, TensorOptions(DType::Float32)); }

// One iteration whose gradient is g * S: step, update; returns whether it stepped.
bool iteration(GradScaler& scaler, SGD& opt, const Tensor& p, float g) {
  opt.zero_grad();
  scaler.scale(sum(mul(p, f32({g})))).backward();
  const bool stepped = scaler.step(opt);
  scaler.update();
  return stepped;
}

StateDict with_key(StateDict sd, const char* key, Tensor value) {
  sd[key] = std::move(value);
  return sd;
}

// ---- the scale: a positive normal float32 everywhere ----

TEST(GradScalerLimits, EveryEntryPointRefusesAScaleOfZeroOrASubnormal) {
  const double subnormal = std::ldexp(1.0, -130);
  for (double bad : {0.0, -0.0, subnormal, -1.0}) {
    expect_error([&] { GradScaler s({.init_scale = bad}); }, {"GradScaler", "init_scale", "2^-126"});
    GradScaler scaler({.init_scale = 4.0});
    scaler.scale(f32({1.0}));
    expect_error([&] { scaler.update(bad); }, {"GradScaler.update", "new_scale", "2^-126"});
    expect_error([&] { scaler.update(Tensor(full({}, bad, TensorOptions(DType::Float32)))); },
                 {"GradScaler.update", "new_scale", "2^-126"});
    EXPECT_EQ(scaler.get_scale(), 4.0) << bad << ": a refused update changes nothing";
    const StateDict sd = with_key(scaler.state_dict(), "scale", full({}, bad, TensorOptions(DType::Float32)));
    GradScaler loaded({.init_scale = 8.0});
    expect_error([&] { loaded.load_state_dict(sd); }, {"GradScaler.load_state_dict", "'scale'", "2^-126"});
    EXPECT_EQ(loaded.get_scale(), 8.0);
  }
  // The smallest normal float itself is a valid scale everywhere.
  const double tiny = FLT_MIN;
  GradScaler scaler({.init_scale = tiny});
  scaler.scale(f32({1.0}));
  scaler.update(tiny);
  GradScaler loaded;
  loaded.load_state_dict(scaler.state_dict());
  EXPECT_EQ(loaded.get_scale(), tiny);
}

TEST(GradScalerLimits, BackoffStopsAtTheSmallestNormalAndSaysTheScaleCollapsed) {
  // Without min_scale a NaN in the forward pass used to halve S to 0 (about 150 iterations from
  // 1), after which every step was skipped in silence.
  GradScaler scaler({.init_scale = std::ldexp(1.0, -123)});
  Tensor p = make_param({1.0}, {1});
  SGD opt({p}, {.lr = 0.1});
  for (int i = 1; i <= 3; ++i) {
    EXPECT_FALSE(iteration(scaler, opt, p, kNaN));
    EXPECT_EQ(scaler.get_scale(), std::ldexp(1.0, -123 - i));
    EXPECT_EQ(scaler.consecutive_skipped_steps(), i);
  }
  ASSERT_EQ(scaler.get_scale(), static_cast<double>(FLT_MIN));
  expect_error([&] { iteration(scaler, opt, p, kNaN); },
               {"GradScaler.update", "collapsed", "2^-126", "4 consecutive skipped", "forward pass", "apex#715"});
  EXPECT_EQ(scaler.get_scale(), static_cast<double>(FLT_MIN)) << "never 2^-127, a subnormal, or 0";
  EXPECT_EQ(to_device(scaler.scale_tensor(), Device::CPU()).item<float>(), FLT_MIN) << "the device scale too";
  EXPECT_EQ(scaler.consecutive_skipped_steps(), 4);
  // The collapsed scaler's state still loads, and a clean iteration recovers.
  GradScaler resumed;
  resumed.load_state_dict(scaler.state_dict());
  EXPECT_TRUE(iteration(scaler, opt, p, 1.0f));
  EXPECT_EQ(scaler.consecutive_skipped_steps(), 0);
  // The diagnosis, for a training loop that stops after K skipped steps of its own.
  GradScaler fresh({.init_scale = 8.0});
  EXPECT_FALSE(iteration(fresh, opt, p, kNaN));
  EXPECT_FALSE(iteration(fresh, opt, p, kNaN));
  const std::string why = fresh.skipped_steps_diagnosis();
  for (const char* part : {"2 consecutive skipped", "loss scale now 2", "forward pass", "apex#715"})
    EXPECT_NE(why.find(part), std::string::npos) << why << "\nmissing: " << part;
}

TEST(GradScalerLimits, TheUpdateKernelNeverBacksOffBelowTheSmallestNormal) {
  // The op (what a CUDA kernel runs too) and the shared functor agree.
  Tensor scale = full({}, static_cast<double>(FLT_MIN), TensorOptions(DType::Float32));
  Tensor tracker = full({}, 3, TensorOptions(DType::Int32));
  amp::update_scale_(scale, tracker, full({}, 1.0, TensorOptions(DType::Float32)), 2.0, 0.5, 10);
  EXPECT_EQ(scale.item<float>(), FLT_MIN);
  EXPECT_EQ(tracker.item<int32_t>(), 0);
  float s = std::ldexp(1.0f, -120);
  int32_t t = 0;
  amp::fn::update_scale(s, t, 1.0f, 2.0, 1e-30, 10);  // a tiny backoff factor jumps to the floor
  EXPECT_EQ(s, FLT_MIN);
}

// ---- the growth tracker: never past INT32_MAX ----

TEST(GradScalerLimits, ATrackerAtInt32MaxGrowsInsteadOfOverflowing) {
  // The op and the functor: tracker + 1 would overflow int32.
  Tensor scale = full({}, 4.0, TensorOptions(DType::Float32));
  Tensor tracker = full({}, INT32_MAX, TensorOptions(DType::Int32));
  amp::update_scale_(scale, tracker, zeros({}, TensorOptions(DType::Float32)), 2.0, 0.5, 2000);
  EXPECT_EQ(tracker.item<int32_t>(), 0);
  EXPECT_EQ(scale.item<float>(), 8.0f);
  float s = 4.0f;
  int32_t t = INT32_MAX;
  amp::fn::update_scale(s, t, 0.0f, 2.0, 0.5, INT32_MAX);
  EXPECT_EQ(std::make_pair(t, s), std::make_pair(0, 8.0f));
  t = INT32_MAX - 2;
  amp::fn::update_scale(s, t, 0.0f, 2.0, 0.5, INT32_MAX);
  EXPECT_EQ(std::make_pair(t, s), std::make_pair(INT32_MAX - 1, 8.0f)) << "below the interval: counts on";

  // Through a loaded state dict: host and device agree, and the scaler reloads its own state.
  GradScaler scaler({.init_scale = 4.0});
  Tensor p = make_param({1.0}, {1});
  SGD opt({p}, {.lr = 0.0});
  scaler.load_state_dict(with_key(scaler.state_dict(), "_growth_tracker", full({}, INT32_MAX, TensorOptions(DType::Int32))));
  EXPECT_EQ(scaler.get_growth_tracker(), INT32_MAX);
  EXPECT_TRUE(iteration(scaler, opt, p, 1.0f));
  EXPECT_EQ(scaler.get_growth_tracker(), 0);
  EXPECT_EQ(to_device(scaler.growth_tracker_tensor(), Device::CPU()).item<int32_t>(), 0);
  EXPECT_EQ(scaler.get_scale(), 8.0);
  GradScaler again;
  again.load_state_dict(scaler.state_dict());
  EXPECT_EQ(again.get_growth_tracker(), 0);
}

}  // namespace
}  // namespace mixtape::testing
