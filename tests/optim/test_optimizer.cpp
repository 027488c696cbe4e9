// tests/optim/test_optimizer.cpp — the Optimizer base: parameter groups, zero_grad, skipped
// parameters, version counters, step post hooks, state_bytes, dispatcher registration, state_dict
// round trips and every bad-input error (by message substring).
#include "optim_test_util.h"

namespace mixtape::testing {
namespace {

using optim::Adam;
using optim::AdamW;
using optim::HyperParams;
using optim::ParamGroup;
using optim::SGD;

TEST(OptimOps, FusedStepsAreInPlaceDispatcherOpsWithCpuKernels) {
  for (const char* name : {"sgd_step_", "adam_step_"}) {
    const OpSchema* op = find_op(name);
    ASSERT_NE(op, nullptr) << name;
    EXPECT_TRUE(op->inplace) << name;
    EXPECT_TRUE(op->has_kernel(DeviceType::CPU)) << name;
  }
  const OpSchema* norm = find_op("norm_pow_sum");
  ASSERT_NE(norm, nullptr);
  EXPECT_FALSE(norm->differentiable);
}

TEST(ZeroGrad, SetToNoneDropsGrads) {
  Tensor w = param_from({1, 2}, {2}, DType::Float32), b = param_from({3}, {1}, DType::Float32);
  SGD opt({w, b}, {.lr = 0.1});
  w.set_grad(ones({2}));
  opt.zero_grad();
  EXPECT_FALSE(w.grad().defined());
  EXPECT_FALSE(b.grad().defined());
}

TEST(ZeroGrad, ZeroInPlaceKeepsTheStorage) {
  Tensor w = param_from({1, 2}, {2}, DType::Float32);
  SGD opt({w}, {.lr = 0.1});
  Tensor g = full({2}, 5.0);
  w.set_grad(g);
  const uint32_t v = g.version();
  opt.zero_grad(/*set_to_none=*/false);
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().to_vector<float>(), std::vector<float>(2, 0.0f));
  EXPECT_EQ(g.to_vector<float>(), std::vector<float>(2, 0.0f)) << "zeroed in place: a held handle sees zeros";
  EXPECT_EQ(w.grad().data_ptr(), g.data_ptr());
  EXPECT_GT(g.version(), v);
  opt.step();  // a zero grad is a grad: the update runs and changes nothing
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{1, 2}));
  EXPECT_EQ(opt.step_count(w), 1);
}

TEST(ZeroGrad, AfterBackwardThenStepMatchesHandComputation) {
  Tensor w = param_from({1, -2, 3}, {3}, DType::Float32);
  SGD opt({w}, {.lr = 0.5});
  for (int it = 0; it < 2; ++it) {
    opt.zero_grad();
    Tensor loss = (w * w).sum();  // d/dw = 2w
    loss.backward();
    opt.step();
  }
  // w <- w - 0.5 * 2w = 0 after the first step, stays 0.
  EXPECT_EQ(w.to_vector<float>(), std::vector<float>(3, 0.0f));
  EXPECT_TRUE(w.is_leaf());
  EXPECT_TRUE(w.requires_grad());
}

TEST(Step, ParameterWithoutGradIsSkipped) {
  Tensor a = param_from({1, 1}, {2}, DType::Float32), b = param_from({5}, {1}, DType::Float32);
  Adam opt({a, b}, {.lr = 0.1});
  a.set_grad(ones({2}));
  opt.step();
  EXPECT_EQ(b.to_vector<float>(), std::vector<float>{5});
  EXPECT_EQ(opt.step_count(a), 1);
  EXPECT_EQ(opt.step_count(b), 0);
  EXPECT_FALSE(opt.state(b, "exp_avg").defined()) << "no state for a parameter never updated";
  b.set_grad(ones({1}));
  opt.step();
  EXPECT_EQ(opt.step_count(a), 2);
  EXPECT_EQ(opt.step_count(b), 1) << "b's bias correction starts at its own first update";
}

