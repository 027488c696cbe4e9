// tests/amp/test_grad_scaler.cpp — amp::GradScaler, one test per behaviour 15-25, 30, 31 of
// docs/amp-behaviours.md (named GradScaler.B<n>_...), with the scaler kernels called directly.
// Training-shaped behaviours (26-29, 34) are in test_grad_scaler_training.cpp, mixtape's additions
// to PyTorch's scaler in test_grad_scaler_additions.cpp. Every expected value is computed independently of the scaler
// (host arithmetic, PyTorch's published vectors, or a run without the scaler).
#include <cmath>
#include <functional>
#include <limits>

#include "amp/amp_functors.h"
#include "amp/scaler_kernels.h"
#include "scaler_test_util.h"

namespace mixtape::testing {
namespace {

using amp::GradScaler;
using amp::GradScalerOptions;
using amp::OptState;
using optim::SGD;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Scales loss = sum(p * c) and backpropagates, so p.grad = S * c.
void scaled_backward(GradScaler& scaler, const Tensor& p, const Tensor& c) { scaler.scale(sum(mul(p, c))).backward(); }

Tensor f32(std::vector<double> v) { return tensor(v, {static_cast<int64_t>(v.size())}, TensorOptions(DType::Float32)); }

// ---- 15: defaults and laziness ----
// get_scale() / get_growth_tracker() answer from host copies (so an iteration's only host sync is
// step() reading found_inf); they must equal the device-side tensors after every kind of update:
// growth, backoff, a NaN flag, unscale_ then step, update(new_scale) and load_state_dict.
TEST(GradScaler, HostCopiesOfScaleAndTrackerEqualTheTensorsAfterEveryUpdate) {
  GradScaler scaler(GradScalerOptions{.init_scale = 8.0, .growth_factor = 3.0, .backoff_factor = 0.25,
                                      .growth_interval = 2});
  Tensor p = f32({1.0, 2.0});
  p.requires_grad_(true);
  SGD opt({p}, optim::SGDOptions{.lr = 0.0});
  auto expect_same = [&](const std::string& when) {
    EXPECT_EQ(scaler.get_scale(), static_cast<double>(scaler.scale_tensor().item<float>())) << when;
    EXPECT_EQ(scaler.get_growth_tracker(), scaler.growth_tracker_tensor().item<int32_t>()) << when;
  };
  const std::vector<float> poison = {1.0f, 1.0f, kInf, 1.0f, kNaN, 1.0f, 1.0f, 1.0f, 1.0f};
  for (size_t i = 0; i < poison.size(); ++i) {
    opt.zero_grad();
    scaled_backward(scaler, p, f32({poison[i], 1.0}));
    if (i % 3 == 1) scaler.unscale_(opt);
    scaler.step(opt);
    scaler.update();
    expect_same("iteration " + std::to_string(i));
  }
  scaler.update(5.0);
  expect_same("update(5.0)");
  GradScaler other;
  other.load_state_dict(scaler.state_dict());
  other.scale(sum(p));
  EXPECT_EQ(other.get_scale(), 5.0);
  EXPECT_EQ(other.get_scale(), static_cast<double>(other.scale_tensor().item<float>()));
  EXPECT_EQ(other.get_growth_tracker(), other.growth_tracker_tensor().item<int32_t>());
}

TEST(GradScaler, B15_DefaultsAndLazyScale) {
  GradScaler scaler;
  EXPECT_TRUE(scaler.is_enabled());
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.get_growth_factor(), 2.0);
  EXPECT_EQ(scaler.get_backoff_factor(), 0.5);
  EXPECT_EQ(scaler.get_growth_interval(), 2000);
  EXPECT_EQ(scaler.get_growth_tracker(), 0);
  EXPECT_FALSE(scaler.scale_tensor().defined()) << "the scale must be created lazily, by the first scale()";
  scaler.scale(f32({1.0}));
  ASSERT_TRUE(scaler.scale_tensor().defined());
  EXPECT_EQ(scaler.scale_tensor().dtype(), DType::Float32);
  EXPECT_EQ(scaler.scale_tensor().dim(), 0);
  EXPECT_EQ(scaler.growth_tracker_tensor().dtype(), DType::Int32);
  EXPECT_EQ(scaler.get_scale(), 65536.0);

