// tests/optim/test_master_weights.cpp — FP32 master weights for 16-bit parameters
// (small updates kept, the FP32 state), the GradScaler's unscale at the copy for 16-bit gradients,
// and stochastic rounding of the write-back. The paths off the demo's road (accumulation, writes
// to the model, clipping) are in tests/amp/test_master_weight_paths.cpp.
#include <cmath>
#include <memory>
#include <string>

#include "optim/optim_functors.h"
#include "optim_test_util.h"

namespace mixtape::testing {
namespace {

using optim::Adam;
using optim::AdamW;
using optim::ParamGroup;
using optim::SGD;

Tensor half_scalar_param(uint16_t bits) {
  Tensor t = Tensor::empty({1}, TensorOptions(DType::Float16));
  *t.data_ptr<Half>() = Half::from_bits(bits);
  t.requires_grad_(true);
  return t;
}
Tensor half_tensor(uint16_t bits) {
  Tensor t = Tensor::empty({1}, TensorOptions(DType::Float16));
  *t.data_ptr<Half>() = Half::from_bits(bits);
  return t;
}

// ---- Behaviour 32: master weights keep small updates ----
//
// "An fp16 weight 1.0 updated by -1e-4 per step". The gradient is an fp16 value, and 1e-4 is not
// one: the fp16 grad is RNE(1e-4) = 0x068E = 1.0001659393310547e-4 (11 significant bits), while
// the master-weight example (docs/amp-behaviours.md, Conversion facts) computes
// w = float(w - float(1e-4)) with float(1e-4) = 0x38D1B717 = 9.99999974737875e-5. Both give its
// numbers: with the master in [0.98, 1) the f32 grid is 2^-24 ~ 5.96e-8, and the two exact
// differences w - g differ by 1.66e-8 only, which never straddles a rounding midpoint in these
// 100 steps -- the test checks that at every step, not just the end.
// Without a master, 1 - 1.0001659e-4 lies within half an fp16 ulp below 1 (2^-12 ~ 2.44e-4) and
// rounds back to 1.0 every time.
constexpr uint16_t kHalf1e4 = 0x068E;

TEST(Behaviour32, GradOf1e4InFp16IsNot1e4) {
  EXPECT_EQ(Half(1e-4f).bits, kHalf1e4);
  EXPECT_EQ(static_cast<double>(static_cast<float>(Half::from_bits(kHalf1e4))), 1.0001659393310547e-4);
  float f = 1e-4f;
  uint32_t b;
  std::memcpy(&b, &f, 4);
  EXPECT_EQ(b, 0x38D1B717u);
  EXPECT_NE(static_cast<float>(Half::from_bits(kHalf1e4)), 1e-4f);
}

TEST(Behaviour32, WithoutMasterFp16WeightStaysOne) {
  // The plain FP16 path: w = w - g in fp16 (computed in float, rounded once per step).
  Tensor w = half_tensor(0x3C00);
  Tensor g = half_tensor(kHalf1e4);
  for (int i = 0; i < 100; ++i) w = sub(w, g);
  EXPECT_EQ(half_bits(w), 0x3C00);
  // The same SGD arithmetic the optimizer uses, applied to the 16-bit value itself (no master).
  const auto sgd = optim::fn::SGDUpdate<float>::make(/*lr=*/1.0, 0, 0, 0, false, false);
  Half w16 = Half::from_bits(0x3C00);
  for (int i = 0; i < 100; ++i) {
    float wf = static_cast<float>(w16), unused = 0;
    sgd(wf, static_cast<float>(Half::from_bits(kHalf1e4)), unused);
    w16 = Half(wf);
  }
  EXPECT_EQ(w16.bits, 0x3C00);
}

TEST(Behaviour32, WithMasterHundredStepsGive0x3F7D7088And0x3BEC) {
  Tensor p = half_scalar_param(0x3C00);
  SGD opt({p}, {.lr = 1.0});
  ASSERT_TRUE(opt.has_master(p));
  float ref_7_4 = 1.0f;         // the master-weight example: w = float(w - float(1e-4))
  float ref_fp16_grad = 1.0f;   // w = float(w - float(fp16(1e-4)))
  const float g16 = static_cast<float>(Half::from_bits(kHalf1e4));
  for (int i = 0; i < 100; ++i) {
    p.set_grad(half_tensor(kHalf1e4));
    opt.step();
    ref_7_4 = ref_7_4 - 1e-4f;
    ref_fp16_grad = ref_fp16_grad - g16;
    const float m = opt.master(p).item<float>();
    ASSERT_EQ(m, ref_fp16_grad) << "step " << i + 1;
    ASSERT_EQ(m, ref_7_4) << "step " << i + 1 << ": the fp16 grad and float(1e-4) round differently here";
    ASSERT_EQ(half_bits(p), Half(m).bits) << "model != RNE(master) at step " << i + 1;
  }
  EXPECT_EQ(float_bits(opt.master(p)), 0x3F7D7088u);
  EXPECT_FLOAT_EQ(opt.master(p).item<float>(), 0.98999834f);
  EXPECT_EQ(half_bits(p), 0x3BEC);
  EXPECT_EQ(p.item<double>(), 0.990234375);
}

TEST(Behaviour32, SameNumbersThroughTheLossScaleAtTheCopy) {
  // Under a GradScaler with S = 65536 the fp16 grad holds RNE(1e-4 * S) = 0x468E; the unscale at the
  // copy multiplies by float(1 / S) = 2^-16 exactly, giving the same 0x068E value as above.
  EXPECT_EQ(Half(1e-4f * 65536.0f).bits, 0x468E);
  Tensor p = half_scalar_param(0x3C00);
  SGD opt({p}, {.lr = 1.0});
  for (int i = 0; i < 100; ++i) {
    p.set_grad(half_tensor(0x468E));
    opt.set_inv_scale_for_next_step(static_cast<float>(1.0 / 65536.0));
    opt.step();
  }
  EXPECT_EQ(float_bits(opt.master(p)), 0x3F7D7088u);
  EXPECT_EQ(half_bits(p), 0x3BEC);
}

// ---- Behaviour 33: model == RNE(master) after every step; FP32 params updated directly ----

struct Net {
  Tensor w16, b16, bn32;  // a 16-bit layer and an FP32 (BatchNorm-style) parameter
};
Net make_net(DType dt, uint64_t seed) {
  Generator gen(seed);
  Net n;
  n.w16 = randn({8, 5}, TensorOptions(DType::Float32), &gen).to(dt).requires_grad_(true);
  n.b16 = randn({5}, TensorOptions(DType::Float32), &gen).to(dt).requires_grad_(true);
  n.bn32 = randn({5}, TensorOptions(DType::Float32), &gen).requires_grad_(true);
  return n;
}
// Scaled 16-bit grads for the 16-bit params, true f32 grads for the f32 one (as the scaler leaves them).
void set_grads(Net& n, Generator& gen, double scale) {
  for (Tensor* p : {&n.w16, &n.b16}) p->set_grad(mul(randn(p->sizes(), {}, &gen), scale * 0.1).to(p->dtype()));
  n.bn32.set_grad(mul(randn({5}, {}, &gen), 0.1));
}
void expect_model_is_rne_of_master(const optim::Optimizer& opt, const Tensor& p) {
  Tensor m = opt.master(p);
  ASSERT_EQ(m.dtype(), DType::Float32);
  auto mv = m.to_vector<float>();
  for (size_t i = 0; i < mv.size(); ++i) {
    const uint16_t rne =
        p.dtype() == DType::Float16 ? Half(mv[i]).bits : BFloat16(mv[i]).bits;
    ASSERT_EQ(half_bits(p, static_cast<int64_t>(i)), rne) << "element " << i;
  }
}

class Behaviour33 : public ::testing::TestWithParam<DType> {};

TEST_P(Behaviour33, ModelIsRneOfMasterAfterEveryStep) {
  const DType dt = GetParam();
  for (int which = 0; which < 2; ++which) {
    Net n = make_net(dt, 11);
    std::unique_ptr<optim::Optimizer> opt;
    if (which == 0)
      opt = std::make_unique<SGD>(std::vector<Tensor>{n.w16, n.b16, n.bn32},
                                  optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4});
    else
      opt = std::make_unique<Adam>(std::vector<Tensor>{n.w16, n.b16, n.bn32}, optim::AdamOptions{.lr = 1e-2});
    EXPECT_TRUE(opt->has_master(n.w16));
    EXPECT_FALSE(opt->has_master(n.bn32));
    EXPECT_TRUE(opt->master(n.bn32).is_same(n.bn32)) << "an FP32 parameter is its own master";
    Generator gen(5);
    const double S = dt == DType::Float16 ? 1024.0 : 1.0;
    for (int step = 0; step < 20; ++step) {
      set_grads(n, gen, S);
      Tensor bn_before = n.bn32.detach().clone();
      opt->set_inv_scale_for_next_step(static_cast<float>(1.0 / S));
      opt->step();
      expect_model_is_rne_of_master(*opt, n.w16);
      expect_model_is_rne_of_master(*opt, n.b16);
      EXPECT_FALSE(same_bits(n.bn32, bn_before)) << "the FP32 parameter is updated in place";
      if (HasFatalFailure()) return;
    }
    for (const Tensor& p : {n.w16, n.b16}) {
      for (const char* s : {"momentum_buffer", "exp_avg", "exp_avg_sq"}) {
        Tensor b = opt->state(p, s);
        if (b.defined()) {
          EXPECT_EQ(b.dtype(), DType::Float32) << s << " of a 16-bit parameter is FP32";
        }
      }
    }
    Tensor bn_state = opt->state(n.bn32, which == 0 ? "momentum_buffer" : "exp_avg");
    ASSERT_TRUE(bn_state.defined());
    EXPECT_EQ(bn_state.dtype(), DType::Float32);
  }
}

// Masters, state and the rounding stream survive save/load: a resumed run is bit-identical.
TEST_P(Behaviour33, SaveLoadResumesBitIdentically) {
  const DType dt = GetParam();
  for (int which = 0; which < 3; ++which) {
    auto make = [&](Net& n) -> std::unique_ptr<optim::Optimizer> {
      std::vector<Tensor> ps{n.w16, n.b16, n.bn32};
      if (which == 0) return std::make_unique<SGD>(ps, optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true});
      if (which == 1) return std::make_unique<AdamW>(ps, optim::AdamWOptions{.lr = 1e-2, .amsgrad = true});
      auto o = std::make_unique<Adam>(ps, optim::AdamOptions{.lr = 1e-2});
      o->set_stochastic_rounding(true, 1234);
      return o;
    };
    Net a = make_net(dt, 21);
    auto opt_a = make(a);
    Generator gen_a(9);
    for (int s = 0; s < 5; ++s) {
      set_grads(a, gen_a, 1.0);
      opt_a->step();
    }
    StateDict saved = opt_a->state_dict();
    Net b{a.w16.detach().clone().requires_grad_(true), a.b16.detach().clone().requires_grad_(true),
          a.bn32.detach().clone().requires_grad_(true)};
    Generator gen_b(9);
    gen_b.set_state(gen_a.seed(), gen_a.offset());
    for (int s = 0; s < 5; ++s) {
      set_grads(a, gen_a, 1.0);
      opt_a->step();
    }
    auto opt_b = make(b);  // fresh masters from b's params (== RNE(saved masters)), then the load
    opt_b->load_state_dict(saved);
    EXPECT_TRUE(same_bits(opt_b->master(b.w16), saved.at("state.0.master")));
    for (int s = 0; s < 5; ++s) {
      set_grads(b, gen_b, 1.0);
      opt_b->step();
    }
    for (auto& [pa, pb] : std::vector<std::pair<Tensor, Tensor>>{{a.w16, b.w16}, {a.b16, b.b16}, {a.bn32, b.bn32}}) {
      EXPECT_TRUE(same_bits(pa, pb)) << "optimizer " << which;
      EXPECT_TRUE(same_bits(opt_a->master(pa), opt_b->master(pb))) << "optimizer " << which;
    }
    StateDict da = opt_a->state_dict(), db = opt_b->state_dict();
    ASSERT_EQ(da.size(), db.size());
    for (auto& [k, t] : da) {
      ASSERT_TRUE(db.count(k)) << k;
      EXPECT_TRUE(same_bits(t, db.at(k))) << k << ", optimizer " << which;
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Dtypes, Behaviour33, ::testing::Values(DType::Float16, DType::BFloat16),
                         [](const ::testing::TestParamInfo<DType>& i) {
                           return i.param == DType::Float16 ? std::string("f16") : std::string("bf16");
                         });

// ---- the GradScaler's unscale at the copy ----

TEST(UnscaleAtCopy, EqualsPyTorchInPlaceUnscaleOfAnF32Grad) {
  // Master 0, SGD lr = 1, no momentum: master = fma(-1, g, 0) = -g exactly, so the master shows the
  // f32 gradient step() computed from the 16-bit one.
  Generator gen(3);
  const double S = 3000.0;  // not a power of two: the multiply really rounds
  const float inv = static_cast<float>(1.0 / S);
  Tensor g16 = mul(randn({257}, {}, &gen), 0.1 * S).to(DType::Float16);
  *static_cast<Half*>(g16.data_ptr()) = Half::from_bits(0x0003);  // a subnormal grad value
  Tensor p = zeros({257}, TensorOptions(DType::Float16)).requires_grad_(true);
  Tensor p32 = zeros({3}).requires_grad_(true);  // an FP32 parameter: its grad is not rescaled
  SGD opt({p, p32}, {.lr = 1.0});
  p.set_grad(g16);
  p32.set_grad(ones({3}));
  opt.set_inv_scale_for_next_step(inv);
  EXPECT_EQ(opt.inv_scale_for_next_step(), inv);
  opt.step();
  // PyTorch: grad32 = g16.float(); grad32.mul_(inv_scale) (the in-place unscale of an f32 .grad).
  Tensor expect = g16.to(DType::Float32);
  mul_(expect, Scalar(inv));
  EXPECT_TRUE(same_bits(neg(opt.master(p)), expect));
  EXPECT_TRUE(same_bits(p32, full({3}, -1.0))) << "f32/f64 grads are the scaler's to unscale in place";
  EXPECT_EQ(opt.inv_scale_for_next_step(), 1.0f) << "consumed by step()";
  opt.set_inv_scale_for_next_step(0.5f);
  opt.zero_grad();
  EXPECT_EQ(opt.inv_scale_for_next_step(), 1.0f) << "cleared by zero_grad()";
  expect_error([&] { opt.set_inv_scale_for_next_step(INFINITY); }, {"set_inv_scale_for_next_step", "finite"});
}

TEST(UnscaleAtCopy, Fp32GradOnA16BitParamIsUsedAsIs) {
  Tensor p = zeros({4}, TensorOptions(DType::BFloat16)).requires_grad_(true);
  SGD opt({p}, {.lr = 1.0});
  p.set_grad(full({4}, 1e-3));  // f32 grad (e.g. accumulated in FP32)
  opt.set_inv_scale_for_next_step(0.5f);
  opt.step();
  EXPECT_EQ(opt.master(p).to_vector<float>(), std::vector<float>(4, -1e-3f));
  // A third dtype: set_grad refuses it (the optimizer gave p grad_dtype Float32), and a grad that
  // bypassed that check is refused by step().
  expect_error([&] { p.set_grad(zeros({4}, TensorOptions(DType::Float64))); }, {"set_grad", "Float64"});
  p.set_grad_dtype(std::nullopt);
  p.set_grad(zeros({4}, TensorOptions(DType::Float64)));
  expect_error([&] { opt.step(); }, {"SGD", "grad of parameter 0", "Float64", "expected BFloat16 (or Float32)"});
}

// ---- stochastic rounding ----

TEST(StochasticRounding, FunctorPicksNeighboursWithTheRightProbability) {
  using optim::fn::round_stochastic;
  const float x = 1.0f + std::ldexp(1.0f, -12);  // a quarter of an fp16 ulp above 1
  EXPECT_EQ(round_stochastic<Half>(x, 0.0f).bits, 0x3C01);
  EXPECT_EQ(round_stochastic<Half>(x, 0.2499f).bits, 0x3C01);
  EXPECT_EQ(round_stochastic<Half>(x, 0.25f).bits, 0x3C00);
  EXPECT_EQ(round_stochastic<Half>(-x, 0.1f).bits, 0xBC01);
  EXPECT_EQ(round_stochastic<Half>(-x, 0.9f).bits, 0xBC00);
  const float y = 1.0f - std::ldexp(1.0f, -12);  // midway between 0x3BFF (1 - 2^-11) and 0x3C00
  EXPECT_EQ(round_stochastic<Half>(y, 0.49f).bits, 0x3C00);
  EXPECT_EQ(round_stochastic<Half>(y, 0.51f).bits, 0x3BFF);
  EXPECT_EQ(round_stochastic<Half>(1.5f, 0.0f).bits, 0x3E00) << "exact values are kept";
  EXPECT_EQ(round_stochastic<Half>(INFINITY, 0.5f).bits, 0x7C00);
  EXPECT_TRUE(isnan(round_stochastic<Half>(NAN, 0.5f)));
  EXPECT_EQ(round_stochastic<Half>(65504.0f + 16.0f, 0.4f).bits, 0x7C00) << "beyond max: inf with p = 1/2";
  EXPECT_EQ(round_stochastic<Half>(65504.0f + 16.0f, 0.6f).bits, 0x7BFF);
  EXPECT_EQ(round_stochastic<Half>(1e6f, 0.99f).bits, 0x7C00);
  EXPECT_EQ(round_stochastic<Half>(std::ldexp(1.0f, -26), 0.2f).bits, 0x0001) << "below the smallest subnormal";
  EXPECT_EQ(round_stochastic<Half>(std::ldexp(1.0f, -26), 0.3f).bits, 0x0000);
  EXPECT_EQ(round_stochastic<BFloat16>(1.0f + std::ldexp(1.0f, -9), 0.2f).bits, 0x3F81);
  EXPECT_EQ(round_stochastic<BFloat16>(1.0f + std::ldexp(1.0f, -9), 0.3f).bits, 0x3F80);
}

TEST(StochasticRounding, OptimizerWriteBackIsUnbiasedSeededAndOffByDefault) {
  constexpr int64_t n = 4096;
  auto run = [&](bool sr, uint64_t seed) {
    Tensor p = ones({n}, TensorOptions(DType::Float16)).requires_grad_(true);
    SGD opt({p}, {.lr = 1.0});
    if (sr) opt.set_stochastic_rounding(true, seed);
    p.set_grad(full({n}, -std::ldexp(1.0, -12)));  // master = 1 + 2^-12 exactly
    opt.step();
    EXPECT_EQ(opt.master(p).to_vector<float>(), std::vector<float>(n, 1.0f + std::ldexp(1.0f, -12)));
    return p;
  };
  Tensor rne = run(false, 0);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(half_bits(rne, i), 0x3C00);
  Tensor a = run(true, 42), b = run(true, 42), c = run(true, 43);
  int64_t up = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t v = half_bits(a, i);
    ASSERT_TRUE(v == 0x3C00 || v == 0x3C01);
    up += v == 0x3C01;
  }
  // Binomial(4096, 1/4): mean 1024, sigma 27.7; 5 sigma either side.
  EXPECT_NEAR(static_cast<double>(up), 1024.0, 139.0);
  EXPECT_TRUE(same_bits(a, b)) << "same seed, same bits";
  EXPECT_FALSE(same_bits(a, c)) << "another seed, another draw";
}

// ---- optimizer state between a 16-bit model and an FP32 one (PyTorch casts state on load) ----

// An Adam over a [8] parameter of dtype dt after three steps, with its parameter.
struct Trained {
  Tensor w;
  std::unique_ptr<Adam> opt;
};
Trained trained_adam(DType dt) {
  Generator gen(21);
  Trained t{mul(randn({8}, {}, &gen), 0.5).to(dt).requires_grad_(true), nullptr};
  t.opt = std::make_unique<Adam>(std::vector<Tensor>{t.w}, optim::AdamOptions{.lr = 1e-3});
  for (int i = 0; i < 3; ++i) {
    t.w.set_grad(randn({8}, {}, &gen));
    t.opt->step();
  }
  return t;
}
const Tensor& next_grad() {
  static const Tensor g = [] {
    Generator gen(22);
    return randn({8}, {}, &gen);
  }();
  return g;
}

TEST(MasterStateDict, SixteenBitStateLoadsIntoAnFp32ModelWhoseWeightsTakeTheMasters) {
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    for (bool model_first : {true, false}) {
      Trained src = trained_adam(dt);
      const StateDict sd = src.opt->state_dict();
      const Tensor master = sd.at("state.0.master");
      ASSERT_FALSE(same_bits(master, to_dtype(src.w, DType::Float32))) << "the master is finer than the model";
      Tensor w32 = zeros({8}).requires_grad_(true);
      Adam opt32({w32}, {.lr = 1e-3});
      auto load_model = [&] {  // the model's 16-bit state dict, loaded into the FP32 model
        autograd::NoGradGuard no_grad;
        copy_(w32, src.w);
      };
      if (model_first) load_model();
      opt32.load_state_dict(sd);
      if (!model_first) load_model();
      const std::string how = std::string(dtype_name(dt)) + (model_first ? ", model first" : ", optimizer first");
      EXPECT_TRUE(same_bits(opt32.master(w32), master)) << how << ": the FP32 weights are the masters";
      EXPECT_TRUE(same_bits(w32, master)) << how;
      // The FP32 run continues exactly as the 16-bit run's masters do.
      src.w.set_grad(next_grad());
      w32.set_grad(next_grad().clone());
      src.opt->step();
      opt32.step();
      EXPECT_TRUE(same_bits(w32, src.opt->master(src.w))) << how;
      EXPECT_TRUE(same_bits(opt32.state(w32, "exp_avg_sq"), src.opt->state(src.w, "exp_avg_sq"))) << how;
      EXPECT_EQ(opt32.step_count(w32), 4);
    }
  }
  // Other weights in the FP32 model (not a 16-bit rounding of the masters) win.
  Trained src = trained_adam(DType::Float16);
  Tensor w32 = full({8}, 0.125).requires_grad_(true);
  Adam opt32({w32}, {.lr = 1e-3});
  opt32.load_state_dict(src.opt->state_dict());
  EXPECT_EQ(opt32.master(w32).to_vector<float>(), std::vector<float>(8, 0.125f));
}