TEST(Step, BumpsTheVersionOfEveryWrittenTensor) {
  Tensor w32 = param_from({1, 2}, {2}, DType::Float32);
  Tensor w16 = param_from({1, 2}, {2}, DType::Float16);
  Adam opt({w32, w16}, {.lr = 0.1, .amsgrad = true});
  w32.set_grad(ones({2}));
  w16.set_grad(ones({2}, TensorOptions(DType::Float16)));
  opt.step();  // creates the state
  std::vector<Tensor> written{w32, w16, opt.master(w16)};
  for (const Tensor& p : {w32, w16})
    for (const char* s : {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) written.push_back(opt.state(p, s));
  std::vector<uint32_t> before;
  for (const Tensor& t : written) before.push_back(t.version());
  opt.step();
  for (size_t i = 0; i < written.size(); ++i) EXPECT_GT(written[i].version(), before[i]) << "tensor " << i;
  // SGD with momentum too
  Tensor s = param_from({1}, {1}, DType::Float32);
  SGD sgd({s}, {.lr = 0.1, .momentum = 0.9});
  s.set_grad(ones({1}));
  sgd.step();
  const uint32_t vb = sgd.state(s, "momentum_buffer").version(), vp = s.version();
  sgd.step();
  EXPECT_GT(sgd.state(s, "momentum_buffer").version(), vb);
  EXPECT_GT(s.version(), vp);
}

// PyTorch's register_step_post_hook: after every step(), in registration order, until removed.
TEST(Step, PostHooksRunAfterEveryStepInOrderUntilRemoved) {
  Tensor p = param_from({1.0, 2.0}, {2}, DType::Float32);
  optim::SGD opt({p}, {.lr = 0.5});
  std::vector<std::string> seen;
  const int a = opt.register_step_post_hook([&] { seen.push_back("a " + std::to_string(p.to_vector<float>()[0])); });
  opt.register_step_post_hook([&] { seen.push_back("b"); });
  p.set_grad(tensor({1.0, 1.0}));
  opt.step();
  EXPECT_EQ(seen, (std::vector<std::string>{"a " + std::to_string(0.5f), "b"})) << "after the update";
  opt.remove_step_post_hook(a);
  opt.step();
  EXPECT_EQ(seen, (std::vector<std::string>{"a " + std::to_string(0.5f), "b", "b"}));
  EXPECT_THROW(opt.register_step_post_hook({}), Error);
}

// A hook may remove itself (a one-shot hook, as with PyTorch's handle.remove()) or another while
// the hooks run: the others of that step still run, each once.
TEST(Step, AHookMayRemoveItselfWhileTheHooksRun) {
  Tensor p = param_from({1.0, 2.0}, {2}, DType::Float32);
  optim::SGD opt({p}, {.lr = 0.5});
  std::vector<std::string> seen;
  int a = -1, pre = -1;
  a = opt.register_step_post_hook([&] { seen.push_back("a"), opt.remove_step_post_hook(a); });
  opt.register_step_post_hook([&] { seen.push_back("b"); });
  pre = opt.register_step_pre_hook([&] { seen.push_back("pre"), opt.remove_step_pre_hook(pre); });
  opt.register_step_pre_hook([&] { seen.push_back("pre2"); });
  p.set_grad(tensor({1.0, 1.0}));
  opt.step();
  opt.step();
  EXPECT_EQ(seen, (std::vector<std::string>{"pre", "pre2", "a", "b", "pre2", "b"}));
}

// PyTorch's register_step_pre_hook: before anything changes, so a hook that throws refuses the
// step with the parameters and state untouched; inv_scale_pending says whether the step about to
// run is a GradScaler's (set_inv_scale_for_next_step since the last step or zero_grad).
TEST(Step, PreHooksRunBeforeTheUpdateAndMayRefuseIt) {
  Tensor p = param_from({1.0, 2.0}, {2}, DType::Float32);
  optim::SGD opt({p}, {.lr = 0.5, .momentum = 0.9});
  std::vector<std::string> seen;
  bool refuse = true;
  const int a = opt.register_step_pre_hook([&] {
    seen.push_back("pre " + std::to_string(p.to_vector<float>()[0]) + (opt.inv_scale_pending() ? " scaled" : ""));
    if (refuse) throw Error("refused");
  });
  p.set_grad(tensor({1.0, 1.0}));
  opt.set_inv_scale_for_next_step(1.0f);
  EXPECT_THROW(opt.step(), Error);
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(opt.state_bytes(), 0) << "no momentum buffer: the step never began";
  refuse = false;
  opt.step();
  EXPECT_FALSE(opt.inv_scale_pending()) << "consumed by the step";
  opt.step();
  EXPECT_EQ(seen, (std::vector<std::string>{"pre " + std::to_string(1.0f) + " scaled", "pre " + std::to_string(1.0f) + " scaled",
                                            "pre " + std::to_string(0.5f)}));
  opt.set_inv_scale_for_next_step(0.5f);
  opt.zero_grad();
  EXPECT_FALSE(opt.inv_scale_pending()) << "dropped by zero_grad";
  opt.remove_step_pre_hook(a);
  p.set_grad(tensor({1.0, 1.0}));
  opt.step();
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_THROW(opt.register_step_pre_hook({}), Error);
}

// Masters of 16-bit parameters and every buffer, as they are created.
TEST(Step, StateBytesCountMastersAndBuffers) {
  Tensor h = param_from({1.0, 2.0, 3.0}, {3}, DType::BFloat16), f = param_from({1.0, 2.0}, {2}, DType::Float64);
  optim::Adam opt(std::vector<Tensor>{h, f});
  EXPECT_EQ(opt.state_bytes(), 3 * 4) << "the FP32 master only, before the first step";
  h.set_grad(tensor({1.0, 1.0, 1.0}));
  f.set_grad(tensor({1.0, 1.0}, {2}, TensorOptions(DType::Float64)));
  opt.step();
  EXPECT_EQ(opt.state_bytes(), 3 * 4 + 2 * 3 * 4 + 2 * 2 * 8) << "master, exp_avg and exp_avg_sq";
}

TEST(Step, NonContiguousParameterIsUpdatedInPlace) {
  Tensor base = param_from({1, 2, 3, 4, 5, 6}, {2, 3}, DType::Float32);
  Tensor leaf = base.detach().t().requires_grad_(true);  // (3, 2), transposed storage
  ASSERT_FALSE(leaf.is_contiguous());
  SGD opt({leaf}, {.lr = 1.0});
  leaf.set_grad(ones({3, 2}));
  opt.step();
  EXPECT_EQ(leaf.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(base.to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5})) << "written through to the storage";
}