  expect_error([] { GradScaler s({.growth_factor = 1.0}); }, {"The growth factor must be > 1.0"});
  expect_error([] { GradScaler s({.growth_factor = 0.5}); }, {"The growth factor must be > 1.0"});
  expect_error([] { GradScaler s({.backoff_factor = 1.0}); }, {"The backoff factor must be < 1.0"});
  expect_error([] { GradScaler s({.backoff_factor = 0.0}); }, {"backoff factor", "> 0"});
  expect_error([] { GradScaler s({.growth_interval = 0}); }, {"growth interval must be >= 1"});
  expect_error([] { GradScaler s({.init_scale = 0.0}); }, {"init_scale"});
  expect_error([] { GradScaler s({.init_scale = 1e39}); }, {"init_scale"});  // inf as a float32
  expect_error([] { GradScaler s({.min_scale = -1.0}); }, {"min_scale"});
  EXPECT_EQ(GradScaler({.init_scale = 1024.0}).get_scale(), 1024.0);
}

// ---- 16: scale multiplies; disabled is a clean off switch ----
TEST(GradScaler, B16_ScaleMultipliesAndDisabledIsOff) {
  GradScaler scaler;
  Tensor loss = make_param({0.3}, {}, DType::Float32);
  Tensor scaled = scaler.scale(loss);
  EXPECT_EQ(scaled.item<float>(), 0.3f * 65536.0f);
  EXPECT_EQ(scaled.dim(), 0) << "a 0-d loss stays 0-d (backward() needs no gradient argument)";
  scaled.backward();
  EXPECT_EQ(loss.grad().item<float>(), 65536.0f) << "the multiply is recorded by autograd";
  std::vector<Tensor> outs = scaler.scale(std::vector<Tensor>{f32({1.5, -2.0}), f32({3.0})});
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[0].to_vector<float>(), (std::vector<float>{98304.0f, -131072.0f}));
  EXPECT_EQ(outs[1].item<float>(), 196608.0f);
  expect_error([&] { scaler.scale(std::vector<Tensor>{f32({1.0}), Tensor()}); }, {"outputs[1]", "undefined"});

  // Disabled: scale() returns its input, step() is a plain step, update() does nothing.
  GradScaler off({.enabled = false});
  EXPECT_FALSE(off.is_enabled());
  EXPECT_TRUE(off.scale(loss).is_same(loss));
  EXPECT_EQ(off.get_scale(), 1.0);
  EXPECT_TRUE(off.state_dict().empty());
  off.update();     // no error although nothing was scaled
  SGD off_opt({make_param({1.0}, {1})}, {.lr = 0.1});
  off.unscale_(off_opt);  // no-op, no error

  // A disabled run is bit-identical to a run without a scaler (SGD with momentum, 5 steps).
  auto run = [](bool with_disabled_scaler) {
    Generator gen(7);
    nn::Linear lin(4, 3, true, &gen);
    SGD opt(lin.parameters(), {.lr = 0.1, .momentum = 0.9});
    GradScaler s({.enabled = false});
    for (int i = 0; i < 5; ++i) {
      Tensor x = randn({8, 4}, {}, &gen), t = randn({8, 3}, {}, &gen);
      Tensor l = mse_loss(lin(x), t);
      opt.zero_grad();
      if (with_disabled_scaler) {
        s.scale(l).backward();
        EXPECT_TRUE(s.step(opt));
        s.update();
      } else {
        l.backward();
        opt.step();
      }
    }
    return std::vector<Tensor>{snapshot(lin.weight), snapshot(lin.bias),
                               snapshot(opt.state(lin.weight, "momentum_buffer"))};
  };
  auto a = run(true), b = run(false);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same_bytes(a[i], b[i])) << "tensor " << i;
}

// ---- 17: growth after 2000 clean updates ----
TEST(GradScaler, B17_GrowthAfter2000CleanUpdates) {
  GradScaler scaler;
  Tensor p = make_param({1.0, 2.0}, {2});
  SGD opt({p}, {.lr = 1e-3});
  const Tensor c = f32({0.25, -0.5});
  for (int i = 1; i <= 2000; ++i) {
    opt.zero_grad();
    scaled_backward(scaler, p, c);
    ASSERT_TRUE(scaler.step(opt)) << "iteration " << i;
    scaler.update();
    if (i == 1999) {
      EXPECT_EQ(scaler.get_scale(), 65536.0);
      EXPECT_EQ(scaler.get_growth_tracker(), 1999);
    }
  }
  EXPECT_EQ(scaler.get_scale(), 131072.0);
  EXPECT_EQ(scaler.get_growth_tracker(), 0);
}

