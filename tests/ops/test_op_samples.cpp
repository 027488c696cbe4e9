// tests/ops/test_op_samples.cpp — the CPU tests every op gets from the samples it declares
// (OpSchema::sample, core/op_sample.h), with no list of op names here:
//   Gradcheck    each sample of a differentiable op, in float64, against central differences;
//   RoundsOnce16 each sample of a pointwise op (or one that says so): op16(x) equals
//                round16(op32(float(x))) bit for bit, in f16 and bf16 — the 16-bit kernels compute
//                in float and round once, on store (docs/amp-behaviours.md).
// The CUDA suite runs the same samples on the device (tests/cuda_ops/test_sample_parity.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "common/op_sample_run.h"

namespace mixtape::testing {
namespace {

std::vector<SampleRef> gradcheck_samples() {
  std::vector<SampleRef> out;
  for (const SampleRef& r : registry_samples())
    if (r.op->differentiable && r.sample->checks.gradcheck &&
        std::any_of(r.sample->args.begin(), r.sample->args.end(), [](const SampleArg& a) { return a.differentiable; }))
      out.push_back(r);
  return out;
}
std::vector<SampleRef> rounding_samples() {
  std::vector<SampleRef> out;
  for (const SampleRef& r : registry_samples())
    if (sample_rounds_once(*r.op, *r.sample)) out.push_back(r);
  return out;
}
std::string name_of(const ::testing::TestParamInfo<SampleRef>& info) { return gtest_name(info.param.sample->name); }

class SampleGradcheck : public ::testing::TestWithParam<SampleRef> {};
TEST_P(SampleGradcheck, Float64MatchesCentralDifferences) {
  const auto [op, s] = GetParam();
  const autograd::GradcheckResult r = gradcheck_sample(*op, *s);
  EXPECT_TRUE(r.ok) << s->name << ": " << r.report;
  // A composite records its pieces, not itself.
  if (!op->composite) {
    EXPECT_TRUE(r.ops_on_tape.count(op->name)) << s->name << ": the sample never recorded " << op->name;
  }
}
INSTANTIATE_TEST_SUITE_P(Declared, SampleGradcheck, ::testing::ValuesIn(gradcheck_samples()), name_of);

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.dtype() == cb.dtype() && ca.sizes() == cb.sizes() && std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

class SampleRoundsOnce : public ::testing::TestWithParam<SampleRef> {};
TEST_P(SampleRoundsOnce, SixteenBitEqualsFloatRoundedOnce) {
  const auto [op, s] = GetParam();
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(s->name + " in " + std::string(dtype_name(dt)));
    const TensorList in16 = make_sample_inputs(*s, dt, Device::CPU(), false);
    TensorList in32;
    for (const Tensor& t : in16) in32.push_back(t.is_floating_point() && !t.is_wrapped_number() ? t.to(DType::Float32) : t);
    const TensorList got = run_sample(*op, *s, in16), want32 = run_sample(*op, *s, in32);
    ASSERT_EQ(got.size(), want32.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const Tensor want = want32[i].is_floating_point() ? want32[i].to(dt) : want32[i];
      EXPECT_TRUE(same_bits(got[i], want)) << "output " << i << ": " << got[i].describe() << " vs round16(f32 result)";
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Declared, SampleRoundsOnce, ::testing::ValuesIn(rounding_samples()), name_of);

// Every op declares at least one sample of its own: its gradcheck, 16-bit and CUDA tests come
// from it (a sample of another op that happens to call it does not count).
TEST(OpSamples, EveryOpDeclaresASample) {
  for (const OpSchema* op : all_ops()) EXPECT_FALSE(op->samples.empty()) << op->name << " declares no sample (OpSchema::sample)";
}

}  // namespace
}  // namespace mixtape::testing