// ---- parameter groups ----

TEST(ParamGroups, GroupsOverrideDefaultsAndSchedulersCanSetLr) {
  Tensor a = param_from({0}, {1}, DType::Float64), b = param_from({0}, {1}, DType::Float64);
  SGD opt({ParamGroup({a}), ParamGroup({b}, {{"lr", 0.01}})}, {.lr = 0.1, .momentum = 0.5});
  ASSERT_EQ(opt.param_groups().size(), 2u);
  EXPECT_EQ(opt.param_groups()[0].lr(), 0.1);
  EXPECT_EQ(opt.param_groups()[1].lr(), 0.01);
  EXPECT_EQ(opt.param_groups()[1].options.get("momentum"), 0.5) << "unset options come from the defaults";
  a.set_grad(ones({1}, TensorOptions(DType::Float64)));
  b.set_grad(ones({1}, TensorOptions(DType::Float64)));
  opt.step();
  EXPECT_EQ(a.item<double>(), -0.1);
  EXPECT_EQ(b.item<double>(), -0.01);
  opt.param_groups()[1].set_lr(1.0);
  opt.step();  // b: buf = 0.5 * 1 + 1 = 1.5; b = -0.01 - 1.5
  EXPECT_EQ(b.item<double>(), -0.01 - 1.5);
  expect_error([&] { opt.param_groups()[0].options.set("lrr", 1.0); }, {"'lrr' does not exist", "lr, momentum"});
}