// ---- 18: backoff and skip leave every parameter and state tensor bit-identical ----
struct Net18 {
  Tensor w16, b32;  // a 16-bit parameter (FP32 master in the optimizer) and an f32 one
};
void check_skip_leaves_everything(optim::Optimizer& opt, const Net18& n, float poison, const char* what) {
  GradScaler scaler({.growth_interval = 100});
  const Tensor c16 = f32({0.5, -0.75, 0.25, 0.125}).reshape({2, 2});  // S * c fits in fp16
  const Tensor c32 = f32({1.0, -3.0});
  auto iteration = [&](bool poisoned) {
    opt.zero_grad();
    Tensor loss = add(sum(mul(n.w16.to(DType::Float32), c16)), sum(mul(n.b32, c32)));
    scaler.scale(loss).backward();
    if (poisoned) {  // one element of the f32 grad (NaN: of the 16-bit grad) becomes inf/NaN
      Tensor g = std::isnan(poison) ? n.w16.grad() : n.b32.grad();
      set_element(g, 1, poison);
    }
    const bool stepped = scaler.step(opt);
    scaler.update();
    return stepped;
  };
  ASSERT_TRUE(iteration(false));
  ASSERT_TRUE(iteration(false));  // state exists and the tracker is 2
  ASSERT_EQ(scaler.get_growth_tracker(), 2);
  std::vector<std::pair<std::string, Tensor>> before;
  auto collect = [&]() {
    std::vector<std::pair<std::string, Tensor>> out;
    for (auto& [k, t] : opt.state_dict()) out.emplace_back(k, snapshot(t));
    out.emplace_back("w16", snapshot(n.w16));
    out.emplace_back("b32", snapshot(n.b32));
    return out;
  };
  before = collect();
  EXPECT_FALSE(iteration(true)) << what;
  auto after = collect();
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i)
    EXPECT_TRUE(same_bytes(after[i].second, before[i].second)) << what << ": " << before[i].first << " changed";
  EXPECT_EQ(scaler.get_scale(), 32768.0) << what;
  EXPECT_EQ(scaler.get_growth_tracker(), 0) << what;
  EXPECT_TRUE(iteration(false)) << what << ": the next clean iteration steps again";
}
Net18 make_net18() {
  Net18 n;
  n.w16 = make_param({0.5, 1.5, -2.0, 0.125}, {2, 2}, DType::Float16);
  n.b32 = make_param({0.1, -0.2}, {2});
  return n;
}
TEST(GradScaler, B18_BackoffAndSkipLeaveStateBitIdentical) {
  for (float poison : {kInf, -kInf, kNaN}) {
    {
      Net18 n = make_net18();
      SGD opt({n.w16, n.b32}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
      check_skip_leaves_everything(opt, n, poison, "SGD");
    }
    {
      Net18 n = make_net18();
      optim::Adam opt({n.w16, n.b32}, {.lr = 0.01, .amsgrad = true});
      check_skip_leaves_everything(opt, n, poison, "Adam");
    }
    {
      Net18 n = make_net18();
      optim::AdamW opt({n.w16, n.b32}, {.lr = 0.01});
      check_skip_leaves_everything(opt, n, poison, "AdamW");
    }
  }
}

// ---- 19: PyTorch's update-scale kernel vector (test_cuda.py test_grad_scaling_update_scale) ----
TEST(GradScaler, B19_UpdateScaleKernelVector) {
  Tensor scale = full({1}, 4.0, TensorOptions(DType::Float32));
  Tensor tracker = zeros({1}, TensorOptions(DType::Int32));
  Tensor clean = zeros({1}, TensorOptions(DType::Float32));
  Tensor inf = full({1}, 1.0, TensorOptions(DType::Float32));
  auto state = [&] { return std::make_pair(tracker.item<int32_t>(), scale.item<float>()); };
  amp::update_scale_(scale, tracker, clean, 2.0, 0.25, 2);
  EXPECT_EQ(state(), std::make_pair(1, 4.0f));
  amp::update_scale_(scale, tracker, clean, 2.0, 0.25, 2);
  EXPECT_EQ(state(), std::make_pair(0, 8.0f));
  amp::update_scale_(scale, tracker, inf, 2.0, 0.25, 2);
  EXPECT_EQ(state(), std::make_pair(0, 2.0f));
  // The shared functor gives the same sequence (what a CUDA kernel runs).
  float s = 4.0f;
  int32_t t = 0;
  amp::fn::update_scale(s, t, 0.0f, 2.0, 0.25, 2);
  amp::fn::update_scale(s, t, 0.0f, 2.0, 0.25, 2);
  amp::fn::update_scale(s, t, 1.0f, 2.0, 0.25, 2);
  EXPECT_EQ(std::make_pair(t, s), std::make_pair(0, 2.0f));
  // A NaN flag backs off too; the tracker resets from any value.
  amp::fn::update_scale(s, t = 1, kNaN, 2.0, 0.25, 2);
  EXPECT_EQ(std::make_pair(t, s), std::make_pair(0, 0.5f));
  // Errors name the op and what was expected.
  expect_error([&] { amp::update_scale_(scale, zeros({1}, TensorOptions(DType::Int64)), clean, 2.0, 0.5, 2); },
               {"_amp_update_scale_", "growth_tracker", "i32"});
}

// ---- 20: no growth to inf ----
TEST(GradScaler, B20_NoGrowthToInf) {
  const float big = std::ldexp(1.0f, 127);
  Tensor scale = full({}, static_cast<double>(big), TensorOptions(DType::Float32));
  Tensor tracker = full({}, 1, TensorOptions(DType::Int32));
  amp::update_scale_(scale, tracker, zeros({}, TensorOptions(DType::Float32)), 2.0, 0.5, 2);  // growth due now
  EXPECT_EQ(scale.item<float>(), big) << "2^128 is inf in float32: the scale must stay";
  EXPECT_EQ(tracker.item<int32_t>(), 0);
  // Through the scaler: an interval of 1 makes every clean update a growth.
  GradScaler scaler({.init_scale = static_cast<double>(big), .growth_interval = 1});
  Tensor p = make_param({1.0}, {1});
  SGD opt({p}, {.lr = 0.0});
  scaled_backward(scaler, p, f32({1e-30}));
  ASSERT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), static_cast<double>(big));
  EXPECT_TRUE(std::isfinite(scaler.get_scale()));
}

