// tests/cuda_ops/test_amp_end_to_end.cpp — AMP training on CUDA against the same training on the
// CPU: SmallCNN in FP16 with FP32 master weights, SGD with momentum, a GradScaler with a short
// growth interval, two micro-batches accumulated per step, and one step whose loss is made inf
// on purpose (the scaler must skip it and back off, identically on both devices).
// What must match exactly: which steps were skipped, the scale and growth tracker after every
// update() (their arithmetic is bit-identical and their inputs, found_inf, agree), and
// param == RNE(master) on the device. What matches approximately: masters and parameters, whose
// gradients differ by the conv/GEMM summation-order bounds of test_conv_norm_dropout_parity.cpp
// (relative ~K 2^-24 with K <= 288 here, so ~2e-5 of the gradient's magnitude), moved by
// lr = 0.05 over 4 steps with momentum 0.9 (at most ~4 x 1.9 = 7.6 gradient-sized moves): master
// differences stay below 7.6 * 0.05 * 2e-5 * |g| ~ 1e-5 |g| (|g| < 1 here), plus the FP16 storage
// of activations rounding differently by one ulp (2^-11 relative) where the two runs' values sit
// on a rounding boundary, which propagates through 4 steps: tolerance 2e-3 absolute on masters.
#include "cuda_test_util.h"
#include "amp/grad_scaler.h"
#include "models/nn.h"

namespace mixtape {
namespace {
using namespace cuda_test;

struct RunResult {
  std::vector<bool> stepped;
  std::vector<double> scales;
  std::vector<int64_t> trackers;
  std::vector<Tensor> masters, params;
};

RunResult train(Device dev, const models::SmallCNN& init, const std::vector<Tensor>& xs, const std::vector<Tensor>& ys) {
  models::SmallCNN model(10, 1);
  {
    autograd::NoGradGuard no_grad;
    auto d = model.parameters(), s = init.parameters();
    for (size_t i = 0; i < d.size(); ++i) d[i].copy_(s[i]);
  }
  model.to(dev);
  model.to(DType::Float16);
  optim::SGD opt(model.parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  amp::GradScaler scaler(amp::GradScalerOptions{.init_scale = 1024.0, .growth_interval = 2});
  RunResult r;
  for (size_t step = 0; step < 5; ++step) {
    opt.zero_grad();
    for (int micro = 0; micro < 2; ++micro) {
      const size_t k = (step * 2 + micro) % xs.size();
      Tensor logits = model(to_device(xs[k], dev).to(DType::Float16));
      Tensor loss = cross_entropy(logits.to(DType::Float32), to_device(ys[k], dev)) * 0.5;
      if (step == 2 && micro == 1) loss = loss * std::numeric_limits<double>::infinity();  // overflow on purpose
      scaler.scale(loss).backward();
    }
    r.stepped.push_back(scaler.step(opt));
    scaler.update();
    r.scales.push_back(scaler.get_scale());
    r.trackers.push_back(scaler.get_growth_tracker());
  }
  for (const Tensor& p : model.parameters()) {
    r.params.push_back(p.to(Device::CPU()));
    r.masters.push_back(opt.master(p).to(Device::CPU()));
  }
  return r;
}

TEST(CudaAmpEndToEnd, Fp16SmallCnnWithScalerMastersAndAccumulationMatchesTheCpu) {
  MT_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  Generator gen(seed);
  models::SmallCNN init(10, 1);
  {
    autograd::NoGradGuard no_grad;
    for (Tensor p : init.parameters()) p.copy_(randn(p.sizes(), TensorOptions(DType::Float32), &gen) * 0.1);
  }
  std::vector<Tensor> xs, ys;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> cls(0, 9);
  for (int i = 0; i < 4; ++i) {
    xs.push_back(randn({8, 1, 28, 28}, TensorOptions(DType::Float32), &gen));
    Tensor y = Tensor::empty({8}, TensorOptions(DType::Int64));
    for (int64_t j = 0; j < 8; ++j) set_element(y, j, cls(rng));
    ys.push_back(y);
  }
  const RunResult cpu = train(Device::CPU(), init, xs, ys);
  const RunResult gpu_run = train(gpu(), init, xs, ys);
  EXPECT_EQ(cpu.stepped, gpu_run.stepped);
  EXPECT_EQ(cpu.scales, gpu_run.scales);
  EXPECT_EQ(cpu.trackers, gpu_run.trackers);
  EXPECT_FALSE(cpu.stepped[2]) << "the inf step must be skipped";
  for (size_t i = 0; i < cpu.masters.size(); ++i) {
    EXPECT_TRUE(close(cpu.masters[i], gpu_run.masters[i], 2e-3, 0.0, "master " + std::to_string(i)));
    EXPECT_TRUE(exact(to_dtype(gpu_run.masters[i], DType::Float16), gpu_run.params[i], "param == RNE(master) " + std::to_string(i)));
  }
}

}  // namespace
}  // namespace mixtape