// A state_dict() taken between loading the optimizer and loading the model (a save at step 0)
// neither adopts the loaded masters against the weights the model holds then nor drops them: it
// saves them as loaded, and the model loaded afterwards still takes them.
TEST(MasterStateDict, AStateDictBeforeTheModelLoadKeepsThePendingMasters) {
  Trained src = trained_adam(DType::BFloat16);
  const StateDict sd = src.opt->state_dict();
  Tensor w32 = zeros({8}).requires_grad_(true);
  Adam opt32({w32}, {.lr = 1e-3});
  opt32.load_state_dict(sd);
  const StateDict between = opt32.state_dict();
  ASSERT_TRUE(between.count("state.0.master"));
  EXPECT_TRUE(same_bits(between.at("state.0.master"), sd.at("state.0.master"))) << "saved as loaded";
  {
    autograd::NoGradGuard no_grad;
    copy_(w32, src.w);
  }
  EXPECT_TRUE(same_bits(opt32.master(w32), sd.at("state.0.master"))) << "the later model load still takes them";
}

TEST(MasterStateDict, Fp32StateLoadsIntoASixteenBitModelWithMastersSeededFromIt) {
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    for (bool model_first : {true, false}) {
      Trained src = trained_adam(DType::Float32);
      const StateDict sd = src.opt->state_dict();
      Tensor w16 = zeros({8}, TensorOptions(dt)).requires_grad_(true);
      Adam opt16({w16}, {.lr = 1e-3});
      auto load_model = [&] {  // the FP32 model's state dict, rounded into the 16-bit model
        autograd::NoGradGuard no_grad;
        copy_(w16, src.w);
      };
      if (model_first) load_model();
      opt16.load_state_dict(sd);
      if (!model_first) load_model();
      const std::string how = std::string(dtype_name(dt)) + (model_first ? ", model first" : ", optimizer first");
      const Tensor widened = to_dtype(w16, DType::Float32).detach();
      EXPECT_TRUE(same_bits(opt16.master(w16), widened)) << how << ": the master is the 16-bit weight, widened";
      EXPECT_TRUE(same_bits(opt16.state(w16, "exp_avg"), sd.at("state.0.exp_avg"))) << how;
      EXPECT_EQ(opt16.step_count(w16), 3);
      // It continues as an FP32 run from the 16-bit weights would.
      Tensor ref = widened.clone().detach().requires_grad_(true);
      Adam opt_ref({ref}, {.lr = 1e-3});
      opt_ref.load_state_dict(sd);
      w16.set_grad(next_grad());
      ref.set_grad(next_grad().clone());
      opt16.step();
      opt_ref.step();
      EXPECT_TRUE(same_bits(opt16.master(w16), ref)) << how;
    }
  }
}

}  // namespace
}  // namespace mixtape::testing