// ---- 21: unscale arithmetic and detection, PyTorch's "perfect storm" style ----
TEST(GradScaler, B21_UnscaleIsExactInverseAndFindsEveryNonFinite) {
  // S = 3, not a power of two, so the inverse scale rounds (docs/AMP.md#the-inverse-scale): every
  // unscaled gradient is compared with host arithmetic bit for bit, for f32 and f64 grads.
  GradScaler scaler;
  Generator gen(21);
  std::vector<Tensor> params;
  for (int64_t n : {7, 1, 300, 33, 5}) params.push_back(randn({n}, {}, &gen).requires_grad_(true));
  params.push_back(randn({4, 3}, TensorOptions(DType::Float64), &gen).requires_grad_(true));
  Tensor no_grad_param = make_param({1.0}, {1});
  std::vector<Tensor> all = params;
  all.push_back(no_grad_param);
  SGD opt(all, {.lr = 0.1});
  scaler.scale(f32({1.0}));
  scaler.update(3.0);
  const float inv = static_cast<float>(1.0 / 3.0);
  auto set_grads = [&](Generator& g) {
    std::vector<Tensor> grads;
    for (const Tensor& p : params) {
      Tensor gr = mul(randn(p.sizes(), TensorOptions(p.dtype()), &g), 1000.0);
      p.set_grad(gr);
      grads.push_back(snapshot(gr));
    }
    return grads;
  };
  Generator g1(5);
  std::vector<Tensor> raw = set_grads(g1);
  scaler.unscale_(opt);
  for (size_t k = 0; k < params.size(); ++k) {
    const Tensor got = params[k].grad();
    for (int64_t i = 0; i < got.numel(); ++i) {
      if (got.dtype() == DType::Float32) {
        const float want = static_cast<float>(get_element(raw[k], i)) * inv;
        ASSERT_EQ(bits32(static_cast<float>(get_element(got, i))), bits32(want)) << "tensor " << k << " element " << i;
      } else {
        const double want = get_element(raw[k], i) * static_cast<double>(inv);
        ASSERT_EQ(get_element(got, i), want) << "f64 tensor " << k << " element " << i;
      }
    }
  }
  EXPECT_FALSE(no_grad_param.grad().defined()) << "a parameter without a gradient is skipped";
  EXPECT_TRUE(scaler.step(opt));
  scaler.update(3.0);

  // One non-finite value anywhere -- first element, middle, the last element of the last
  // tensor -- must be found.
  struct Spot {
    size_t tensor;
    int64_t index;
  };
  for (float bad : {kInf, -kInf, kNaN}) {
    for (Spot s : {Spot{0, 0}, Spot{2, 150}, Spot{4, 4}, Spot{5, 11}}) {
      opt.zero_grad();
      Generator g2(9);
      set_grads(g2);
      Tensor g = params[s.tensor].grad();
      set_element(g, s.index, bad);
      std::vector<Tensor> before;
      for (const Tensor& p : params) before.push_back(snapshot(p));
      EXPECT_FALSE(scaler.step(opt)) << "value " << bad << " at tensor " << s.tensor << " index " << s.index;
      for (size_t k = 0; k < params.size(); ++k) EXPECT_TRUE(same_bytes(params[k], before[k]));
      scaler.update(3.0);  // keep S = 3 for the next case
    }
  }
}

