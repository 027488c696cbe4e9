// tests/amp/test_numerics_check.cpp — the NaN locator (core/numerics_check.h): the first op,
// forward or backward, that makes inf or NaN from finite inputs is named with its tape entry,
// dtypes, shapes, autocast decision and input amaxes; consequences are not "first"; the
// GradScaler's overflows are left to the scaler, so an AMP step runs as usual.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "common/numerics_error_of.h"
#include "mixtape/mixtape.h"
#include "models/zoo/mlp.h"

namespace mixtape::testing {
namespace {

using numerics::CheckNumerics;
using numerics::NumericsError;
using ::mixtape::testing::numerics_error_of;
using numerics::OnFinding;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }


TEST(NumericsCheck, NamesAForwardOpThatOverflowsInFp16UnderAutocast) {
  CheckNumerics check;
  const Tensor a = full({1, 2}, 200.0), b = full({2, 1}, 200.0);  // f32; 200*200*2 = 80000 > 65504
  amp::AutocastGuard autocast(DeviceType::CPU, DType::Float16);
  const NumericsError e = numerics_error_of([&] { matmul(a, b); });
  EXPECT_EQ(e.op(), "matmul");
  EXPECT_FALSE(e.backward());
  const std::string m = e.what();
  EXPECT_TRUE(has(m, "matmul (forward) produced inf or NaN from finite inputs")) << m;
  EXPECT_TRUE(has(m, "policy lower_precision in a Float16 region: floating inputs cast to Float16")) << m;
  EXPECT_TRUE(has(m, "f16[1, 2] amax 200")) << m;
  EXPECT_TRUE(has(m, "output 0 f16[1, 1] (1 inf, 0 NaN of 1)")) << m;
  ASSERT_EQ(numerics::findings().size(), 1u);
  EXPECT_EQ(numerics::findings()[0].op, "matmul");
}

TEST(NumericsCheck, NamesExpOverflowingInTheFp32ItIsCastToUnderAutocast) {
  CheckNumerics check;
  const Tensor x = full({3}, 100.0).to(DType::Float16);  // exp(100) > FLT_MAX
  amp::AutocastGuard autocast(DeviceType::CPU, DType::Float16);
  const NumericsError e = numerics_error_of([&] { exp(x); });
  EXPECT_EQ(e.op(), "exp");
  const std::string m = e.what();
  EXPECT_TRUE(has(m, "policy fp32 in a Float16 region: floating inputs cast to Float32")) << m;
  EXPECT_TRUE(has(m, "input f32[3] amax 100")) << m;
  EXPECT_TRUE(has(m, "forward call (kernel call #")) << m;
}

TEST(NumericsCheck, AnOpWhoseInputIsAlreadyNonFiniteIsNotFirst) {
  CheckNumerics check;
  Tensor x = full({2}, 1.0);
  set_element(x, 0, INFINITY);  // from outside any op
  EXPECT_NO_THROW(exp(add(x, 1.0)));
  // FP8 tensors are inputs like any other: the NaN an e4m3fn tensor holds is not to_dtype's.
  const Tensor f8 = tensor({NAN, 1.0}).to(DType::Float8_e4m3fn);
  EXPECT_NO_THROW(f8.to(DType::Float32));
  // A scalar operand counts as an input too: w * inf is the caller's inf, not mul's.
  EXPECT_NO_THROW(mul(full({2}, 0.5), INFINITY));
  EXPECT_TRUE(numerics::findings().empty());
  // An op that writes inf on purpose (its attribute is the inf) is not a finding either.
  EXPECT_NO_THROW(full({2}, -INFINITY));
}

TEST(NumericsCheck, NamesABackwardOpWithTheForwardOpWhoseGradientItComputes) {
  CheckNumerics check;
  const Tensor x = tensor({0.0, 1.0}).requires_grad_(true);
  const Tensor loss = sum(mul(sqrt(x), 0.0));  // forward finite; sqrt's backward: 0 / (2 * 0)
  const NumericsError e = numerics_error_of([&] { loss.backward(); });
  EXPECT_EQ(e.op(), "div");
  EXPECT_TRUE(e.backward());
  const std::string m = e.what();
  EXPECT_TRUE(has(m, "div (backward)")) << m;
  EXPECT_TRUE(has(m, "inside the backward of tape entry #")) << m;
  EXPECT_TRUE(has(m, "SqrtBackward  sqrt(f32[2])")) << m;
  EXPECT_TRUE(has(m, "autocast: off (backward runs in the dtypes its forward chose)")) << m;
  EXPECT_TRUE(has(m, "(0 inf, 1 NaN of 2)")) << m;
}

TEST(NumericsCheck, ReportModeKeepsTheFirstFindingAndGoesOn) {
  CheckNumerics check(OnFinding::Report);
  const Tensor big = full({2}, 1e30);
  Tensor y;
  EXPECT_NO_THROW(y = mul(big, big));  // inf: the first
  EXPECT_NO_THROW(mul(full({2}, 3e38), 10.0));  // another, later one
  ASSERT_EQ(numerics::findings().size(), 1u);
  EXPECT_EQ(numerics::findings()[0].op, "mul");
  EXPECT_TRUE(has(numerics::findings()[0].message, "amax 1e+30")) << numerics::findings()[0].message;
  EXPECT_TRUE(std::isinf(get_element(y, 0)));
}

TEST(NumericsCheck, TheEnvironmentSwitchIsReadAtStartUp) {
  // Run plain, and by ctest with MIXTAPE_CHECK_NUMERICS=1 and =report (tests/CMakeLists.txt).
  const char* env = std::getenv("MIXTAPE_CHECK_NUMERICS");
  const std::string v = env ? env : "";
  if (v.empty() || v == "0") {
    EXPECT_FALSE(numerics::enabled());
  } else {
    EXPECT_TRUE(numerics::enabled());
    EXPECT_EQ(numerics::mode(), v == "report" ? OnFinding::Report : OnFinding::Throw);
  }
}

TEST(NumericsCheck, OffItSeesNothingAndTheGuardRestoresTheSwitch) {
  const bool from_env = numerics::enabled();  // MIXTAPE_CHECK_NUMERICS may be set for the whole run
  numerics::set_enabled(false);
  numerics::reset();  // the earlier tests' findings
  EXPECT_NO_THROW(exp(full({2}, 100.0)));
  EXPECT_TRUE(numerics::findings().empty());
  { CheckNumerics on; }
  EXPECT_FALSE(numerics::enabled()) << "the guard restores the switch";
  numerics::set_enabled(from_env);
}

// One AMP step of a small MLP in an FP16 region with a GradScaler at `init_scale`.
struct StepResult {
  double scale_after;
  int64_t left_to_scaler;
};
StepResult amp_step(double init_scale) {
  manual_seed(1);
  models::MLP model(4, {8}, 2);
  optim::SGD opt(model.parameters(), {.lr = 0.1});
  amp::GradScaler scaler({.init_scale = init_scale});
  const Tensor x = randn({8, 4}), t = randn({8, 2});
  Tensor loss;
  {
    amp::AutocastGuard autocast(DeviceType::CPU, DType::Float16);
    loss = mse_loss(model(x), t);
  }
  scaler.scale(loss).backward();
  scaler.step(opt);
  scaler.update();
  return {scaler.get_scale(), numerics::overflows_left_to_scaler()};
}

TEST(NumericsCheck, ANormalAmpStepRaisesNothing) {
  CheckNumerics check;
  const StepResult r = amp_step(65536.0);
  EXPECT_TRUE(numerics::findings().empty());
  EXPECT_EQ(r.left_to_scaler, 0);
  EXPECT_EQ(r.scale_after, 65536.0);
}

TEST(NumericsCheck, TheScalersOverflowsAreLeftToTheScaler) {
  CheckNumerics check;
  // 2^100 overflows the FP16 backward: an inf from finite inputs, expected and skipped by the scaler.
  const StepResult r = amp_step(std::ldexp(1.0, 100));
  EXPECT_TRUE(numerics::findings().empty()) << numerics::findings()[0].message;
  EXPECT_GT(r.left_to_scaler, 0);
  EXPECT_EQ(r.scale_after, std::ldexp(1.0, 99)) << "the scaler saw the overflow and backed off";
}

TEST(NumericsCheck, WithoutAScaledLossABackwardOverflowIsReported) {
  CheckNumerics check;
  const Tensor w = full({2, 2}, 1.0).requires_grad_(true);
  Tensor loss;
  {
    amp::AutocastGuard autocast(DeviceType::CPU, DType::Float16);
    loss = sum(matmul(full({1, 2}, 1.0), w));
  }
  const Tensor scaled_by_hand = mul(loss, std::ldexp(1.0, 100));  // no GradScaler: nothing expects it
  const NumericsError e = numerics_error_of([&] { scaled_by_hand.backward(); });
  EXPECT_TRUE(e.backward());
  EXPECT_TRUE(has(e.what(), "Backward")) << e.what();
}

// FP8 GEMMs skip run_kernel (amp/fp8_ops.cpp runs them from the Autocast layer): the locator must
// scan their outputs too, or an overflow there is reported nowhere (every later op has a
// non-finite input and is "not first").
TEST(NumericsCheck, NamesAnFp8LinearThatOverflows) {
  CheckNumerics check;
  const Tensor x = full({1, 4}, 1e30), w = full({2, 4}, 1e30);  // 4e60 > FLT_MAX, from finite inputs
  amp::Fp8Autocast fp8(amp::CurrentScaling{}, nullptr, {DType::Float32});
  const NumericsError e = numerics_error_of([&] { linear(x, w); });
  EXPECT_EQ(e.op(), "linear");
  EXPECT_FALSE(e.backward());
  EXPECT_TRUE(has(e.what(), "in a BFloat16 region: floating inputs cast to Float8_e4m3fn")) << e.what();
}

// The FP8 GEMMs' backward also runs outside run_kernel: an FP8 linear whose input gradient
// overflows (finite output gradient and weight) is named as its backward, with its tape entry.
TEST(NumericsCheck, NamesAnFp8LinearsBackwardThatOverflows) {
  CheckNumerics check;
  const Tensor x = full({1, 4}, 1e-30).requires_grad_(true), w = full({2, 4}, 1e30);  // forward: 4
  amp::Fp8Autocast fp8(amp::CurrentScaling{}, nullptr, {DType::Float32});
  const Tensor y = linear(x, w);
  const NumericsError e = numerics_error_of([&] { y.backward(full({1, 2}, 1e10)); });  // dx = 2e40 > FLT_MAX
  EXPECT_EQ(e.op(), "linear_fp8_backward");
  EXPECT_TRUE(e.backward());
  EXPECT_TRUE(has(e.what(), "Fp8LinearBackward")) << e.what();
  EXPECT_TRUE(has(e.what(), "grad_output")) << e.what();
}

// A forward run while an earlier micro-batch's scaled loss is in flight (gradient accumulation:
// scale().backward(), then the next forward, before update()) is not the scaler's to absorb:
// its overflow is a fault, as outside the scaler.
TEST(NumericsCheck, AForwardOverflowDuringGradientAccumulationIsStillReported) {
  CheckNumerics check;
  amp::GradScaler scaler({.init_scale = 1024.0});
  const Tensor w = full({2}, 1.0).requires_grad_(true);
  scaler.scale(sum(mul(w, 2.0))).backward();  // micro-batch 1: its scaled loss is now in flight
  const NumericsError e = numerics_error_of([&] { exp(mul(w, 100.0)); });  // micro-batch 2's forward: exp(100) = inf
  EXPECT_EQ(e.op(), "exp");
  EXPECT_FALSE(e.backward());
  EXPECT_EQ(numerics::overflows_left_to_scaler(), 0);
}

}  // namespace
}  // namespace mixtape::testing