TEST(ParamGroups, AddParamGroupLater) {
  Tensor a = param_from({0}, {1}, DType::Float32), c = param_from({0}, {1}, DType::Float32);
  Adam opt({a}, {.lr = 0.1});
  opt.add_param_group(ParamGroup({c}, {{"lr", 0.5}, {"amsgrad", 1}}));
  ASSERT_EQ(opt.param_groups().size(), 2u);
  EXPECT_EQ(opt.param_groups()[1].options.get("eps"), 1e-8);
  EXPECT_TRUE(opt.param_groups()[1].options.get_bool("amsgrad"));
  c.set_grad(ones({1}));
  opt.step();
  EXPECT_TRUE(opt.state(c, "max_exp_avg_sq").defined());
  EXPECT_EQ(opt.parameters().size(), 2u);
}

TEST(ParamGroups, Errors) {
  Tensor a = param_from({0}, {1}, DType::Float32);
  expect_error([&] { SGD({ParamGroup({a}, {{"momentun", 0.9}})}, {.lr = 0.1}); },
               {"SGD: unknown option 'momentun' in param group 0", "dampening, lr, momentum, nesterov, weight_decay"});
  expect_error([&] { SGD({ParamGroup({a}), ParamGroup({a})}, {.lr = 0.1}); }, {"more than one place", "param group 1"});
  expect_error([&] { SGD({a, a}, {.lr = 0.1}); }, {"more than one place"});
  expect_error([&] { SGD(std::vector<Tensor>{}, {.lr = 0.1}); }, {"has no parameters"});
  SGD opt({a}, {.lr = 0.1});
  Tensor other = param_from({0}, {1}, DType::Float32);
  opt.param_groups()[0].params.push_back(other);
  a.set_grad(ones({1}));
  expect_error([&] { opt.step(); }, {"param group 0 now has 2 parameters", "add_param_group"});
  opt.param_groups()[0].params = {other};
  expect_error([&] { opt.step(); }, {"was replaced"});
  opt.param_groups()[0].params = {a};
  opt.param_groups()[0].options = HyperParams{{"lr", 0.1}};
  expect_error([&] { opt.step(); }, {"param group 0 has options lr; SGD options are: dampening, lr, momentum"});
  expect_error([&] { opt.master(other); }, {"SGD.master", "not a parameter of this optimizer"});
}

// ---- bad input at construction and at step ----

TEST(Errors, ParameterChecksNameTheParameter) {
  Tensor frozen = tensor({1.0, 2.0});
  frozen.set_name("encoder.weight");
  expect_error([&] { SGD({frozen}, {.lr = 0.1}); },
               {"SGD: parameter 0 of param group 0 'encoder.weight' (f32[2]) does not require grad"});
  Tensor ints = tensor({1.0, 2.0}, TensorOptions(DType::Int64));
  expect_error([&] { Adam({ints}); }, {"Adam: can only optimize floating-point tensors", "i64[2]"});
  Tensor leaf = param_from({1, 2}, {2}, DType::Float32);
  Tensor non_leaf = leaf * 2.0;
  expect_error([&] { AdamW({non_leaf}); }, {"AdamW: can't optimize a non-leaf tensor"});
  expect_error([&] { SGD({Tensor()}, {.lr = 0.1}); }, {"undefined tensor"});
}

