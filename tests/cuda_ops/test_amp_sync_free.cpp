// tests/cuda_ops/test_amp_sync_free.cpp — a step with no host sync on CUDA (docs/CUDA.md):
//   - GradScalerOptions::sync_free with a capturable optimizer gives, on the device, the default
//     mode's scale trajectory, skipped steps, parameters, masters and state bit for bit (SGD with
//     momentum and dampening, AdamW; with clip_grad_norm_on_device_ and without; an inf step, a
//     growth, an lr change) — tests/amp/sync_free_run.h, the CPU's comparison run on the device;
//   - an eager AMP step (forward, backward, unscale_, clip, step, update) waits for the device
//     zero times, with and without clipping: counted by the CUDA emulator (host_waits()), whose
//     streams keep stream order only, so any host read of device data shows;
//   - GradScaler::found_inf() with gradients on two devices: one flag on the scale's device.
#include <limits>

#include "amp/sync_free_run.h"
#include "cuda_test_util.h"
#include "models/nn.h"
#if defined(MIXTAPE_WITH_CUDA)
#include "core/cuda/stream.h"
#endif

namespace mixtape {
namespace {
using namespace cuda_test;
namespace sf = testing::sync_free;

TEST(CudaAmpSyncFree, SameTrajectoryAndParametersAsTheDefaultMode) {
  MT_REQUIRE_CUDA();
  for (auto which : {sf::Opt::SgdMomentum, sf::Opt::AdamW})
    for (bool clip : {false, true}) {
      SCOPED_TRACE(std::string(which == sf::Opt::AdamW ? "AdamW" : "SGD") + (clip ? " clip" : ""));
      const sf::Trajectory want = sf::run(gpu(), false, which, clip);
      const sf::Trajectory got = sf::run(gpu(), true, which, clip);
      ASSERT_EQ(want.skipped.back(), 1) << "the inf step must be skipped";
      EXPECT_EQ(got.scales, want.scales);
      EXPECT_EQ(got.trackers, want.trackers);
      EXPECT_EQ(got.skipped, want.skipped);
      EXPECT_EQ(got.counts, want.counts);
      ASSERT_EQ(got.state.size(), want.state.size());
      for (size_t i = 0; i < got.params.size(); ++i) {
        EXPECT_TRUE(exact(got.params[i], want.params[i], "param " + std::to_string(i)));
        EXPECT_TRUE(exact(got.masters[i], want.masters[i], "master " + std::to_string(i)));
      }
      for (size_t i = 0; i < got.state.size(); ++i)
        EXPECT_TRUE(exact(got.state[i], want.state[i], "state " + std::to_string(i)));
    }
}

// SmallCNN in FP16 autocast, SGD with momentum (capturable), a sync_free GradScaler: the whole
// step never waits for the device, clipping included. The work goes to a blocking stream, so a
// wait on the legacy default stream would show too. Steps 0 and 1 create the optimizer state.
TEST(CudaAmpSyncFree, AnEagerAmpStepWaitsForTheDeviceZeroTimes) {
  MT_REQUIRE_EMULATED_STREAM_ORDER();
#if defined(MIXTAPE_CUDA_EMULATOR)
  using cuda_emulator::host_waits;
  for (bool clip : {false, true}) {
    SCOPED_TRACE(clip ? "clip" : "no clip");
    models::SmallCNN model(10, 1);
    model.to(gpu());
    const Tensor x = on_cuda(randn({2, 1, 28, 28}, TensorOptions(DType::Float32)));
    const Tensor y = on_cuda(arange(2, TensorOptions(DType::Int64)));
    optim::SGD opt(model.parameters(), optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
    opt.set_capturable(true);
    amp::GradScaler scaler(amp::GradScalerOptions{.sync_free = true});
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);  // blocking: ordered with the legacy stream
    {
      cuda::StreamGuard guard(stream);
      for (int step = 0; step < 3; ++step) {
        SCOPED_TRACE(step);
        const uint64_t before = host_waits();
        opt.zero_grad();
        Tensor loss;
        {
          amp::AutocastGuard autocast(DeviceType::CUDA, DType::Float16);
          loss = cross_entropy(model(x), y);
        }
        scaler.scale(loss).backward();
        if (clip) {
          scaler.unscale_(opt);
          optim::clip_grad_norm_on_device_(model.parameters(), 1.0);
        }
        scaler.step(opt);
        scaler.update();
        EXPECT_EQ(host_waits(), before) << "the step waited for the device";
      }
      const uint64_t before = host_waits();
      const amp::ScalerPoll r = scaler.poll();  // the host learns what happened: one wait
      EXPECT_EQ(host_waits(), before + 1);
      EXPECT_EQ(r.updates, 3);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    }
    ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  }
#endif
}

// Gradients on two devices, the loss (so the scale) on the first: found_inf() is one flag on the
// scale's device, the sum of both devices' flags, and handing it out does not wait for the device.
TEST(CudaAmpSyncFree, FoundInfSumsTheDevicesFlagsOnTheScalesDevice) {
  MT_REQUIRE_CUDA();
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs two GPUs, have " << cuda::device_count();
  for (bool sync_free : {false, true})
    for (bool inf_on_second : {false, true}) {
      SCOPED_TRACE(std::string(sync_free ? "sync_free" : "default") + (inf_on_second ? " inf on cuda:1" : " finite"));
      Tensor a = tensor({1.0, 2.0}).to(Device::CUDA(0)).requires_grad_(true);
      Tensor b = tensor({3.0}).to(Device::CUDA(1)).requires_grad_(true);
      optim::SGD opt({a, b}, {.lr = 0.5});
      opt.set_capturable(sync_free);
      amp::GradScaler scaler(amp::GradScalerOptions{.init_scale = 4.0, .sync_free = sync_free});
      const double c = inf_on_second ? std::numeric_limits<double>::infinity() : 1.0;
      Tensor loss = sum(a) + (sum(b) * c).to(Device::CUDA(0));
      scaler.scale(loss).backward();
      ASSERT_EQ(b.grad().device(), Device::CUDA(1));
      scaler.unscale_(opt);
#if defined(MIXTAPE_CUDA_EMULATOR)
      const uint64_t before = cuda_emulator::host_waits();
      const Tensor found = scaler.found_inf();
      EXPECT_EQ(cuda_emulator::host_waits(), before) << "handing the flag out waited for the device";
#else
      const Tensor found = scaler.found_inf();
#endif
      ASSERT_TRUE(found.defined());
      EXPECT_EQ(found.device(), Device::CUDA(0)) << "the scale's device";
      EXPECT_EQ(found.dim(), 0);
      const float v = found.item<float>();
      if (inf_on_second)
        EXPECT_GT(v, 0.0f);
      else
        EXPECT_EQ(v, 0.0f);
      scaler.step(opt);
      scaler.update();
      EXPECT_EQ(scaler.found_inf().item<float>(), v) << "step() after unscale_() gives the same verdict";
      EXPECT_EQ(b.to(Device::CPU()).item<float>(), inf_on_second ? 3.0f : 3.0f - 0.5f) << "skipped where it was set";
    }
}

}  // namespace
}  // namespace mixtape