TEST(GradScaler, B21_FusedKernelDirectlyAndInOneDispatch) {
  // Mixed dtypes in one call; found_inf only ever goes 0 -> 1; 16-bit grads computed in float and
  // rounded once; check-only grads are not written.
  Tensor found = zeros({}, TensorOptions(DType::Float32));
  Tensor inv = full({}, 0.25, TensorOptions(DType::Float32));
  Tensor a = f32({4.0, -8.0});
  Tensor b = tensor({2.0}, TensorOptions(DType::Float64));
  Tensor h = tensor({6.0, 1.0}, TensorOptions(DType::Float16));
  Tensor checked = tensor({40000.0}, TensorOptions(DType::Float16));
  amp::non_finite_check_and_unscale_({a, b, h, Tensor(), checked}, found, inv, 4);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(b.item<double>(), 0.5);
  EXPECT_EQ(h.to_vector<float>(), (std::vector<float>{1.5f, 0.25f}));
  EXPECT_EQ(checked.item<float>(), 40000.0f) << "beyond unscale_count: checked, not written";
  EXPECT_EQ(found.item<float>(), 0.0f);
  Tensor nan16 = tensor({1.0, 0.0}, TensorOptions(DType::Float16));
  set_element(nan16, 1, kNaN);
  amp::non_finite_check_and_unscale_({a, nan16}, found, inv, 1);
  EXPECT_EQ(found.item<float>(), 1.0f) << "a NaN in a check-only fp16 grad";
  amp::non_finite_check_and_unscale_({a}, found, inv);
  EXPECT_EQ(found.item<float>(), 1.0f) << "found_inf is never reset by the kernel";
  // A non-contiguous grad is unscaled through a copy written back.
  Tensor m = f32({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}).reshape({2, 3});
  Tensor mt = m.t();
  amp::non_finite_check_and_unscale_({mt}, zeros({}, TensorOptions(DType::Float32)), inv);
  EXPECT_EQ(m.to_vector<float>(), (std::vector<float>{0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f}));

  // The scaler unscales all of an optimizer's gradients with ONE dispatch of the fused op.
  Generator gen(3);
  models::MLP mlp(6, {16, 16, 16}, 4);  // 8 parameters
  SGD opt(mlp.parameters(), {.lr = 0.01});
  GradScaler scaler;
  scaler.scale(mse_loss(mlp(randn({5, 6}, {}, &gen)), randn({5, 4}, {}, &gen))).backward();
  std::string trace;
  {
    ScopedTrace t(static_cast<uint32_t>(TraceKind::Dispatch), &trace);
    scaler.unscale_(opt);
  }
  size_t calls = 0;
  const std::string line = "_amp_foreach_non_finite_check_and_unscale_  Backend";
  for (size_t pos = 0; (pos = trace.find(line, pos)) != std::string::npos; ++pos) ++calls;
  EXPECT_EQ(calls, 1u) << trace;
}

