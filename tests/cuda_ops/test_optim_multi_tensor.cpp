// tests/cuda_ops/test_optim_multi_tensor.cpp — the multi-tensor optimizer steps on the device
// (sgd_step_multi_, adam_step_multi_; optim/cuda/step_kernels.cu):
//   - bit-identical to the single-tensor op run once per tensor on the device, and to the CPU,
//     for every optimizer variant and parameter dtype (tests/optim/multi_step_cases.h), with more
//     tensors than one launch's table holds, sizes 0 and 1 among them, and a change of the
//     stochastic rounding seed along the list;
//   - an optimizer's step on the device gives the per-parameter path's bits;
//   - kernel launches per optimizer step, counted by the profiler: one per group and dtype
//     combination where the tables hold them (ResNet-20 SGD: 1, was 65), more only when the
//     parameters outnumber a table.
// The CPU side of the same comparisons: tests/optim/test_multi_tensor_step.cpp.
#include "../optim/multi_step_cases.h"
#include "cuda_test_util.h"
#include "models/nn.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#if defined(MIXTAPE_WITH_CUDA)
#include "optim/cuda/step_kernels.h"
#endif

namespace mixtape {
namespace {
using namespace cuda_test;
namespace ms = testing::multi_step;

// Tensors one launch's table holds (the device side's figure; any count without CUDA).
int tensors_per_launch(bool adam, DType w) {
#if defined(MIXTAPE_WITH_CUDA)
  return optim::cuda::multi_step_tensors_per_launch(adam, w);
#else
  (void)adam, (void)w;
  return 64;
#endif
}

class CudaMultiStep : public ::testing::TestWithParam<ms::Case> {};

TEST_P(CudaMultiStep, BitIdenticalToTheSingleOpOnTheDeviceAndToTheCpu) {
  MT_REQUIRE_CUDA();
  const ms::Case& c = GetParam();
  const DType w = c.param == DType::Float64 ? DType::Float64 : DType::Float32;
  const size_t count = static_cast<size_t>(tensors_per_launch(c.adam, w)) + 9;  // two tables
  const ms::Operands init = ms::make(c, ms::sizes(count), fresh_seed());
  const ms::Operands cpu = ms::copy_to(init, Device::CPU());
  const ms::Operands single = ms::copy_to(init, gpu()), multi = ms::copy_to(init, gpu());
  ms::run_single(c, cpu);
  ms::run_single(c, single);
  ms::run_multi(c, multi);
  EXPECT_TRUE(ms::same_written(multi, single)) << "multi-tensor vs single-tensor op, both on the device";
  EXPECT_TRUE(ms::same_written(multi, cpu)) << "multi-tensor op on the device vs the CPU";
}
INSTANTIATE_TEST_SUITE_P(Cases, CudaMultiStep, ::testing::ValuesIn(ms::cases()),
                         [](const ::testing::TestParamInfo<ms::Case>& i) { return i.param.name; });

TEST(CudaMultiStep, TensorsOnTwoDevicesAreRefusedNamingBoth) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "the CPU standing in for the device has one device";
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs two GPUs, have " << cuda::device_count();
  const ms::Case c = ms::cases()[1];  // SGD with momentum, f32
  auto [in, a] = ms::multi_call(c, ms::copy_to(ms::make(c, {3, 4}, 1), gpu()));
  in[3] = in[3].to(Device::CUDA(1));  // tensor 1's grad
  try {
    dispatch(*find_op("sgd_step_multi_"), in, a);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("sgd_step_multi_"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cuda:1"), std::string::npos) << msg;
  }
}

// ---- optimizers on the device ----

// The per-parameter path (update() for every parameter, the optimizers' path before the
// multi-tensor ops).
template <typename Base>
struct PerParameter : Base {
  using Base::Base;
  void update_many(const std::vector<const optim::Optimizer::ParamUpdate*>& us, const optim::HyperParams& g) override {
    optim::Optimizer::update_many(us, g);
  }
};

// ResNet-20's parameters on the device: f32 (AMP with an FP32 model), or with every weight of
// more than one dimension 16-bit (the --master-weights layout: convolutions and the linear layer
// 16-bit, batch norm and biases FP32).
std::vector<Tensor> resnet20_params(DType weights) {
  models::ResNet model(20, 10, 3);
  std::vector<Tensor> out;
  for (const Tensor& p : model.parameters()) {
    const DType dt = p.dim() > 1 ? weights : DType::Float32;
    out.push_back(p.detach().to(dt).to(gpu()).clone().requires_grad_(true));
  }
  return out;
}
std::vector<Tensor> clones(const std::vector<Tensor>& ps) {
  std::vector<Tensor> out;
  for (const Tensor& p : ps) out.push_back(p.detach().clone().requires_grad_(true));
  return out;
}
// FP32 gradients (a master's grad_dtype; the scaler unscales them in place).
void set_grads(const std::vector<Tensor>& ps, uint64_t seed) {
  Generator g(seed);
  for (const Tensor& p : ps) p.set_grad(on_cuda(randn(p.sizes(), TensorOptions(DType::Float32), &g) * 0.1));
}
// Kernel launches of one opt.step(), the profiler's table printed.
int64_t launches_of_step(optim::Optimizer& opt, const std::string& what) {
  profiler::Profile on;
  opt.step();
  const profiler::Report r = profiler::report();
  std::cout << what << ":\n" << r.table();
  return r.total_launches();
}

TEST(CudaMultiStepOptimizer, ResNet20SgdStepIsOneLaunchAndThePerParameterBits) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "the CPU standing in for the device launches no kernels";
  const std::vector<Tensor> a = resnet20_params(DType::Float32), b = clones(a);
  ASSERT_EQ(a.size(), 65u);
  const optim::SGDOptions options{.lr = 0.01, .momentum = 0.9, .weight_decay = 5e-4, .nesterov = true};
  optim::SGD multi(a, options);
  PerParameter<optim::SGD> reference(b, options);
  for (int step = 0; step < 3; ++step) {
    set_grads(a, 10 + step);
    set_grads(b, 10 + step);
    if (step < 2) {  // the first step creates the momentum buffers (their fills launch too)
      multi.step();
      reference.step();
      continue;
    }
    const int64_t after = launches_of_step(multi, "SGD step, multi-tensor");
    const int64_t before = launches_of_step(reference, "SGD step, per parameter");
    EXPECT_EQ(after, 1) << "one launch for ResNet-20's 65 parameters";
    EXPECT_EQ(before, 65);
    std::cout << "ResNet-20 SGD step: " << after << " kernel launch(es), per parameter " << before << "\n";
  }
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(ms::same_bits(a[i], b[i])) << "parameter " << i;
    EXPECT_TRUE(ms::same_bits(multi.state(a[i], "momentum_buffer"), reference.state(b[i], "momentum_buffer")))
        << "momentum of parameter " << i;
  }
}

