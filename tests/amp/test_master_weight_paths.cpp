// tests/amp/test_master_weight_paths.cpp — AMP one step off the demo's road: a 16-bit model with
// FP32 masters under gradient accumulation, writes to the model, checkpoint loading in either
// order, unscale_ + clip_grad_norm_, 16-bit gradients the user opted into, and the scaler's
// growth tracker after a lowered interval (docs/AMP.md, "Master weights"). Every test here failed
// on the tree before FP32 gradient accumulation and master re-seeding were added.
#include <cmath>

#include "optim/clip_grad.h"
#include "optim/sgd.h"
#include "scaler_test_util.h"

namespace mixtape::testing {
namespace {

using amp::GradScaler;
using optim::ParamGroup;
using optim::SGD;

constexpr DType k16[] = {DType::Float16, DType::BFloat16};

// loss = sum(w * c) in f32 (as under autocast): backward hands the 16-bit w the gradient c
// (times S) rounded into its dtype, which AccumulateGrad then widens into the FP32 .grad.
// (A 16-bit loss would make the scaled loss's own gradient S = 65536 inf in FP16.)
void backward_with(const Tensor& w, double c, GradScaler* scaler = nullptr) {
  Tensor loss = sum(mul(w, full(w.sizes(), c)));
  (scaler ? scaler->scale(loss) : loss).backward();
}

// ---- gradient accumulation adds in FP32 ----

TEST(MasterWeights, OptimizerGivesItsSixteenBitParametersFp32Gradients) {
  for (DType dt : k16) {
    Tensor w = zeros({2}, TensorOptions(dt)).requires_grad_(true);
    Tensor b = zeros({2}).requires_grad_(true);
    EXPECT_EQ(w.grad_dtype(), dt) << "a leaf's grad_dtype defaults to its dtype";
    SGD opt({w, b}, {.lr = 1.0});
    EXPECT_EQ(w.grad_dtype(), DType::Float32);
    EXPECT_TRUE(w.has_explicit_grad_dtype());
    EXPECT_FALSE(b.has_explicit_grad_dtype()) << "an f32 parameter is its own master: nothing to change";
    backward_with(w, 0.5);
    EXPECT_EQ(w.grad().dtype(), DType::Float32) << dtype_name(dt);
  }
}

TEST(MasterWeights, MicroBatchGradientsAccumulateInFp32) {
  // 1024 + four micro-batches of 0.25: a 16-bit sum stays 1024 (FP16's ulp there is 1, BF16's 8);
  // FP32 keeps 1025.
  for (DType dt : k16) {
    Tensor w = zeros({3}, TensorOptions(dt)).requires_grad_(true);
    SGD opt({w}, {.lr = 1.0});
    backward_with(w, 1024.0);
    for (int i = 0; i < 4; ++i) backward_with(w, 0.25);
    ASSERT_EQ(w.grad().dtype(), DType::Float32) << dtype_name(dt);
    EXPECT_EQ(w.grad().to_vector<float>(), std::vector<float>(3, 1025.0f)) << dtype_name(dt);
    opt.step();
    EXPECT_EQ(opt.master(w).to_vector<float>(), std::vector<float>(3, -1025.0f)) << dtype_name(dt);
    EXPECT_EQ(w.to_vector<float>(), std::vector<float>(3, static_cast<float>(to_dtype(full({1}, -1025.0), dt)
                                                                                  .item<float>())));
  }
}

TEST(MasterWeights, AccumulatedScaledStepEqualsTheFp32SumOfTheMicroBatchGradients) {
  // N micro-batches of loss/N under a GradScaler: the step sees the FP32 sum of the N 16-bit
  // (scaled) gradients, unscaled once.
  Generator gen(7);
  const Tensor x = randn({8, 16}, {}, &gen);
  for (DType dt : k16) {
    Tensor w = mul(randn({16}, {}, &gen), 0.1).to(dt).requires_grad_(true);
    SGD opt({w}, {.lr = 0.5});
    GradScaler scaler({.init_scale = 1024.0});
    Tensor want = zeros({16});
    for (int mb = 0; mb < 4; ++mb) {
      const Tensor xb = x.narrow(0, 2 * mb, 2).contiguous().to(dt);
      Tensor loss = div(sum(mul(xb, w.view({1, 16}))), 4.0);  // 16-bit forward
      // The gradient this micro-batch alone produces, in its 16-bit dtype, for the reference:
      Tensor probe = w.detach().clone().requires_grad_(true);
      Tensor probe_loss = div(sum(mul(xb, probe.view({1, 16}))), 4.0);
      mul(probe_loss, 1024.0).backward();
      want = add(want, probe.grad().to(DType::Float32));
      scaler.scale(loss).backward();
    }
    ASSERT_TRUE(same_bytes(w.grad(), want)) << dtype_name(dt);
    const Tensor master_before = snapshot(opt.master(w));
    EXPECT_TRUE(scaler.step(opt));
    const Tensor expected = sub(master_before, mul(mul(want, 1.0 / 1024.0), 0.5));
    EXPECT_TRUE(same_bytes(opt.master(w), expected)) << dtype_name(dt);
  }
}

TEST(MasterWeights, AnInfInAnyMicroBatchSkipsTheAccumulatedStep) {
  for (DType dt : k16) {
    Tensor w = ones({2}, TensorOptions(dt)).requires_grad_(true);
    SGD opt({w}, {.lr = 1.0});
    GradScaler scaler;
    backward_with(w, 1.0, &scaler);
    Tensor loss = sum(mul(w, tensor({INFINITY, 1.0})));  // micro-batch 2 overflows
    scaler.scale(loss).backward();
    backward_with(w, 1.0, &scaler);  // micro-batch 3 is finite again
    const Tensor before = snapshot(opt.master(w));
    EXPECT_FALSE(scaler.step(opt)) << dtype_name(dt);
    EXPECT_TRUE(same_bytes(opt.master(w), before));
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 32768.0);
  }
}

TEST(MasterWeights, AnExplicitSixteenBitGradDtypeIsKept) {
  // The user's choice (half the gradient memory) wins over the optimizer's default; such a
  // gradient then accumulates in 16 bits, as in PyTorch.
  Tensor w = zeros({1}, TensorOptions(DType::Float16)).requires_grad_(true);
  w.set_grad_dtype(DType::Float16);
  SGD opt({w}, {.lr = 1.0});
  EXPECT_EQ(w.grad_dtype(), DType::Float16);
  backward_with(w, 1024.0);
  backward_with(w, 0.25);
  EXPECT_EQ(w.grad().dtype(), DType::Float16);
  EXPECT_EQ(w.grad().item<float>(), 1024.0f);
}

TEST(MasterWeights, GradDtypeErrors) {
  Tensor w = zeros({2}, TensorOptions(DType::Float16)).requires_grad_(true);
  expect_error([&] { w.set_grad_dtype(DType::Int32); }, {"set_grad_dtype", "floating point", "Int32"});
  expect_error([&] { mul(w, 2.0).set_grad_dtype(DType::Float32); }, {"set_grad_dtype", "leaf"});
  w.set_grad_dtype(DType::Float32);
  expect_error([&] { w.set_grad(zeros({2}, TensorOptions(DType::Float64))); },
               {"set_grad", "Float64", "Float16", "Float32", "grad_dtype"});
  w.set_grad(zeros({2}, TensorOptions(DType::Float16)));  // the tensor's own dtype stays legal
  w.set_grad(Tensor());
  w.set_grad(zeros({2}, TensorOptions(DType::Float32)));
  expect_error([&] { w.set_grad_dtype(DType::BFloat16); }, {"set_grad_dtype", "already has a Float32 .grad"});
}

// ---- a write to the model wins over the master ----

TEST(MasterWeights, AWriteToTheModelReseedsTheMaster) {
  for (DType dt : k16) {
    Tensor w = ones({3}, TensorOptions(dt)).requires_grad_(true);
    SGD opt({w}, {.lr = 0.0});
    {
      autograd::NoGradGuard no_grad;
      copy_(w, full({3}, 3.0));  // e.g. model.load_state_dict or re-initialisation
    }
    EXPECT_EQ(opt.master(w).to_vector<float>(), std::vector<float>(3, 3.0f)) << "master() sees the write";
    w.set_grad(zeros({3}));
    opt.step();
    EXPECT_EQ(w.to_vector<float>(), std::vector<float>(3, 3.0f)) << dtype_name(dt) << ": the step undid the write";
    // state_dict() after a write saves the re-seeded master.
    {
      autograd::NoGradGuard no_grad;
      copy_(w, full({3}, -2.0));
    }
    EXPECT_EQ(opt.state_dict().at("state.0.master").to_vector<float>(), std::vector<float>(3, -2.0f));
  }
}

TEST(MasterWeights, TheMasterKeepsItsPrecisionWhenTheWriteChangesNothing) {
  // A write of the values the model already holds (loading the checkpoint the optimizer came
  // from) must not round the master to 16 bits.
  Tensor w = ones({1}, TensorOptions(DType::Float16)).requires_grad_(true);
  SGD opt({w}, {.lr = 1.0});
  w.set_grad(full({1}, 1e-4));
  opt.step();
  const float fine = opt.master(w).item<float>();
  ASSERT_EQ(w.item<float>(), 1.0f) << "1 - 1e-4 rounds back to 1 in FP16";
  ASSERT_NE(fine, 1.0f);
  {
    autograd::NoGradGuard no_grad;
    copy_(w, full({1}, 1.0));
  }
  w.set_grad(zeros({1}));
  opt.step();
  EXPECT_EQ(opt.master(w).item<float>(), fine);
}

TEST(MasterWeights, ModelAndOptimizerCheckpointsLoadInEitherOrder) {
  for (bool stochastic : {false, true}) {
    Tensor w = full({64}, 1.0, TensorOptions(DType::BFloat16)).requires_grad_(true);
    SGD opt({w}, {.lr = 1.0, .momentum = 0.9});
    opt.set_stochastic_rounding(stochastic, 11);
    Generator gen(3);
    for (int i = 0; i < 5; ++i) {
      w.set_grad(mul(randn({64}, {}, &gen), 1e-3));
      opt.step();
    }
    const Tensor model_saved = snapshot(w);
    const StateDict opt_saved = opt.state_dict();
    const Tensor master_saved = opt_saved.at("state.0.master");
    ASSERT_FALSE(same_bytes(to_dtype(model_saved, DType::Float32), master_saved)) << "the master is finer";
    for (bool model_first : {true, false}) {
      Tensor w2 = full({64}, 0.5, TensorOptions(DType::BFloat16)).requires_grad_(true);
      SGD opt2({w2}, {.lr = 1.0, .momentum = 0.9});
      auto load_model = [&] {
        autograd::NoGradGuard no_grad;
        copy_(w2, model_saved);
      };
      if (model_first) load_model();
      opt2.load_state_dict(opt_saved);
      if (!model_first) load_model();
      EXPECT_TRUE(same_bytes(opt2.master(w2), master_saved))
          << (model_first ? "model first" : "optimizer first") << (stochastic ? ", stochastic" : "");
    }
  }
}

// The state of an SGD over an f16 [4] parameter of ones after one step of 1e-4: its master,
// 1 - 1e-4, is finer than the model's RNE of it (1).
StateDict one_fine_step_state() {
  Tensor w = ones({4}, TensorOptions(DType::Float16)).requires_grad_(true);
  SGD opt({w}, {.lr = 1.0});
  w.set_grad(full({4}, 1e-4));
  opt.step();
  return opt.state_dict();
}

TEST(MasterWeights, LoadingOtherWeightsIntoTheModelAfterTheOptimizerReseeds) {
  const StateDict saved = one_fine_step_state();
  Tensor w2 = ones({4}, TensorOptions(DType::Float16)).requires_grad_(true);
  SGD opt2({w2}, {.lr = 1.0});
  opt2.load_state_dict(saved);
  {
    autograd::NoGradGuard no_grad;
    copy_(w2, full({4}, 0.25));  // fine-tuning from other weights
  }
  EXPECT_EQ(opt2.master(w2).to_vector<float>(), std::vector<float>(4, 0.25f));
  // The step continues from the model's weights with the loaded state: 0.25 - 1 * 0.5, where the
  // loaded master would give RNE(1 - 1e-4 - 0.5) = 0.5.
  w2.set_grad(full({4}, 0.5));
  opt2.step();
  EXPECT_EQ(w2.to_vector<float>(), std::vector<float>(4, -0.25f));
  EXPECT_EQ(opt2.master(w2).to_vector<float>(), std::vector<float>(4, -0.25f));
  EXPECT_EQ(opt2.step_count(w2), 2) << "the loaded step count continues";
}

TEST(MasterWeights, OtherWeightsLoadedIntoTheModelBeforeTheOptimizerWin) {
  // A "best model" file and a "last optimizer" file: loading the optimizer never changes the
  // model's weights (PyTorch holds no weights in an optimizer), whichever is loaded first.
  const StateDict saved = one_fine_step_state();
  Tensor w2 = ones({4}, TensorOptions(DType::Float16)).requires_grad_(true);
  SGD opt2({w2}, {.lr = 0.0});
  {
    autograd::NoGradGuard no_grad;
    copy_(w2, tensor({0.25, 1.0, 0.25, 1.0}));  // elements 1 and 3 hold RNE(saved master) = 1
  }
  opt2.load_state_dict(saved);
  const float fine = saved.at("state.0.master").to_vector<float>()[1];
  ASSERT_NE(fine, 1.0f);
  EXPECT_EQ(opt2.master(w2).to_vector<float>(), (std::vector<float>{0.25f, fine, 0.25f, fine}))
      << "the model's values win; where the model holds the master's rounding, the finer master is kept";
  w2.set_grad(zeros({4}));
  opt2.step();
  EXPECT_EQ(w2.to_vector<float>(), (std::vector<float>{0.25f, 1.0f, 0.25f, 1.0f}));
}

TEST(MasterWeights, AWriteToOneElementReseedsThatElementOnly) {
  Tensor w = ones({3}, TensorOptions(DType::BFloat16)).requires_grad_(true);
  SGD opt({w}, {.lr = 1.0});
  w.set_grad(full({3}, 1e-4));
  opt.step();
  const std::vector<float> fine = opt.master(w).to_vector<float>();
  ASSERT_NE(fine[0], 1.0f);
  {
    autograd::NoGradGuard no_grad;
    Tensor row = w.narrow(0, 1, 1);
    fill_(row, 2.0);
  }
  EXPECT_EQ(opt.master(w).to_vector<float>(), (std::vector<float>{fine[0], 2.0f, fine[2]}));
}

TEST(MasterWeights, TheCheckFollowsHowTheParameterWasWrittenNotTheCurrentFlag) {
  // Steps with stochastic rounding, then the flag turned off: a write of the values the model
  // holds (stochastic neighbours of the master, not RNE of it) must still keep every master entry.
  Tensor w = full({64}, 1.0, TensorOptions(DType::BFloat16)).requires_grad_(true);
  SGD opt({w}, {.lr = 1.0});
  opt.set_stochastic_rounding(true, 5);
  Generator gen(9);
  for (int i = 0; i < 5; ++i) {
    w.set_grad(mul(randn({64}, {}, &gen), 1e-3));
    opt.step();
  }
  const Tensor master = snapshot(opt.master(w));
  ASSERT_FALSE(same_bytes(to_dtype(master, DType::BFloat16), w)) << "some entries are not RNE(master)";
  opt.set_stochastic_rounding(false);
  {
    autograd::NoGradGuard no_grad;
    copy_(w, w.detach().clone());
  }
  EXPECT_TRUE(same_bytes(opt.master(w), master));
}

TEST(MasterWeights, AResumeKeepsStochasticallyWrittenMastersAfterTheFlagWasTurnedOff) {
  // Trained with stochastic rounding, the flag turned off before saving: the resumed optimizer
  // must judge the model by how each parameter was last written (stochastically), not by the
  // flag, or it re-seeds every master entry whose model value is the stochastic neighbour.
  Tensor w = full({64}, 1.0, TensorOptions(DType::BFloat16)).requires_grad_(true);
  Tensor r = full({64}, 1.0, TensorOptions(DType::BFloat16)).requires_grad_(true);  // RNE from the start
  SGD opt({ParamGroup({w}), ParamGroup({r})}, {.lr = 1.0});
  Generator gen(9);
  auto step = [&] {
    w.set_grad(mul(randn({64}, {}, &gen), 1e-3));
    r.set_grad(mul(randn({64}, {}, &gen), 1e-3));
    opt.step();
  };
  opt.set_stochastic_rounding(true, 5);
  for (int i = 0; i < 5; ++i) step();
  opt.set_stochastic_rounding(false);
  r.set_grad(mul(randn({64}, {}, &gen), 1e-3));
  w.set_grad(Tensor());
  opt.step();  // r is now written by RNE again, w is not stepped
  const StateDict saved = opt.state_dict();
  const Tensor w_master = saved.at("state.0.master"), r_master = saved.at("state.1.master");
  ASSERT_FALSE(same_bytes(to_dtype(w_master, DType::BFloat16), w)) << "some entries are not RNE(master)";
  for (bool model_first : {true, false}) {
    Tensor w2 = full({64}, 0.5, TensorOptions(DType::BFloat16)).requires_grad_(true);
    Tensor r2 = full({64}, 0.5, TensorOptions(DType::BFloat16)).requires_grad_(true);
    SGD opt2({ParamGroup({w2}), ParamGroup({r2})}, {.lr = 1.0});
    auto load_model = [&] {
      autograd::NoGradGuard no_grad;
      copy_(w2, w);
      copy_(r2, r);
    };
    if (model_first) load_model();
    opt2.load_state_dict(saved);
    if (!model_first) load_model();
    EXPECT_TRUE(same_bytes(opt2.master(w2), w_master)) << (model_first ? "model first" : "optimizer first");
    EXPECT_TRUE(same_bytes(opt2.master(r2), r_master)) << (model_first ? "model first" : "optimizer first");
  }
}

TEST(MasterWeights, AnEmptySixteenBitParameterSurvivesAWrite) {
  for (bool stochastic : {false, true}) {
    Tensor w = zeros({0}, TensorOptions(DType::Float16)).requires_grad_(true);
    SGD opt({w}, {.lr = 1.0});
    opt.set_stochastic_rounding(stochastic);
    w.set_grad(zeros({0}));
    opt.step();
    {
      autograd::NoGradGuard no_grad;
      copy_(w, zeros({0}));
    }
    w.set_grad(zeros({0}));
    opt.step();
    EXPECT_EQ(opt.state_dict().at("state.0.master").numel(), 0);
  }
}

// ---- unscale_ then clip_grad_norm_(model.parameters()), PyTorch's documented pattern ----

TEST(MasterWeights, ClippingAfterUnscaleSeesTrueGradientsOfA16BitModel) {
  for (DType dt : k16) {
    Tensor w = zeros({2}, TensorOptions(dt)).requires_grad_(true);
    SGD opt({w}, {.lr = 1.0});
    GradScaler scaler({.init_scale = 1024.0});
    Tensor loss = sum(mul(w, tensor({4.0, 0.0}, TensorOptions(dt))));
    scaler.scale(loss).backward();
    scaler.unscale_(opt);
    const double norm = optim::clip_grad_norm_({w}, 1.0);
    EXPECT_EQ(norm, 4.0) << dtype_name(dt) << ": the norm of the scaled gradients would be 4096";
    EXPECT_TRUE(scaler.step(opt));
    const float coef = static_cast<float>(1.0 / (4.0 + 1e-6));
    EXPECT_EQ(opt.master(w).to_vector<float>(), (std::vector<float>{-(4.0f * coef), 0.0f})) << dtype_name(dt);
  }
}

// ---- 16-bit gradients the user opted into ----

TEST(MasterWeights, UnscaleOfOptedInSixteenBitGradients) {
  // BF16: unscaled in place (PyTorch's rule), and step() must not apply the scale again.
  Tensor b = zeros({2}, TensorOptions(DType::BFloat16)).requires_grad_(true);
  b.set_grad_dtype(DType::BFloat16);
  SGD optb({b}, {.lr = 1.0});
  GradScaler scaler({.init_scale = 256.0});
  scaler.scale(sum(mul(b, tensor({2.0, -0.5}, TensorOptions(DType::BFloat16))))).backward();
  ASSERT_EQ(b.grad().dtype(), DType::BFloat16);
  scaler.unscale_(optb);
  EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{2.0f, -0.5f}));
  EXPECT_TRUE(scaler.step(optb));
  EXPECT_EQ(optb.master(b).to_vector<float>(), (std::vector<float>{-2.0f, 0.5f}));
  scaler.update();
  // Without unscale_, step() applies 1/S as it widens the 16-bit gradient.
  optb.zero_grad();
  scaler.scale(sum(mul(b, tensor({2.0, -0.5}, TensorOptions(DType::BFloat16))))).backward();
  EXPECT_TRUE(scaler.step(optb));
  EXPECT_EQ(optb.master(b).to_vector<float>(), (std::vector<float>{-4.0f, 1.0f}));
  scaler.update();

  // FP16: unscale_ is refused (its true values underflow in FP16) with what to do instead.
  Tensor h = zeros({2}, TensorOptions(DType::Float16)).requires_grad_(true);
  h.set_grad_dtype(DType::Float16);
  SGD opth({h}, {.lr = 1.0});
  scaler.scale(sum(mul(h, tensor({2.0, -0.5}, TensorOptions(DType::Float16))))).backward();
  expect_error([&] { scaler.unscale_(opth); }, {"Attempting to unscale FP16 gradients", "grad_dtype", "Float32"});
  EXPECT_TRUE(scaler.step(opth)) << "step() alone still unscales at the copy";
  EXPECT_EQ(opth.master(h).to_vector<float>(), (std::vector<float>{-2.0f, 0.5f}));
}

