// tests/cuda_ops/test_sample_parity.cpp — every declared sample (OpSchema::sample, core/op_sample.h)
// run on the CPU and on CUDA in f32, f16, bf16 and f64, forward and backward, and compared: the
// CPU kernel is the reference. No list of op names: an op's samples are its parity test.
// EveryCudaKernelRunsInASample then proves every CUDA kernel of the registry runs in a sample of
// its own op (watched through set_kernel_observer).
// Tolerance, for a sample that declares r roundings and q intermediate roundings to the storage
// dtype (SampleChecks::parity_roundings, storage_roundings; see the derivation in
// cuda_test_util.h): |cuda - cpu| <= (2 u(storage) + 16 r u(acc)) |cpu| + (16 r u(acc) +
// 2 q u(storage)) (max|cpu| + 1), the max term covering sums whose terms cancel and intermediate
// values (bounded by max|cpu| + 1 where the sample's inputs lie in (-1, 1)).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
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

::testing::AssertionResult parity(const Tensor& cpu, const Tensor& dev, double r, const std::string& what,
                                   double q = 0) {
  if (!cpu.is_floating_point()) return cuda_test::exact(cpu, dev, what);
  const DType dt = cpu.dtype();
  double peak = 0;
  const Tensor c = cpu.contiguous();
  for (int64_t i = 0; i < c.numel(); ++i) {
    const double v = std::fabs(get_element(c, i));
    if (std::isfinite(v)) peak = std::max(peak, v);
  }
  // 16-bit operands: tensor-core FP32 accumulation need not round to nearest throughout (the
  // factor the hand-written GEMM and conv parity tests use).
  const double ua = cuda_test::acc_roundoff(dt) * (is_reduced_float(dt) ? 4 : 1);
  const double us = cuda_test::unit_roundoff(dt);
  return cuda_test::close(cpu, dev, (16 * r * ua + 2 * q * us) * (peak + 1), 2 * us + 16 * r * ua, what);
}

// EveryCudaKernelRunsInASample counts an op's CUDA kernel only when it runs in one of the op's
// own samples (its call or its backward): not in another op's sample (a clone or mul a sample
// makes its operands with), and not while the test makes inputs or output gradients.
std::atomic<const OpSchema*> g_watching{nullptr};
struct WatchScope {
  explicit WatchScope(const OpSchema& op) { g_watching = &op; }
  ~WatchScope() { g_watching = nullptr; }
};

struct SampleRun {
  TensorList inputs, outputs, grads;
};
// The backward compared is that of  sum_i (out_i * w_i).sum(): output i's gradient is w_i, seeded
// per output, given to the tape directly (no loss ops run).
SampleRun run_on(const OpSchema& op, const OpSample& s, DType dt, Device device) {
  SampleRun r;
  r.inputs = make_sample_inputs(s, dt, device, op.differentiable);
  {
    WatchScope watch(op);
    r.outputs = run_sample(op, s, r.inputs);
  }
  TensorList roots, seeds;
  for (size_t i = 0; i < r.outputs.size(); ++i) {
    if (!r.outputs[i].defined() || !r.outputs[i].requires_grad()) continue;
    Generator g(sample_seed(s.name + "/weight", i));
    roots.push_back(r.outputs[i]);
    seeds.push_back((rand(r.outputs[i].sizes(), DType::Float64, &g) * 2.0 - 1.0).to(r.outputs[i].dtype()).to(r.outputs[i].device()));
  }
  if (roots.empty()) return r;
  {
    WatchScope watch(op);
    autograd::backward(roots, seeds);
  }
  for (const Tensor& x : r.inputs) r.grads.push_back(x.requires_grad() ? x.grad() : Tensor());
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
      EXPECT_TRUE(parity(c.outputs[i], d.outputs[i], s->checks.parity_roundings, "output " + std::to_string(i),
                         s->checks.storage_roundings));
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

std::mutex g_seen_mu;
std::set<std::string> g_seen;
void observe(const OpSchema& op, DeviceType device) {
  if (device != DeviceType::CUDA || g_watching.load() != &op) return;
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
  std::vector<std::string> unreached;
  for (const OpSchema* op : all_ops()) {
    if (op->composite || op->any_device || !op->kernels[static_cast<int>(DeviceType::CUDA)]) continue;
    if (!g_seen.count(op->name)) unreached.push_back(op->name);
  }
  std::string names;
  for (const std::string& n : unreached) names += (names.empty() ? "" : ", ") + n;
  EXPECT_TRUE(unreached.empty()) << "CUDA kernels no declared sample runs (declare one with the op): " << names;
}

}  // namespace
}  // namespace mixtape::testing