TEST(CudaMultiStepOptimizer, MasterWeightsAdamStepIsOneLaunchPerDtypeCombination) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "the CPU standing in for the device launches no kernels";
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    const std::vector<Tensor> a = resnet20_params(dt), b = clones(a);
    optim::AdamW multi(a, {.lr = 1e-3});
    PerParameter<optim::AdamW> reference(b, {.lr = 1e-3});
    multi.set_stochastic_rounding(true, 5);
    reference.set_stochastic_rounding(true, 5);
    for (int step = 0; step < 2; ++step) {
      set_grads(a, 20 + step);
      set_grads(b, 20 + step);
      if (step == 0) {
        multi.step();
        reference.step();
        continue;
      }
      // 16-bit weights (FP32 masters, FP32 grads) and FP32 batch norm and biases: two tables.
      EXPECT_EQ(launches_of_step(multi, "AdamW step with masters, multi-tensor"), 2);
      EXPECT_EQ(launches_of_step(reference, "AdamW step with masters, per parameter"), 65);
    }
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(ms::same_bits(a[i], b[i])) << "parameter " << i;
      EXPECT_TRUE(ms::same_bits(multi.master(a[i]), reference.master(b[i]))) << "master " << i;
      EXPECT_TRUE(ms::same_bits(multi.state(a[i], "exp_avg_sq"), reference.state(b[i], "exp_avg_sq"))) << i;
    }
  }
}

TEST(CudaMultiStepOptimizer, MoreParametersThanATableHoldTakeMoreLaunches) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "the CPU standing in for the device launches no kernels";
  const int per_launch = tensors_per_launch(false, DType::Float32);
  const int64_t count = 2 * per_launch + 3;
  std::vector<Tensor> ps;
  for (int64_t i = 0; i < count; ++i) ps.push_back(on_cuda(full({1 + i % 5}, 0.5)).requires_grad_(true));
  optim::SGD opt(ps, {.lr = 0.1});
  set_grads(ps, 3);
  EXPECT_EQ(launches_of_step(opt, std::to_string(count) + " parameters"), 3)
      << count << " parameters, " << per_launch << " per launch";
}

}  // namespace
}  // namespace mixtape