TEST(MasterWeights, Bf16GradientsWithoutAMasterAreUnscaledInPlace) {
  // An f32 parameter carrying a bf16 .grad: PyTorch refuses only FP16.
  Tensor p = zeros({2}).requires_grad_(true);
  SGD opt({p}, {.lr = 1.0});
  GradScaler scaler({.init_scale = 8.0});
  scaler.scale(sum(p));
  p.set_grad(tensor({16.0, -8.0}, TensorOptions(DType::BFloat16)));
  scaler.unscale_(opt);
  EXPECT_EQ(p.grad().dtype(), DType::BFloat16);
  EXPECT_EQ(p.grad().to_vector<float>(), (std::vector<float>{2.0f, -1.0f}));
}

// ---- the growth tracker after a lowered growth interval ----

TEST(GradScaler, ALoweredGrowthIntervalStillLoadsAndGrows) {
  GradScaler scaler({.init_scale = 4.0, .growth_interval = 10});
  Tensor p = zeros({1}).requires_grad_(true);
  SGD opt({p}, {.lr = 0.0});
  for (int i = 0; i < 5; ++i) {
    opt.zero_grad();
    scaler.scale(sum(p)).backward();
    scaler.step(opt);
    scaler.update();
  }
  ASSERT_EQ(scaler.get_growth_tracker(), 5);
  scaler.set_growth_interval(3);
  const StateDict sd = scaler.state_dict();
  GradScaler resumed;
  resumed.load_state_dict(sd);  // refused before: the tracker 5 is not below the interval 3
  EXPECT_EQ(resumed.get_growth_tracker(), 5);
  // The next clean iteration grows (PyTorch's == test would never grow again).
  for (GradScaler* s : {&scaler, &resumed}) {
    opt.zero_grad();
    s->scale(sum(p)).backward();
    s->step(opt);
    s->update();
    EXPECT_EQ(s->get_scale(), 8.0);
    EXPECT_EQ(s->get_growth_tracker(), 0);
  }
}

}  // namespace
}  // namespace mixtape::testing
