// tests/optim/test_optim_vs_torch.cpp — optimizers, clip_grad_norm_ and LR schedules against
// PyTorch 1.13's numbers (tests/fixtures/optim_reference.json from tests/fixtures/gen_optim.py).
//
// ---- Tolerances, derived ----
// Optimizers (SGD, Adam, AdamW; f32, f64 and the FP32 masters of f16/bf16 parameters): 0 ulp,
// every element of every parameter after every step, and the final state. optim_functors.h performs
// the IEEE operations torch's CPU kernels perform, in the same order and with the same fused
// multiply-adds (measured there), on the same hyperparameter roundings; each operation is correctly
// rounded, so identical inputs give identical bits. The bias corrections are glibc pow/sqrt in
// double on both sides. Any difference at all is a formula or ordering bug.
// 16-bit model parameters: RNE of the bit-identical master, so bit-identical too.
// LR schedules: 0 ulp (doubles). StepLR and CosineAnnealingLR evaluate PyTorch's get_lr()
// expressions in Python's order; WarmupCosine with eta_min = 0 is the LambdaLR of HuggingFace's
// schedule operation for operation; cos is glibc's on both sides.
// clip_grad_norm_: mixtape sums |g|^p in f64 with one final root; torch computes per-tensor norms
// and a norm of norms in the grads' dtype. For f32 grads the two totals differ by at most the f32
// evaluation's error, <= ~K * eps32 relative for a K-term sum (K = 21 elements here), plus one
// rounding of each root/power: rtol = 4 * K * eps32 = 1.0e-5. The clipped grads are g * coef with
// coef = max_norm / (total + 1e-6): the same relative error plus one rounding each, so the same
// rtol applies per element. f64: rtol = 1e-12 (K roundings of 2^-53 with margin). Without clipping
// (coef clamped to 1) the grads must be unchanged: 0 ulp.
#include <cmath>
#include <limits>
#include <memory>

#include "optim/step_kernel.h"
#include "optim_test_util.h"