TEST(Errors, InvalidOptions) {
  Tensor a = param_from({0}, {1}, DType::Float32);
  expect_error([&] { SGD({a}, {}); }, {"SGD: invalid learning rate nan", "lr is required"});
  expect_error([&] { SGD({a}, {.lr = -1}); }, {"invalid learning rate -1"});
  expect_error([&] { SGD({a}, {.lr = 0.1, .momentum = -0.5}); }, {"invalid momentum value -0.5"});
  expect_error([&] { SGD({a}, {.lr = 0.1, .weight_decay = -1}); }, {"invalid weight_decay value -1"});
  expect_error([&] { SGD({a}, {.lr = 0.1, .nesterov = true}); }, {"Nesterov momentum requires a momentum and zero dampening"});
  expect_error([&] { SGD({a}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}); }, {"Nesterov"});
  expect_error([&] { Adam({a}, {.betas = {1.0, 0.999}}); }, {"Adam: invalid beta parameter at index 0: 1"});
  expect_error([&] { Adam({a}, {.betas = {0.9, -0.1}}); }, {"invalid beta parameter at index 1"});
  expect_error([&] { AdamW({a}, {.eps = -1e-8}); }, {"AdamW: invalid epsilon value"});
  expect_error([&] { AdamW({a}, {.lr = -0.1}); }, {"AdamW: invalid learning rate"});
  // A later change through param_groups() is checked at step().
  SGD opt({a}, {.lr = 0.1});
  opt.param_groups()[0].set_lr(-3);
  a.set_grad(ones({1}));
  expect_error([&] { opt.step(); }, {"invalid learning rate -3", "(param group 0)"});
}

TEST(Errors, GradShapeDtypeAndDevice) {
  Tensor a = param_from({1, 2, 3, 4}, {2, 2}, DType::Float32);
  Tensor b = param_from({1}, {1}, DType::Float32);
  SGD opt({b, a}, {.lr = 0.1});
  // Core refuses a wrong-shaped grad outright ...
  expect_error([&] { a.set_grad(ones({3})); }, {"set_grad: gradient shape [3] does not match tensor shape [2, 2]"});
  // ... and the optimizer checks again (a grad can reach a parameter by other routes).
  b.set_grad(ones({1}));
  a.impl()->autograd_meta().grad = ones({3});
  expect_error([&] { opt.step(); }, {"SGD: the grad of parameter 1 (f32[2, 2]) has shape [3]", "expected the parameter's shape [2, 2]"});
  EXPECT_EQ(b.to_vector<float>(), std::vector<float>{1}) << "a failing step changes nothing, not even valid params";
  EXPECT_EQ(opt.step_count(b), 0);
  a.set_grad(ones({2, 2}, TensorOptions(DType::Float64)));
  expect_error([&] { opt.step(); }, {"the grad of parameter 1 (f32[2, 2]) is Float64, expected Float32"});
  Tensor h = param_from({1}, {1}, DType::Float16);
  SGD opt16({h}, {.lr = 0.1});
  // Core refuses a third dtype on a parameter whose grad_dtype the optimizer set ...
  expect_error([&] { h.set_grad(ones({1}, TensorOptions(DType::BFloat16))); },
               {"set_grad: gradient is BFloat16", "Float16 or Float32 (its grad_dtype)"});
  // ... and the optimizer checks again.
  h.impl()->autograd_meta().grad = ones({1}, TensorOptions(DType::BFloat16));
  expect_error([&] { opt16.step(); }, {"is BFloat16, expected Float16 (or Float32)"});
}

TEST(HyperParamsTest, GetAndSetUnknownNamesFail) {
  HyperParams h{{"lr", 0.1}, {"momentum", 0.0}};
  EXPECT_EQ(h.get("lr"), 0.1);
  h.set("momentum", 0.9);
  EXPECT_EQ(h.get("momentum"), 0.9);
  expect_error([&] { h.get("beta"); }, {"option 'beta' does not exist", "lr, momentum"});
  expect_error([&] { h.set("beta", 1); }, {"option 'beta' does not exist"});
}

// ---- state_dict ----

std::vector<Tensor> grads_for(int step, const std::vector<Tensor>& ps) {
  Generator gen(100 + step);
  std::vector<Tensor> out;
  for (const Tensor& p : ps) out.push_back(randn(p.sizes(), TensorOptions(p.dtype()), &gen));
  return out;
}