// ---- 22: explicit unscale_ then step: no second unscale, still skips ----
class RecordingSGD : public SGD {
 public:
  using SGD::SGD;
  void step() override {
    seen.clear();
    for (const Tensor& p : parameters()) seen.push_back(snapshot(p.grad()));
    SGD::step();
  }
  std::vector<Tensor> seen;  // the grads step() ran with
};
TEST(GradScaler, B22_ExplicitUnscaleThenStepDoesNotUnscaleAgain) {
  GradScaler scaler;
  Tensor p = make_param({1.0, -1.0, 0.5}, {3});
  RecordingSGD opt(std::vector<Tensor>{p}, optim::SGDOptions{.lr = 0.5});
  scaled_backward(scaler, p, f32({0.125, 3.0, -7.0}));
  scaler.unscale_(opt);
  EXPECT_EQ(scaler.stage(opt), OptState::UNSCALED);
  const Tensor after_unscale = snapshot(p.grad());
  EXPECT_EQ(after_unscale.to_vector<float>(), (std::vector<float>{0.125f, 3.0f, -7.0f}));
  EXPECT_TRUE(scaler.step(opt));
  ASSERT_EQ(opt.seen.size(), 1u);
  EXPECT_TRUE(same_bytes(opt.seen[0], after_unscale)) << "step() must not unscale a second time";
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{1.0f - 0.0625f, -2.5f, 4.0f}));
  scaler.update();

  // An inf seen by the explicit unscale_ still makes step() skip.
  opt.zero_grad();
  opt.seen.clear();
  scaled_backward(scaler, p, f32({1.0, kInf, 1.0}));
  scaler.unscale_(opt);
  const Tensor before = snapshot(p);
  EXPECT_FALSE(scaler.step(opt));
  EXPECT_TRUE(opt.seen.empty()) << "the optimizer's step() must not run";
  EXPECT_TRUE(same_bytes(p, before));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0);
}

// ---- 23: misuse errors ----
TEST(GradScaler, B23_MisuseErrors) {
  Tensor p = make_param({1.0}, {1});
  SGD opt({p}, {.lr = 0.1});
  {
    GradScaler fresh;  // nothing scaled yet
    for (auto [name, fn] : std::vector<std::pair<const char*, std::function<void()>>>{
             {"unscale_", [&] { fresh.unscale_(opt); }},
             {"step", [&] { fresh.step(opt); }},
             {"update", [&] { fresh.update(); }}}) {
      const std::string msg = error_of(fn);
      EXPECT_NE(msg.find(std::string("Attempted ") + name + " but _scale is None"), std::string::npos) << msg;
      EXPECT_NE(msg.find("did not use scaler.scale(loss or outputs) earlier in the iteration"), std::string::npos)
          << msg;
    }
  }
  GradScaler scaler;
  scaled_backward(scaler, p, f32({1.0}));
  scaler.unscale_(opt);
  expect_error([&] { scaler.unscale_(opt); },
               {"unscale_() has already been called on this optimizer since the last update()", "SGD"});
  scaler.step(opt);
  expect_error([&] { scaler.unscale_(opt); }, {"unscale_() is being called after step()"});
  expect_error([&] { scaler.step(opt); }, {"step() has already been called since the last update()"});
  scaler.update();
  expect_error([&] { scaler.update(); }, {"No inf checks were recorded prior to update"});
  opt.zero_grad();  // no gradient at all
  expect_error([&] { scaler.step(opt); }, {"No inf checks were recorded for this optimizer"});
  expect_error([&] { scaler.update(Tensor(f32({1.0, 2.0}))); }, {"new_scale should be a float or a 1-element"});
  expect_error([&] { scaler.update(-1.0); }, {"new_scale"});
}

// ---- 24: update() resets the stages; forgetting it is the LVSM bug ----
TEST(GradScaler, B24_UpdateResetsStages) {
  Tensor p = make_param({1.0}, {1});
  SGD opt({p}, {.lr = 0.1});
  GradScaler scaler;
  for (int it = 0; it < 3; ++it) {
    opt.zero_grad();
    scaled_backward(scaler, p, f32({1.0}));
    EXPECT_EQ(scaler.stage(opt), OptState::READY);
    scaler.unscale_(opt);
    EXPECT_EQ(scaler.stage(opt), OptState::UNSCALED);
    scaler.step(opt);
    EXPECT_EQ(scaler.stage(opt), OptState::STEPPED);
    scaler.update();
    EXPECT_EQ(scaler.stage(opt), OptState::READY);
  }
  // A "skip this batch" branch that also skipped update(): the next iteration's unscale_ fails.
  opt.zero_grad();
  scaled_backward(scaler, p, f32({1.0}));
  scaler.step(opt);
  opt.zero_grad();
  scaled_backward(scaler, p, f32({1.0}));
  expect_error([&] { scaler.unscale_(opt); }, {"unscale_() is being called after step()"});
}