namespace mixtape::testing {
namespace {

using optim::Adam;
using optim::AdamW;
using optim::HyperParams;
using optim::Optimizer;
using optim::ParamGroup;
using optim::SGD;

TEST(OptimFixture, Loads) {
  ASSERT_TRUE(optim_fixture().error.empty()) << optim_fixture().error;
  EXPECT_EQ(optim_fixture().doc["optimizers"].size(), 32u);
  EXPECT_EQ(optim_fixture().doc["clip"].size(), 16u);
  EXPECT_EQ(optim_fixture().doc["schedulers"].size(), 3u);
}

struct Case {
  const json* j;
  std::string name() const { return (*j)["name"].get<std::string>(); }
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name(); }
std::vector<Case> cases_of(const char* section) {
  std::vector<Case> out;
  if (!optim_fixture().error.empty()) return out;
  for (const json& c : optim_fixture().doc[section]) out.push_back(Case{&c});
  return out;
}
std::string case_name(const ::testing::TestParamInfo<Case>& info) { return info.param.name(); }

double opt_value(const json& v) { return v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : v.get<double>(); }

HyperParams hyper_params_of(const json& options) {
  std::map<std::string, double> items;
  for (auto& [k, v] : options.items()) items[k] = opt_value(v);
  return HyperParams(std::move(items));
}

std::unique_ptr<Optimizer> make_optimizer(const json& c, const std::vector<Tensor>& params) {
  std::vector<ParamGroup> groups;
  for (const json& g : c["groups"]) {
    std::vector<Tensor> ps;
    for (auto& i : g["params"]) ps.push_back(params[i.get<size_t>()]);
    groups.emplace_back(ps, g.contains("options") ? hyper_params_of(g["options"]) : HyperParams());
  }
  const json& d = c["defaults"];
  auto num = [&](const char* k, double dflt) { return d.contains(k) ? opt_value(d[k]) : dflt; };
  const std::string opt = c["optimizer"];
  if (opt == "SGD")
    return std::make_unique<SGD>(groups, optim::SGDOptions{.lr = num("lr", std::nan("")),
                                                          .momentum = num("momentum", 0),
                                                          .dampening = num("dampening", 0),
                                                          .weight_decay = num("weight_decay", 0),
                                                          .nesterov = num("nesterov", 0) != 0});
  if (opt == "Adam")
    return std::make_unique<Adam>(groups, optim::AdamOptions{.lr = num("lr", 1e-3),
                                                            .betas = {num("beta1", 0.9), num("beta2", 0.999)},
                                                            .eps = num("eps", 1e-8),
                                                            .weight_decay = num("weight_decay", 0),
                                                            .amsgrad = num("amsgrad", 0) != 0});
  return std::make_unique<AdamW>(groups, optim::AdamWOptions{.lr = num("lr", 1e-3),
                                                            .betas = {num("beta1", 0.9), num("beta2", 0.999)},
                                                            .eps = num("eps", 1e-8),
                                                            .weight_decay = num("weight_decay", 1e-2),
                                                            .amsgrad = num("amsgrad", 0) != 0});
}

// ---- optimizers ----

class TorchOptimizer : public ::testing::TestWithParam<Case> {};

// Steps every parameter (and master) against the fixture's bits; returns how many steps matched
// completely (it stops at the first step that differs), so a case with no steps cannot pass.
size_t run_optimizer_case(const json& c);

TEST_P(TorchOptimizer, EveryStepBitExact) {
  const json& c = *GetParam().j;
  ASSERT_FALSE(c["steps"].empty()) << "fixture case without steps";
  EXPECT_EQ(run_optimizer_case(c), c["steps"].size());
}

// The loops run from an FMA-compiled function where the CPU has FMA, else through libm's fma:
// both must give torch's bits (fma is exactly rounded either way).
TEST_P(TorchOptimizer, PortableLoopGivesTheSameBits) {
  struct Portable {
    Portable() { optim::detail::set_force_portable_loop(true); }
    ~Portable() { optim::detail::set_force_portable_loop(false); }
  } portable;
  const json& c = *GetParam().j;
  ASSERT_FALSE(c["steps"].empty()) << "fixture case without steps";
  EXPECT_EQ(run_optimizer_case(c), c["steps"].size());
}

size_t run_optimizer_case(const json& c) {
  const bool master = c["dtype"] == "f16" || c["dtype"] == "bf16";
  std::vector<Tensor> params;
  for (const json& e : c["init"]) params.push_back(decode(e).requires_grad_(true));
  auto opt = make_optimizer(c, params);
  // The fixture's "grad_scale" is the loss scale S the 16-bit gradients were produced under (not
  // its inverse: gen_optim.py); the inverse is the GradScaler's, docs/AMP.md#the-inverse-scale.
  const double scale = c["grad_scale"].get<double>();
  const float inv_scale = static_cast<float>(1.0 / scale);
  for (size_t k = 0; k < c["steps"].size(); ++k) {
    const json& s = c["steps"][k];
    for (size_t i = 0; i < params.size(); ++i)
      params[i].set_grad(s["grads"][i].is_null() ? Tensor() : decode(s["grads"][i]));
    if (master && scale != 1.0) opt->set_inv_scale_for_next_step(inv_scale);
    opt->step();
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(same_bits(params[i], decode(s["params"][i]))) << "step " << k << ", parameter " << i;
      if (master) {
        EXPECT_TRUE(same_bits(opt->master(params[i]), decode(s["masters"][i])))
            << "master, step " << k << ", parameter " << i;
      }
    }
    if (::testing::Test::HasFailure()) return k;  // one diverged step makes every later one differ
  }
  // The state after the last step: buffers bit-exact, step counts equal.
  for (size_t i = 0; i < params.size(); ++i) {
    for (auto& [key, v] : c["state"][i].items()) {
      if (key == "step") {
        EXPECT_EQ(opt->step_count(params[i]), v.get<int64_t>()) << "parameter " << i;
      } else {
        Tensor mine = opt->state(params[i], key);
        EXPECT_TRUE(mine.defined()) << key << " of parameter " << i;
        if (mine.defined()) {
          EXPECT_TRUE(same_bits(mine, decode(v))) << key << " of parameter " << i;
        }
      }
    }
  }
  return c["steps"].size();
}
INSTANTIATE_TEST_SUITE_P(Fixture, TorchOptimizer, ::testing::ValuesIn(cases_of("optimizers")), case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TorchOptimizer);

// ---- clip_grad_norm_ ----

class TorchClip : public ::testing::TestWithParam<Case> {};

TEST_P(TorchClip, TotalNormAndClippedGrads) {
  const json& c = *GetParam().j;
  const bool f64 = c["dtype"] == "f64";
  const double rtol = f64 ? 1e-12 : 4.0 * 21 * std::ldexp(1.0, -23);
  std::vector<Tensor> params;
  int64_t k = 0;
  for (const json& g : c["grads"]) {
    Tensor gt = decode(g);
    Tensor p = zeros(gt.sizes(), TensorOptions(gt.dtype())).requires_grad_(true);
    p.set_grad(gt);
    params.push_back(p);
    k += gt.numel();
  }
  ASSERT_EQ(k, 21);
  const double norm_type =
      c["norm_type"].is_string() ? std::numeric_limits<double>::infinity() : c["norm_type"].get<double>();
  const double total = optim::clip_grad_norm_(params, c["max_norm"].get<double>(), norm_type);
  const double want = hex_to_double(c["total_norm"]);
  EXPECT_NEAR(total, want, rtol * want);
  const bool clipped = c["max_norm"].get<double>() < want;
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor expect = decode(c["clipped"][i]);
    if (!clipped) {
      EXPECT_TRUE(same_bits(params[i].grad(), expect)) << "grad " << i << " must be unchanged";
      continue;
    }
    auto got = params[i].grad().to_vector<double>();
    auto ref = expect.to_vector<double>();
    for (size_t e = 0; e < got.size(); ++e) EXPECT_NEAR(got[e], ref[e], rtol * std::fabs(ref[e])) << "grad " << i;
  }
}
INSTANTIATE_TEST_SUITE_P(Fixture, TorchClip, ::testing::ValuesIn(cases_of("clip")), case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TorchClip);

