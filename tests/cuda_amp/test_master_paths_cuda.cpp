// tests/cuda_amp/test_master_paths_cuda.cpp — the master-weight paths of
// tests/amp/test_master_weight_paths.cpp on CUDA tensors: FP32 gradient accumulation of a 16-bit
// parameter (the grad_dtype cast runs as a device op) and a write to the model re-seeding its
// master (the consistency check runs as device ops plus one host read). Same numbers as the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "amp/grad_scaler.h"
#include "cuda_ops/cuda_test_util.h"
#include "mixtape/mixtape.h"
#include "core/rng.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"

namespace mixtape::testing {
namespace {

std::vector<float> host(const Tensor& t) { return to_device(t, Device::CPU()).to_vector<float>(); }

TEST(CudaMasterPaths, SixteenBitGradientsAccumulateInFp32OnTheDevice) {
  MT_REQUIRE_CUDA();
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    Tensor w = zeros({3}, TensorOptions(dt).with_device(cuda_test::gpu())).requires_grad_(true);
    optim::SGD opt({w}, {.lr = 1.0});
    amp::GradScaler scaler({.init_scale = 4.0});
    auto micro = [&](double c) {
      scaler.scale(sum(mul(w, full({3}, c, TensorOptions(DType::Float32).with_device(cuda_test::gpu()))))).backward();
    };
    micro(1024.0);
    for (int i = 0; i < 4; ++i) micro(0.25);
    ASSERT_EQ(w.grad().dtype(), DType::Float32);
    EXPECT_EQ(host(w.grad()), std::vector<float>(3, 4.0f * 1025.0f)) << dtype_name(dt);
    scaler.unscale_(opt);
    EXPECT_DOUBLE_EQ(optim::clip_grad_norm_({w}, 1e9), std::sqrt(3.0) * 1025.0) << "the true norm, not S times it";
    EXPECT_TRUE(scaler.step(opt));
    EXPECT_EQ(host(opt.master(w)), std::vector<float>(3, -1025.0f)) << dtype_name(dt);
  }
}

// Gradients on two devices (a model split across the CPU and a GPU): both clip forms fold every
// gradient into one norm and scale each on its own device (the norm's partials meet on the first
// gradient's device), as PyTorch allows; this was refused as "every gradient must be on one device".
TEST(CudaMasterPaths, ClippingTakesGradientsOnSeveralDevices) {
  MT_REQUIRE_CUDA();
  for (bool on_device : {false, true}) {
    Tensor a = zeros({2}).requires_grad_(true);
    Tensor b = zeros({2}, TensorOptions(DType::Float32).with_device(cuda_test::gpu())).requires_grad_(true);
    a.set_grad(full({2}, 3.0));
    b.set_grad(full({2}, 4.0, TensorOptions(DType::Float32).with_device(cuda_test::gpu())));
    // |(3, 3, 4, 4)| = sqrt(50); clipped to norm 1.
    const double norm = on_device ? to_device(optim::clip_grad_norm_on_device_({a, b}, 1.0), Device::CPU()).item<double>()
                                  : optim::clip_grad_norm_({a, b}, 1.0);
    EXPECT_DOUBLE_EQ(norm, std::sqrt(50.0));
    const float coef = static_cast<float>(1.0 / (std::sqrt(50.0) + 1e-6));
    EXPECT_EQ(host(a.grad()), std::vector<float>(2, 3.0f * coef)) << on_device;
    EXPECT_EQ(host(b.grad()), std::vector<float>(2, 4.0f * coef)) << on_device;
  }
}

TEST(CudaMasterPaths, AWriteToTheModelReseedsTheMasterOnTheDevice) {
  MT_REQUIRE_CUDA();
  Tensor w = ones({4}, TensorOptions(DType::Float16).with_device(cuda_test::gpu())).requires_grad_(true);
  optim::SGD opt({w}, {.lr = 1.0});
  w.set_grad(full({4}, 1e-4, TensorOptions(DType::Float32).with_device(cuda_test::gpu())));
  opt.step();
  const float fine = host(opt.master(w))[0];
  ASSERT_NE(fine, 1.0f);
  {
    autograd::NoGradGuard no_grad;
    copy_(w, ones({4}, TensorOptions(DType::Float32).with_device(cuda_test::gpu())));  // the values it already holds: the finer master is kept
  }
  EXPECT_EQ(host(opt.master(w))[0], fine);
  {
    autograd::NoGradGuard no_grad;
    copy_(w, full({4}, 3.0, TensorOptions(DType::Float32).with_device(cuda_test::gpu())));  // new values: the master follows the model
  }
  w.set_grad(zeros({4}, TensorOptions(DType::Float32).with_device(cuda_test::gpu())));
  opt.set_inv_scale_for_next_step(1.0f);
  opt.step();
  EXPECT_EQ(host(w), std::vector<float>(4, 3.0f));
  EXPECT_EQ(host(opt.master(w)), std::vector<float>(4, 3.0f));
}

TEST(CudaMasterPaths, StochasticallyWrittenEntriesSurviveANoOpWrite) {
  MT_REQUIRE_CUDA();
  const Device dev = cuda_test::gpu();
  Tensor w = full({256}, 1.0, TensorOptions(DType::BFloat16).with_device(dev)).requires_grad_(true);
  optim::SGD opt({w}, {.lr = 1.0});
  opt.set_stochastic_rounding(true, 21);
  Generator gen(4);
  for (int i = 0; i < 4; ++i) {
    w.set_grad(to_device(mul(randn({256}, {}, &gen), 1e-3), dev));
    opt.step();
  }
  const std::vector<float> master = host(opt.master(w));
  {
    autograd::NoGradGuard no_grad;
    copy_(w, w.detach().clone());  // the values it holds: nothing to re-seed
  }
  EXPECT_EQ(host(opt.master(w)), master);
  {
    autograd::NoGradGuard no_grad;
    Tensor first = w.narrow(0, 0, 1);
    fill_(first, 8.0);  // one entry written: that entry follows the model, the rest stay
  }
  std::vector<float> want = master;
  want[0] = 8.0f;
  EXPECT_EQ(host(opt.master(w)), want);
}

}  // namespace
}  // namespace mixtape::testing