// ---- 25: FP16 grads without an FP32 master are refused; with masters they work ----
TEST(GradScaler, B25_RefusesFp16GradsWithoutMaster) {
  GradScaler scaler;
  scaler.scale(f32({1.0}));
  // An f32 parameter carrying an fp16 .grad: nowhere to put the unscaled FP32 value.
  Tensor p = make_param({1.0, 2.0}, {2});
  SGD opt({p}, {.lr = 0.1});
  p.set_grad(tensor({1.0, 2.0}, TensorOptions(DType::Float16)));
  expect_error([&] { scaler.unscale_(opt); }, {"Attempting to unscale FP16 gradients.", "Float16", "Float32"});
  expect_error([&] { scaler.step(opt); }, {"Attempting to unscale FP16 gradients."});
  EXPECT_EQ(scaler.stage(opt), OptState::READY) << "a refused unscale changes nothing";
  EXPECT_EQ(bits16(p.grad(), 1), 0x4000) << "the fp16 grad is untouched";

  // An fp16 parameter: the optimizer holds an FP32 master and asks for FP32 grads, so the
  // backward's fp16 gradient arrives widened, unscale_ unscales it in place, step() updates the
  // master and writes RNE(master) into the model. (This path is the 16-bit master path proper:
  // a test that went through the f32 parameter's path would not see a missing widening.)
  Tensor p16 = make_param({1.0, 2.0}, {2}, DType::Float16);
  SGD opt16({p16}, {.lr = 0.5});
  ASSERT_TRUE(opt16.has_master(p16));
  // (An f32 loss, as under autocast: an fp16 loss would make its own gradient S = 65536 inf.)
  scaler.scale(sum(mul(p16, f32({0.25, -0.5})))).backward();
  ASSERT_EQ(p16.grad().dtype(), DType::Float32);
  EXPECT_EQ(p16.grad().to_vector<float>(), (std::vector<float>{16384.0f, -32768.0f}));
  scaler.unscale_(opt16);
  EXPECT_EQ(p16.grad().to_vector<float>(), (std::vector<float>{0.25f, -0.5f}));
  EXPECT_TRUE(scaler.step(opt16));
  EXPECT_EQ(opt16.master(p16).to_vector<float>(), (std::vector<float>{0.875f, 2.25f}));
  EXPECT_EQ(p16.to_vector<float>(), (std::vector<float>{0.875f, 2.25f}));
  EXPECT_EQ(p16.dtype(), DType::Float16);
  scaler.update();
  // bf16 grads without a master are unscaled in place, as PyTorch does (only FP16 is refused).
  p.set_grad(tensor({65536.0, 2.0}, TensorOptions(DType::BFloat16)));
  scaler.unscale_(opt);
  EXPECT_EQ(p.grad().to_vector<float>(), (std::vector<float>{1.0f, 2.0f / 65536.0f}));
}

// ---- 30: a skipped step is observable and does not advance the LR schedule ----
TEST(GradScaler, B30_SkippedStepDoesNotAdvanceSchedule) {
  Tensor p = make_param({1.0}, {1});
  SGD opt({p}, {.lr = 0.1});
  optim::StepLR sched(opt, /*step_size=*/1, /*gamma=*/0.5);
  GradScaler scaler;
  auto iteration = [&](float g) {
    opt.zero_grad();
    scaled_backward(scaler, p, f32({g}));
    const bool stepped = scaler.step(opt);
    sched.step(stepped);
    scaler.update();
    return stepped;
  };
  EXPECT_FALSE(iteration(kInf));  // step 1 overflows
  EXPECT_EQ(sched.last_epoch(), 0);
  EXPECT_EQ(opt.param_groups()[0].lr(), 0.1);
  EXPECT_TRUE(iteration(1.0));
  EXPECT_EQ(sched.last_epoch(), 1);
  EXPECT_EQ(opt.param_groups()[0].lr(), 0.05);
  // Control: a scheduler stepped unconditionally would have advanced twice.
  Tensor q = make_param({1.0}, {1});
  SGD opt2({q}, {.lr = 0.1});
  optim::StepLR naive(opt2, 1, 0.5);
  naive.step();
  naive.step();
  EXPECT_EQ(naive.last_epoch(), 2);
}

