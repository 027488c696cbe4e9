// tests/amp/test_grad_scaler_additions.cpp — what mixtape's GradScaler adds to PyTorch's
// (docs/AMP.md, "mixtape's additions"): (b) the unscaled product is checked when S < 1, (c) an
// explained error below min_scale, (d) the scale history; bf16 runs accepted; found_inf(), the last
// verdict as a device tensor. Addition (a), step() reporting a skip, is behaviour 30
// (test_grad_scaler.cpp).
#include <cmath>
#include <limits>
#include <stdexcept>

#include "scaler_test_util.h"

namespace mixtape::testing {
namespace {

using amp::GradScaler;
using optim::SGD;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Tensor f32(std::vector<double> v) { return tensor(v, {static_cast<int64_t>(v.size())}, TensorOptions(DType::Float32)); }
// Scales loss = sum(p * c) and backpropagates, so p.grad = S * c.
void scaled_backward(GradScaler& scaler, const Tensor& p, const Tensor& c) { scaler.scale(sum(mul(p, c))).backward(); }

// ---- mixtape's additions ----

// (b) pytorch#99640: with S < 1 a finite scaled gradient can overflow when unscaled.
TEST(GradScaler, AdditionB_ScaleBelowOneChecksTheUnscaledProduct) {
  GradScaler scaler;
  Tensor p = make_param({1.0}, {1});
  SGD opt({p}, {.lr = 1e-3});
  scaler.scale(f32({1.0}));
  scaler.update(std::ldexp(1.0, -10));  // S = 2^-10, inv = 1024
  p.set_grad(f32({1e36}));             // finite; 1e36 * 1024 = 1.02e39 is inf in float32
  const Tensor before = snapshot(p);
  EXPECT_FALSE(scaler.step(opt)) << "PyTorch would step with an inf gradient here";
  EXPECT_TRUE(same_bytes(p, before));
  scaler.update();
  // The same path for 16-bit grads only checked for a master-weight step (grad_dtype set to 16
  // bits: the optimizer would form the product), and for a 16-bit parameter's default FP32 grads
  // through explicit unscale_.
  Tensor p16 = make_param({1.0}, {1}, DType::Float16);
  p16.set_grad_dtype(DType::Float16);
  SGD opt16({p16}, {.lr = 1e-3});
  scaler.update(std::ldexp(1.0, -120));  // inv = 2^120: 60000 * 2^120 overflows float32
  p16.set_grad(tensor({60000.0}, TensorOptions(DType::Float16)));
  EXPECT_FALSE(scaler.step(opt16));
  scaler.update(std::ldexp(1.0, -120));
  Tensor q16 = make_param({1.0}, {1}, DType::Float16);
  SGD optq({q16}, {.lr = 1e-3});
  q16.set_grad(f32({60000.0}));
  scaler.unscale_(optq);
  EXPECT_FALSE(scaler.step(optq));
  EXPECT_EQ(q16.item<float>(), 1.0f);
  EXPECT_EQ(p16.item<float>(), 1.0f);
  scaler.update(std::ldexp(1.0, -120));
  // Control: a grad whose product stays finite steps.
  p16.set_grad(tensor({0.0}, TensorOptions(DType::Float16)));
  EXPECT_TRUE(scaler.step(opt16));
}

// (c) min_scale: collapsing below it is an explained error (NVIDIA/apex#715).
TEST(GradScaler, AdditionC_MinScaleExplainsForwardPassNonFinite) {
  GradScaler scaler({.init_scale = 8.0, .min_scale = 1.0});
  Tensor p = make_param({1.0}, {1});
  SGD opt({p}, {.lr = 0.1});
  auto nan_iteration = [&] {
    opt.zero_grad();
    scaled_backward(scaler, p, f32({kNaN}));  // a NaN "loss": every gradient is NaN at any scale
    scaler.step(opt);
    scaler.update();
  };
  nan_iteration();  // 4
  nan_iteration();  // 2
  nan_iteration();  // 1: not below
  EXPECT_EQ(scaler.get_scale(), 1.0);
  expect_error(nan_iteration, {"below min_scale", "forward pass", "loss", "apex#715", "4 consecutive skipped"});
  EXPECT_EQ(scaler.get_scale(), 0.5) << "the update was applied before the error";
  // Without min_scale (PyTorch) the scale keeps halving silently.
  GradScaler plain({.init_scale = 8.0});
  for (int i = 0; i < 10; ++i) {
    opt.zero_grad();
    scaled_backward(plain, p, f32({kNaN}));
    plain.step(opt);
    plain.update();
  }
  EXPECT_EQ(plain.get_scale(), 8.0 / 1024.0);
  // Clean iterations never trip it, even at the minimum.
  GradScaler ok({.init_scale = 1.0, .min_scale = 1.0});
  opt.zero_grad();
  scaled_backward(ok, p, f32({1.0}));
  EXPECT_TRUE(ok.step(opt));
  ok.update();
}

// (d) the scale history for plots.
TEST(GradScaler, AdditionD_ScaleHistory) {
  GradScaler scaler({.growth_interval = 2});
  Tensor p = make_param({1.0}, {1});
  SGD opt({p}, {.lr = 0.0});
  for (float g : {1.0f, kInf, 1.0f, 1.0f, 1.0f}) {
    opt.zero_grad();
    scaled_backward(scaler, p, f32({g}));
    scaler.step(opt);
    scaler.update();
  }
  const auto& h = scaler.scale_history();
  ASSERT_EQ(h.size(), 5u);
  const double want_scale[] = {65536, 65536, 32768, 32768, 65536};
  const bool want_skip[] = {false, true, false, false, false};
  for (size_t i = 0; i < h.size(); ++i) {
    EXPECT_EQ(h[i].iteration, static_cast<int64_t>(i));
    EXPECT_EQ(h[i].scale, want_scale[i]) << i;
    EXPECT_EQ(h[i].skipped, want_skip[i]) << i;
  }
  EXPECT_EQ(scaler.skipped_steps(), 1);
  EXPECT_EQ(scaler.get_scale(), 65536.0);
}

// bf16 needs no scaling but is accepted: masters, checks and skips work the same way.
TEST(GradScaler, Bf16IsAcceptedThroughMasters) {
  GradScaler scaler;
  Tensor p = make_param({1.0, -1.0}, {2}, DType::BFloat16);
  SGD opt({p}, {.lr = 0.5});
  scaled_backward(scaler, p, f32({1e-30, 2.0}));  // 1e-30 is representable in bf16, not in fp16
  // The backward's bf16 gradient, widened into the FP32 .grad the optimizer asked for.
  EXPECT_EQ(p.grad().dtype(), DType::Float32);
  EXPECT_TRUE(scaler.step(opt));
  // grad = RNE_bf16(S * c) * inv; master = 1 - 0.5 * that.
  const float g0 = static_cast<float>(BFloat16(65536.0f * 1e-30f)) * (1.0f / 65536.0f);
  EXPECT_EQ(opt.master(p).to_vector<float>()[0], 1.0f - 0.5f * g0);
  EXPECT_EQ(opt.master(p).to_vector<float>()[1], -2.0f);
  scaler.update();
  opt.zero_grad();
  scaled_backward(scaler, p, f32({kInf, 1.0}));
  EXPECT_FALSE(scaler.step(opt));
}

// MIXTAPE_TRACE=amp narrates the scaler's decisions (for examples/amp_tour and debugging).
TEST(GradScaler, TraceNarratesStepsAndUpdates) {
  GradScaler scaler({.growth_interval = 3});
  Tensor p = make_param({1.0}, {1});
  SGD opt({p}, {.lr = 0.0});
  std::string trace;
  {
    ScopedTrace t(static_cast<uint32_t>(TraceKind::Amp), &trace);
    scaled_backward(scaler, p, f32({kInf}));
    scaler.step(opt);
    scaler.update();
    opt.zero_grad();
    scaled_backward(scaler, p, f32({1.0}));
    scaler.step(opt);
    scaler.update();
  }
  EXPECT_NE(trace.find("[amp] GradScaler.step(SGD): scale 65536, inf/NaN in the gradients -> step skipped"),
            std::string::npos) << trace;
  EXPECT_NE(trace.find("[amp] GradScaler.update: scale 65536 -> 32768 (growth tracker 0/3, iteration skipped)"),
            std::string::npos) << trace;
  EXPECT_NE(trace.find("[amp] GradScaler.step(SGD): scale 32768, all gradients finite -> step"), std::string::npos)
      << trace;
  EXPECT_NE(trace.find("[amp] GradScaler.update: scale 32768 -> 32768 (growth tracker 1/3)"), std::string::npos)
      << trace;
}

// found_inf(): the verdict of the last step()/unscale_(), kept past update(), of the optimizer
// that call was given; undefined where there is none (disabled, before the first step, a reduction
// still pending). Values are read back here on the CPU (a GPU read would be a sync).
TEST(GradScaler, FoundInfIsTheLastStepsVerdict) {
  Tensor p = make_param({1.0, 2.0}, {2});
  Tensor q = make_param({3.0}, {1});
  SGD opt_p({p}, {.lr = 0.5}), opt_q({q}, {.lr = 0.5});
  {
    GradScaler off({.enabled = false});
    off.scale(sum(p)).backward();
    off.step(opt_p);
    off.update();
    EXPECT_FALSE(off.found_inf().defined()) << "a disabled scaler checks nothing";
    opt_p.zero_grad();
  }
  GradScaler scaler({.init_scale = 4.0});
  EXPECT_FALSE(scaler.found_inf().defined()) << "before the first step";
  scaled_backward(scaler, p, f32({1.0, 1.0}));
  EXPECT_TRUE(scaler.step(opt_p));
  ASSERT_TRUE(scaler.found_inf().defined());
  EXPECT_EQ(scaler.found_inf().dtype(), DType::Float32);
  EXPECT_EQ(scaler.found_inf().dim(), 0);
  EXPECT_EQ(scaler.found_inf().item<float>(), 0.0f);
  scaler.update();
  const Tensor clean = scaler.found_inf();
  ASSERT_TRUE(clean.defined()) << "kept past update()";
  EXPECT_EQ(clean.item<float>(), 0.0f);

  // An inf: the new step's flag is set, the old tensor is left as it was.
  opt_p.zero_grad();
  scaled_backward(scaler, p, f32({kInf, 1.0}));
  EXPECT_FALSE(scaler.step(opt_p));
  EXPECT_GT(scaler.found_inf().item<float>(), 0.0f);
  EXPECT_EQ(clean.item<float>(), 0.0f) << "each step makes a new flag";
  scaler.update();
  EXPECT_GT(scaler.found_inf().item<float>(), 0.0f) << "kept past update()";

  // Two optimizers: step(p) after unscale_(q) reports p's verdict, not q's.
  opt_p.zero_grad();
  opt_q.zero_grad();
  scaler.scale(sum(mul(p, f32({1.0, 1.0}))) + sum(mul(q, f32({kNaN})))).backward();
  scaler.unscale_(opt_p);
  EXPECT_EQ(scaler.found_inf().item<float>(), 0.0f);
  scaler.unscale_(opt_q);
  EXPECT_TRUE(std::isnan(scaler.found_inf().item<float>()) || scaler.found_inf().item<float>() > 0.0f);
  EXPECT_TRUE(scaler.step(opt_p));
  EXPECT_EQ(scaler.found_inf().item<float>(), 0.0f) << "step(opt_p) acts on opt_p's flag";
  EXPECT_FALSE(scaler.step(opt_q));
  EXPECT_NE(scaler.found_inf().item<float>(), 0.0f);
  scaler.update();

  // A reducer: its verdict; while it fails, no verdict.
  bool fail = true;
  scaler.set_found_inf_reducer([&](const Tensor& f) {
    if (fail) throw std::runtime_error("timed out");
    const_cast<Tensor&>(f).fill_(1.0);  // another process saw an inf
  });
  opt_p.zero_grad();
  scaled_backward(scaler, p, f32({1.0, 1.0}));
  EXPECT_THROW(scaler.unscale_(opt_p), std::runtime_error);
  EXPECT_FALSE(scaler.found_inf().defined()) << "the reduction is pending: no verdict yet";
  fail = false;
  EXPECT_FALSE(scaler.step(opt_p));
  EXPECT_EQ(scaler.found_inf().item<float>(), 1.0f) << "the reducer's verdict, not the local one";
  scaler.update();
}

}  // namespace
}  // namespace mixtape::testing
