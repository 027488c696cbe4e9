// tests/amp/test_grad_scaler_sync_free.cpp — GradScalerOptions::sync_free on the CPU: the same
// scale trajectory, skipped steps, parameters, masters, optimizer state and update counts as the
// default mode, bit for bit (SGD with momentum and dampening, AdamW; with and without clipping;
// an inf step, a growth, an lr change); poll() and its errors; refusals.
// The same on the device, with host syncs counted: tests/cuda_ops/test_amp_sync_free.cpp.
#include "amp/sync_free_run.h"
#include "scaler_test_util.h"

namespace mixtape::testing {
namespace {

void expect_same(const sync_free::Trajectory& got, const sync_free::Trajectory& want) {
  EXPECT_EQ(got.scales, want.scales);
  EXPECT_EQ(got.trackers, want.trackers);
  EXPECT_EQ(got.skipped, want.skipped);
  EXPECT_EQ(got.counts, want.counts);
  ASSERT_EQ(got.params.size(), want.params.size());
  ASSERT_EQ(got.state.size(), want.state.size());
  for (size_t i = 0; i < got.params.size(); ++i) {
    EXPECT_TRUE(same_bytes(got.params[i], want.params[i])) << "param " << i;
    EXPECT_TRUE(same_bytes(got.masters[i], want.masters[i])) << "master " << i;
  }
  for (size_t i = 0; i < got.state.size(); ++i) EXPECT_TRUE(same_bytes(got.state[i], want.state[i])) << "state " << i;
}

TEST(GradScalerSyncFree, SameTrajectoryAndParametersAsTheDefaultMode) {
  for (auto which : {sync_free::Opt::SgdMomentum, sync_free::Opt::AdamW})
    for (bool clip : {false, true})
      for (DType dt : {DType::Float16, DType::BFloat16}) {
        SCOPED_TRACE(std::string(which == sync_free::Opt::AdamW ? "AdamW" : "SGD") + (clip ? " clip " : " ") +
                     std::string(dtype_name(dt)));
        const auto want = sync_free::run(Device::CPU(), false, which, clip, dt);
        const auto got = sync_free::run(Device::CPU(), true, which, clip, dt);
        ASSERT_EQ(want.skipped.back(), 1) << "the inf step must be skipped";
        ASSERT_GT(*std::max_element(want.scales.begin(), want.scales.end()), 256.0) << "the scale must grow";
        expect_same(got, want);
      }
}

TEST(GradScalerSyncFree, PollReportsAndStepNeedsACapturableOptimizer) {
  Tensor p = tensor({1.0, 2.0}).requires_grad_(true);
  optim::SGD opt({p}, {.lr = 0.1});
  amp::GradScaler scaler(amp::GradScalerOptions{.init_scale = 8.0, .sync_free = true});
  (scaler.scale(sum(p * p)) * std::numeric_limits<double>::infinity()).backward();
  expect_error([&] { scaler.step(opt); }, {"GradScaler.step(SGD)", "sync_free", "set_capturable(true)"});
  opt.set_capturable(true);
  EXPECT_TRUE(scaler.step(opt)) << "sync_free: step() does not know whether the device skipped";
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 8.0) << "before poll(): what the host knew";
  const amp::ScalerPoll r = scaler.poll();
  EXPECT_EQ(r.updates, 1);
  EXPECT_EQ(r.scale, 4.0);
  EXPECT_EQ(r.skipped_steps, 1);
  EXPECT_EQ(r.consecutive_skipped, 1);
  EXPECT_EQ(scaler.get_scale(), 4.0);
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{1.0f, 2.0f})) << "skipped on the device";
  EXPECT_EQ(scaler.state_dict().at("scale").item<float>(), 4.0f);
  amp::GradScaler plain;
  expect_error([&] { plain.poll(); }, {"GradScaler.poll", "sync_free"});
}

TEST(GradScalerSyncFree, ACollapseIsReportedByPoll) {
  Tensor p = tensor({1.0}).requires_grad_(true);
  optim::SGD opt({p}, {.lr = 0.1});
  opt.set_capturable(true);
  amp::GradScaler scaler(amp::GradScalerOptions{.init_scale = 1.0, .backoff_factor = 0.5, .min_scale = 0.25,
                                                .sync_free = true});
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    (scaler.scale(sum(p)) * std::numeric_limits<double>::infinity()).backward();
    scaler.step(opt);
    scaler.update();  // no error here: the device backed off, the host has not looked
  }
  expect_error([&] { scaler.poll(); }, {"GradScaler.poll: the loss scale fell below min_scale 0.25", "3 consecutive"});
}

}  // namespace
}  // namespace mixtape::testing
