// tests/cuda_ops/test_sample_parity.cpp — every declared sample (OpSchema::sample, core/op_sample.h)
// run on the CPU and on CUDA in f32, f16, bf16 and f64, forward and backward, and compared: the
// CPU kernel is the reference. No list of op names: an op's samples are its parity test.
// EveryCudaKernelRunsInASample then proves the samples reach every CUDA kernel of the registry
// (watched through set_kernel_observer), backward kernels included.
// Tolerance, for a sample that declares r roundings (SampleChecks::parity_roundings; see the
// derivation in cuda_test_util.h): |cuda - cpu| <= (2 u(storage) + 16 r u(acc)) |cpu| +
// 16 r u(acc) (max|cpu| + 1), the max term covering sums whose terms cancel.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <set>

#include "common/op_sample_run.h"
#include "cuda_test_util.h"

namespace mixtape::testing {
namespace {

using cuda_test::gpu;

std::vector<SampleRef> parity_samples() {
  std::vector<SampleRef> out;
  for (const SampleRef& r : registry_samples())
    if (r.sample->checks.cuda_parity) out.push_back(r);
  return out;
}
std::string name_of(const ::testing::TestParamInfo<SampleRef>& info) { return gtest_name(info.param.sample->name); }

::testing::AssertionResult parity(const Tensor& cpu, const Tensor& dev, double r, const std::string& what) {
  if (!cpu.is_floating_point()) return cuda_test::exact(cpu, dev, what);
  const DType dt = cpu.dtype();
  double peak = 0;
  const Tensor c = cpu.contiguous();
  for (int64_t i = 0; i < c.numel(); ++i) {
    const double v = std::fabs(get_element(c, i));
    if (std::isfinite(v)) peak = std::max(peak, v);
  }
  const double ua = cuda_test::acc_roundoff(dt);
  return cuda_test::close(cpu, dev, 16 * r * ua * (peak + 1), 2 * cuda_test::unit_roundoff(dt) + 16 * r * ua, what);
}

// The loss whose backward a parity run compares: sum_i (out_i * w_i).sum(), w_i seeded per output.
Tensor weighted_loss(const OpSample& s, const TensorList& outs, Device device) {
  Tensor loss;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i].defined() || !outs[i].requires_grad()) continue;
    Generator g(sample_seed(s.name + "/weight", i));
    Tensor w = (rand(outs[i].sizes(), DType::Float64, &g) * 2.0 - 1.0).to(outs[i].dtype()).to(device);
    Tensor term = (outs[i] * w).sum();
    loss = loss.defined() ? loss + term : term;
  }
  return loss;
}

struct SampleRun {
  TensorList inputs, outputs, grads;
};
SampleRun run_on(const OpSchema& op, const OpSample& s, DType dt, Device device) {
  SampleRun r;
  r.inputs = make_sample_inputs(s, dt, device, op.differentiable);
  r.outputs = run_sample(op, s, r.inputs);
  Tensor loss = weighted_loss(s, r.outputs, device);
  if (loss.defined()) {
    loss.backward();
    for (const Tensor& x : r.inputs) r.grads.push_back(x.requires_grad() ? x.grad() : Tensor());
  }
  return r;
}

class SampleParity : public ::testing::TestWithParam<SampleRef> {};
TEST_P(SampleParity, CudaMatchesCpuForwardAndBackward) {
  MT_REQUIRE_CUDA();
  const auto [op, s] = GetParam();
  for (DType dt : cuda_test::kFloatTypes) {
    SCOPED_TRACE(s->name + " in " + std::string(dtype_name(dt)));
    const SampleRun c = run_on(*op, *s, dt, Device::CPU());
    const SampleRun d = run_on(*op, *s, dt, gpu());
    ASSERT_EQ(c.outputs.size(), d.outputs.size());
    for (size_t i = 0; i < c.outputs.size(); ++i)
      EXPECT_TRUE(parity(c.outputs[i], d.outputs[i], s->checks.parity_roundings, "output " + std::to_string(i)));
    ASSERT_EQ(c.grads.size(), d.grads.size());
    for (size_t i = 0; i < c.grads.size(); ++i) {
      ASSERT_EQ(c.grads[i].defined(), d.grads[i].defined()) << "grad of input " << i;
      if (c.grads[i].defined()) {
        EXPECT_TRUE(parity(c.grads[i], d.grads[i], 2 * s->checks.parity_roundings, "grad of input " + std::to_string(i)));
      }
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Declared, SampleParity, ::testing::ValuesIn(parity_samples()), name_of);

// Ops whose samples are not declared yet: their CUDA kernels are checked by the hand-written
// parity tests of this folder until then. Kept exact: the test fails both ways, so this is
// always what is left to do.
const std::set<std::string> kNotYetSampled = {
    "_amp_foreach_non_finite_check_and_unscale_",
    "_amp_update_scale_",
    "adam_step_",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool2d_backward",
    "add_",
    "argmax",
    "avg_pool2d",
    "avg_pool2d_backward",
    "batch_norm",
    "batch_norm_backward",
    "binary_cross_entropy",
    "binary_cross_entropy_backward",
    "binary_cross_entropy_with_logits",
    "cat",
    "conv2d",
    "conv2d_input_grad",
    "conv2d_weight_grad",
    "copy_",
    "dropout",
    "gather",
    "index_select",
    "index_select_backward",
    "layer_norm",
    "linear",
    "max_pool2d",
    "max_pool2d_backward",
    "max_pool2d_input_backward",
    "max_pool2d_with_indices",
    "mse_loss",
    "mul_",
    "nll_loss",
    "nll_loss_backward",
    "norm_pow_sum",
    "random_fill_",
    "sgd_step_",
    "slice_backward",
    "to_device",
};

std::mutex g_seen_mu;
std::set<std::string> g_seen;
void observe(const OpSchema& op, DeviceType device) {
  if (device != DeviceType::CUDA) return;
  std::lock_guard<std::mutex> lock(g_seen_mu);
  g_seen.insert(op.name);
}

TEST(SampleParity, EveryCudaKernelRunsInASample) {
  MT_REQUIRE_CUDA();
  if (cuda_test::selfcheck()) GTEST_SKIP() << "the CPU stands in for the device: no CUDA kernel runs";
  set_kernel_observer(observe);
  for (const SampleRef& r : parity_samples()) {
    try {
      run_on(*r.op, *r.sample, DType::Float32, Device::CUDA());
    } catch (const Error&) {
      // reported by CudaMatchesCpuForwardAndBackward
    }
  }
  set_kernel_observer(nullptr);
  std::vector<std::string> unreached, stale;
  for (const OpSchema* op : all_ops()) {
    if (op->composite || op->any_device || !op->kernels[static_cast<int>(DeviceType::CUDA)]) continue;
    const bool seen = g_seen.count(op->name) > 0, pending = kNotYetSampled.count(op->name) > 0;
    if (!seen && !pending) unreached.push_back(op->name);
    if (seen && pending) stale.push_back(op->name);
  }
  auto join = [](const std::vector<std::string>& v) {
    std::string out;
    for (const std::string& n : v) out += (out.empty() ? "" : ", ") + n;
    return out;
  };
  EXPECT_TRUE(unreached.empty()) << "CUDA kernels no declared sample runs (declare one with the op): " << join(unreached);
  EXPECT_TRUE(stale.empty()) << "samples now reach these; remove them from kNotYetSampled: " << join(stale);
}

}  // namespace
}  // namespace mixtape::testing