// ---- 31: state_dict round trip, empty/corrupt dicts refused, update(new_scale) ----
TEST(GradScaler, B31_StateDictRoundTrip) {
  GradScalerOptions o{.init_scale = 1024.0, .growth_factor = 4.0, .backoff_factor = 0.25, .growth_interval = 3};
  GradScaler a(o);
  Tensor p = make_param({1.0}, {1});
  SGD opt({p}, {.lr = 0.0});
  auto drive = [&](GradScaler& s, bool inf) {
    opt.zero_grad();
    scaled_backward(s, p, f32({inf ? kInf : 1.0f}));
    s.step(opt);
    s.update();
    return std::make_pair(s.get_scale(), s.get_growth_tracker());
  };
  drive(a, false);
  drive(a, true);
  drive(a, false);
  drive(a, false);  // scale 256, tracker 2
  StateDict sd = a.state_dict();
  std::vector<std::string> keys;
  for (auto& [k, t] : sd) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"_growth_tracker", "backoff_factor", "growth_factor", "growth_interval",
                                            "scale"}));
  EXPECT_EQ(sd["scale"].item<float>(), 256.0f);
  EXPECT_EQ(sd["_growth_tracker"].item<int32_t>(), 2);
  EXPECT_EQ(sd["growth_factor"].item<double>(), 4.0);
  EXPECT_EQ(sd["backoff_factor"].item<double>(), 0.25);
  EXPECT_EQ(sd["growth_interval"].item<int64_t>(), 3);

  GradScaler b;  // defaults: everything must come from the dict
  b.load_state_dict(sd);
  EXPECT_EQ(b.get_scale(), 256.0);
  EXPECT_EQ(b.get_growth_tracker(), 2);
  const bool pattern[] = {false, false, true, false, false, false, false, true, true, false};
  for (bool inf : pattern) EXPECT_EQ(drive(b, inf), drive(a, inf));
  // A non-trivial trajectory: 256 -> 1024 (growth) -> 256 -> 1024 -> 256 -> 64, tracker 1.
  EXPECT_EQ(b.get_scale(), 64.0);
  EXPECT_EQ(b.get_growth_tracker(), 1);

  // Loading into a scaler whose scale already exists overwrites it.
  GradScaler c;
  drive(c, false);
  c.load_state_dict(a.state_dict());
  EXPECT_EQ(c.get_scale(), a.get_scale());

  // update(new_scale): exact, tracker untouched.
  drive(a, false);
  const int64_t tracker = a.get_growth_tracker();
  ASSERT_NE(tracker, 0);
  a.scale(f32({1.0}));
  a.update(3.0);
  EXPECT_EQ(a.get_scale(), 3.0);
  EXPECT_EQ(a.get_growth_tracker(), tracker);
  a.update(Tensor(full({}, 0.375, TensorOptions(DType::Float32))));
  EXPECT_EQ(a.get_scale(), 0.375);

  // Bad input names the key and leaves the scaler unchanged.
  GradScaler d;
  expect_error([&] { d.load_state_dict({}); }, {"The source state dict is empty", "disabled instance of GradScaler"});
  auto corrupt = [&](const char* key, Tensor value) {
    StateDict bad = sd;
    if (value.defined())
      bad[key] = value;
    else
      bad.erase(key);
    return bad;
  };
  expect_error([&] { d.load_state_dict(corrupt("scale", Tensor())); }, {"missing key 'scale'"});
  expect_error([&] { d.load_state_dict(corrupt("_growth_tracker", full({}, 1, TensorOptions(DType::Int64)))); },
               {"'_growth_tracker'", "Int32", "i64"});
  expect_error([&] { d.load_state_dict(corrupt("scale", full({}, 1.0, TensorOptions(DType::Float64)))); },
               {"'scale'", "Float32"});
  expect_error([&] { d.load_state_dict(corrupt("growth_factor", full({}, 0.5, TensorOptions(DType::Float64)))); },
               {"'growth_factor'", "> 1.0"});
  expect_error([&] { d.load_state_dict(corrupt("_growth_tracker", full({}, -1, TensorOptions(DType::Int32)))); },
               {"'_growth_tracker'", ">= 0"});
  expect_error([&] { d.load_state_dict(corrupt("scale", full({}, kNaN, TensorOptions(DType::Float32)))); },
               {"'scale'", "finite"});
  expect_error([&] { d.load_state_dict(corrupt("extra", full({}, 1.0, TensorOptions(DType::Float32)))); },
               {"unexpected key 'extra'"});
  EXPECT_EQ(d.get_scale(), 65536.0);
  EXPECT_EQ(d.get_growth_interval(), 2000);
  // A disabled scaler ignores load_state_dict, as PyTorch's.
  GradScaler off({.enabled = false});
  off.load_state_dict({});
  EXPECT_EQ(off.get_scale(), 1.0);
}

}  // namespace
}  // namespace mixtape::testing