TEST(StateDict, KeysDtypesAndShapes) {
  Tensor w = param_from({1, 2, 3, 4, 5, 6}, {2, 3}, DType::Float32);
  Tensor h = param_from({1, 2}, {2}, DType::BFloat16);
  SGD opt({ParamGroup({w}), ParamGroup({h}, {{"lr", 0.01}})}, {.lr = 0.1, .momentum = 0.9});
  StateDict before = opt.state_dict();
  EXPECT_TRUE(before.count("state.1.master")) << "masters exist from construction";
  EXPECT_FALSE(before.count("state.0.step"));
  w.set_grad(ones({2, 3}));
  h.set_grad(ones({2}, TensorOptions(DType::BFloat16)));
  opt.step();
  StateDict sd = opt.state_dict();
  std::vector<std::string> keys;
  for (auto& [k, v] : sd) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{
                      "param_groups.0.dampening", "param_groups.0.lr", "param_groups.0.momentum",
                      "param_groups.0.nesterov", "param_groups.0.params", "param_groups.0.weight_decay",
                      "param_groups.1.dampening", "param_groups.1.lr", "param_groups.1.momentum",
                      "param_groups.1.nesterov", "param_groups.1.params", "param_groups.1.weight_decay",
                      "rounding.offset", "rounding.seed", "rounding.stochastic", "state.0.momentum_buffer",
                      "state.0.step", "state.1.master", "state.1.momentum_buffer", "state.1.step",
                      "state.1.written_stochastically"}));
  EXPECT_EQ(sd.at("param_groups.1.lr").describe(), "f64[]");
  EXPECT_EQ(sd.at("param_groups.1.lr").item<double>(), 0.01);
  EXPECT_EQ(sd.at("param_groups.1.params").to_vector<int64_t>(), std::vector<int64_t>{1});
  EXPECT_EQ(sd.at("state.0.momentum_buffer").describe(), "f32[2, 3]");
  EXPECT_EQ(sd.at("state.1.momentum_buffer").describe(), "f32[2]");
  EXPECT_EQ(sd.at("state.1.master").describe(), "f32[2]");
  EXPECT_EQ(sd.at("state.1.step").describe(), "i64[]");
  EXPECT_EQ(sd.at("state.1.step").item<int64_t>(), 1);
  EXPECT_EQ(sd.at("state.1.written_stochastically").describe(), "i64[]");
  EXPECT_EQ(sd.at("state.1.written_stochastically").item<int64_t>(), 0);
  // A snapshot: changing it does not change the optimizer.
  fill_(sd.at("state.0.momentum_buffer"), 7.0);
  EXPECT_EQ(opt.state(w, "momentum_buffer").to_vector<float>(), std::vector<float>(6, 1.0f));
}

TEST(StateDict, RoundTripContinuesBitIdentically) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (int which = 0; which < 2; ++which) {
      auto make = [&](std::vector<Tensor>& ps) -> std::unique_ptr<optim::Optimizer> {
        if (which == 0)
          return std::make_unique<SGD>(std::vector<ParamGroup>{ParamGroup({ps[0]}), ParamGroup({ps[1]}, {{"lr", 0.3}})},
                                       optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.2});
        return std::make_unique<Adam>(ps, optim::AdamOptions{.lr = 0.05, .weight_decay = 0.01, .amsgrad = true});
      };
      std::vector<Tensor> pa{param_from({1, 2, 3}, {3}, dt), param_from({-1, 0.5}, {2}, dt)};
      auto a = make(pa);
      for (int s = 0; s < 4; ++s) {
        auto g = grads_for(s, pa);
        for (size_t i = 0; i < pa.size(); ++i) pa[i].set_grad(g[i]);
        a->step();
      }
      StateDict saved = a->state_dict();
      std::vector<Tensor> pb{pa[0].detach().clone().requires_grad_(true), pa[1].detach().clone().requires_grad_(true)};
      auto b = make(pb);
      b->param_groups()[0].set_lr(123.0);  // overwritten by the load
      b->load_state_dict(saved);
      EXPECT_EQ(b->param_groups()[0].lr(), which == 0 ? 0.1 : 0.05);
      for (int s = 4; s < 8; ++s) {
        auto g = grads_for(s, pa);
        for (size_t i = 0; i < pa.size(); ++i) {
          pa[i].set_grad(g[i]);
          pb[i].set_grad(g[i].clone());
        }
        a->step();
        b->step();
        for (size_t i = 0; i < pa.size(); ++i) ASSERT_TRUE(same_bits(pa[i], pb[i])) << "step " << s << ", param " << i;
      }
    }
  }
}