// ---- LR schedules ----

class TorchScheduler : public ::testing::TestWithParam<Case> {};

TEST_P(TorchScheduler, LrSequenceBitExact) {
  const json& c = *GetParam().j;
  Tensor p0 = zeros({1}).requires_grad_(true), p1 = zeros({1}).requires_grad_(true);
  SGD opt({ParamGroup({p0}), ParamGroup({p1}, {{"lr", 0.05}})}, {.lr = 0.1});
  const json& a = c["args"];
  std::unique_ptr<optim::LRScheduler> sched;
  const std::string name = c["name"];
  if (name == "StepLR")
    sched = std::make_unique<optim::StepLR>(opt, a["step_size"].get<int64_t>(), a["gamma"].get<double>());
  else if (name == "CosineAnnealingLR")
    sched = std::make_unique<optim::CosineAnnealingLR>(opt, a["T_max"].get<int64_t>(), a["eta_min"].get<double>());
  else
    sched = std::make_unique<optim::WarmupCosine>(opt, a["warmup_steps"].get<int64_t>(),
                                                  a["total_steps"].get<int64_t>(), a["eta_min"].get<double>());
  for (size_t k = 0; k < c["lrs"].size(); ++k) {
    if (k > 0) sched->step();
    const auto& lrs = sched->get_last_lr();
    ASSERT_EQ(lrs.size(), 2u);
    for (size_t g = 0; g < 2; ++g) {
      const double want = hex_to_double(c["lrs"][k][g]);
      EXPECT_EQ(lrs[g], want) << "epoch " << k << ", group " << g;
      EXPECT_EQ(opt.param_groups()[g].lr(), want) << "the optimizer's lr, epoch " << k << ", group " << g;
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Fixture, TorchScheduler, ::testing::ValuesIn(cases_of("schedulers")), case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TorchScheduler);

}  // namespace
}  // namespace mixtape::testing