TEST(StateDict, LoadValidatesEverythingFirst) {
  Tensor w = param_from({1, 2}, {2}, DType::Float32);
  Tensor h = param_from({1, 2}, {2}, DType::Float16);
  Adam opt({w, h}, {.lr = 0.1});
  w.set_grad(ones({2}));
  h.set_grad(ones({2}, TensorOptions(DType::Float16)));
  opt.step();
  const StateDict good = opt.state_dict();
  const Tensor master_before = opt.master(h).clone();
  auto with = [&](const std::string& k, const Tensor& v) {
    StateDict sd = good;
    sd[k] = v;
    return sd;
  };
  auto without = [&](const std::string& k) {
    StateDict sd = good;
    sd.erase(k);
    return sd;
  };
  expect_error([&] { opt.load_state_dict(without("state.0.exp_avg_sq")); },
               {"Adam.load_state_dict: missing key 'state.0.exp_avg_sq'", "updated 1 times"});
  expect_error([&] { opt.load_state_dict(without("state.1.master")); }, {"missing key 'state.1.master'"});
  expect_error([&] { opt.load_state_dict(without("param_groups.0.eps")); }, {"missing key 'param_groups.0.eps'"});
  expect_error([&] { opt.load_state_dict(without("rounding.seed")); }, {"missing key 'rounding.seed'"});
  expect_error([&] { opt.load_state_dict(with("state.0.exp_avg", zeros({3}))); },
               {"'state.0.exp_avg' must be f32[2], got f32[3]"});
  expect_error([&] { opt.load_state_dict(with("state.1.exp_avg", zeros({2}, TensorOptions(DType::Float16)))); },
               {"'state.1.exp_avg' must be f32[2], got f16[2]"}) ;
  expect_error([&] { opt.load_state_dict(with("state.1.master", zeros({2}, TensorOptions(DType::Float16)))); },
               {"'state.1.master' must be f32[2]"});
  expect_error([&] { opt.load_state_dict(with("state.0.step", full({}, 2.0))); }, {"'state.0.step' must be i64[]"});
  expect_error([&] { opt.load_state_dict(with("param_groups.0.lr", full({}, -1.0, TensorOptions(DType::Float64)))); },
               {"param group 0", "invalid learning rate -1"});
  expect_error([&] { opt.load_state_dict(with("state.0.momentum_buffer", zeros({2}))); },
               {"unexpected key 'state.0.momentum_buffer'"});
  expect_error([&] { opt.load_state_dict(with("state.2.exp_avg", zeros({2}))); }, {"unexpected key 'state.2.exp_avg'", "2 parameters"});
  expect_error([&] { opt.load_state_dict(with("param_groups.1.params", zeros({1}, TensorOptions(DType::Int64)))); },
               {"unexpected key 'param_groups.1.params'", "more param groups"});
  expect_error([&] { opt.load_state_dict(with("param_groups.0.params", tensor({0.0}, TensorOptions(DType::Int64)))); },
               {"param group 0 has 1 parameters in the state dict, 2 in this optimizer"});
  expect_error([&] { opt.load_state_dict(StateDict{}); }, {"missing key 'param_groups.0.params'", "fewer param groups"});
  // A dict from SGD does not load into Adam.
  Tensor w2 = param_from({1, 2}, {2}, DType::Float32), h2 = param_from({1, 2}, {2}, DType::Float16);
  SGD sgd({w2, h2}, {.lr = 0.1});
  expect_error([&] { opt.load_state_dict(sgd.state_dict()); }, {"missing key 'param_groups.0.amsgrad'"});
  // None of the failed loads changed anything.
  EXPECT_TRUE(same_bits(opt.master(h), master_before));
  EXPECT_EQ(opt.param_groups()[0].lr(), 0.1);
  EXPECT_EQ(opt.step_count(w), 1);
  opt.load_state_dict(good);
}

}  // namespace
}  // namespace mixtape::testing
