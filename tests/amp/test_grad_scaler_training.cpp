// tests/amp/test_grad_scaler_training.cpp — the GradScaler inside small real training steps
// (models::MLP, mse_loss, cross_entropy): behaviours 26 (gradient accumulation, also of a 16-bit
// model with FP32 masters), 27 (clip after unscale), 28 (multiple optimizers), 29 (multiple losses)
// and the scaling part of 34 (FP16 underflow/overflow numbers). References are runs without a
// scaler.
//
// Why many comparisons here are bit-exact: S is a power of two, and multiplying by a power of two
// commutes with IEEE rounding (barring overflow/underflow), so backward of S * loss yields exactly S
// times the gradients of loss, and the inverse scale, exactly 2^-k, recovers them exactly
// (docs/AMP.md#the-inverse-scale). A scaled FP32 run therefore equals the unscaled FP32 run bit for
// bit; only where reductions run in a different order (accumulation over micro-batches) is a
// tolerance needed, derived at that test.
#include <cmath>
#include <limits>

#include "scaler_test_util.h"

namespace mixtape::testing {
namespace {

using amp::GradScaler;
using optim::SGD;

constexpr float kInf = std::numeric_limits<float>::infinity();

void copy_params(const models::MLP& dst, const models::MLP& src) {
  autograd::NoGradGuard no_grad;
  auto d = dst.parameters(), s = src.parameters();
  ASSERT_EQ(d.size(), s.size());
  for (size_t i = 0; i < d.size(); ++i) d[i].copy_(s[i]);
}
std::vector<Tensor> snapshots(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(snapshot(t));
  return out;
}
// Dyadic values k / denom with |k| <= range: every product and sum of a few of them is exact in f64.
Tensor dyadic(const IntList& shape, int range, int denom, Generator& gen, DType dt) {
  Tensor u = rand(shape, TensorOptions(DType::Float64), &gen);
  Tensor t = Tensor::empty(shape, TensorOptions(DType::Float64));
  for (int64_t i = 0; i < u.numel(); ++i)
    set_element(t, i, std::round((get_element(u, i) * 2.0 - 1.0) * range) / denom);
  return t.to(dt);
}
void set_dyadic_params(const models::MLP& m, Generator& gen) {
  autograd::NoGradGuard no_grad;
  for (Tensor p : m.parameters()) p.copy_(dyadic(p.sizes(), 8, 8, gen, p.dtype()));
}
double max_abs_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(get_element(a, i) - get_element(b, i)));
  return m;
}

// ---- 26: gradient accumulation ----
// 4 micro-batches of 4 samples, loss_k / 4 each, scaled and backpropagated; one step + update.
// mse_loss averages over 4 * 2 = 8 elements per micro-batch and 32 over the whole batch, so
// mean_k / 4 and the full mean divide by the same power of two.
struct AccumulationRun {
  std::vector<Tensor> params;
  bool stepped;
  double scale_after;
  int64_t tracker_after;
};
AccumulationRun accumulate(DType dt, bool dyadic_data, int poisoned_micro_batch, bool accumulate_micro_batches) {
  Generator gen(26);
  models::MLP model(4, {6}, 2);
  model.to(dt);
  Tensor x, t;
  if (dyadic_data) {
    set_dyadic_params(model, gen);
    x = dyadic({16, 4}, 8, 4, gen, dt);
    t = dyadic({16, 2}, 8, 4, gen, dt);
  } else {
    {
      autograd::NoGradGuard no_grad;
      for (Tensor p : model.parameters()) p.copy_(randn(p.sizes(), TensorOptions(DType::Float32), &gen));
    }
    x = randn({16, 4}, TensorOptions(DType::Float32), &gen).to(dt);
    t = randn({16, 2}, TensorOptions(DType::Float32), &gen).to(dt);
  }
  if (poisoned_micro_batch >= 0) set_element(x, (poisoned_micro_batch * 4) * 4 + 1, kInf);  // row 4k, col 1
  SGD opt(model.parameters(), {.lr = 0.125});
  AccumulationRun r;
  if (!accumulate_micro_batches) {  // the reference: one step on the concatenated batch, no scaler
    mse_loss(model(x), t).backward();
    opt.step();
    r.params = snapshots(model.parameters());
    r.stepped = true;
    return r;
  }
  GradScaler scaler;
  for (int k = 0; k < 4; ++k) {
    Tensor loss = div(mse_loss(model(x.narrow(0, 4 * k, 4)), t.narrow(0, 4 * k, 4)), 4.0);
    EXPECT_EQ(scaler.get_scale(), 65536.0) << "the scale must stay fixed across micro-batches";
    Tensor scaled = scaler.scale(loss);
    if (!std::isnan(get_element(loss, 0))) {
      EXPECT_EQ(get_element(scaled, 0), get_element(loss, 0) * 65536.0);
    }
    scaled.backward();  // grads accumulate, still scaled
  }
  r.stepped = scaler.step(opt);
  scaler.update();
  r.params = snapshots(model.parameters());
  r.scale_after = scaler.get_scale();
  r.tracker_after = scaler.get_growth_tracker();
  return r;
}

TEST(GradScaler, B26_GradientAccumulationEqualsOneBigBatch) {
  // FP64 with dyadic data: every operation is exact, so summation order cannot matter and the
  // accumulated step must equal the big-batch step bit for bit.
  AccumulationRun acc = accumulate(DType::Float64, true, -1, true);
  AccumulationRun big = accumulate(DType::Float64, true, -1, false);
  ASSERT_TRUE(acc.stepped);
  EXPECT_EQ(acc.tracker_after, 1) << "one update() per effective batch, not per micro-batch";
  EXPECT_EQ(acc.scale_after, 65536.0);
  for (size_t i = 0; i < acc.params.size(); ++i) EXPECT_TRUE(same_bytes(acc.params[i], big.params[i])) << "param " << i;

  // FP32, random data: the weight gradients are sums over 16 samples taken in another order
  // (4 partial sums of 4, vs one of 16). Each sum's error is at most ~16 * 2^-24 of the sum of
  // |terms| (~16 terms of magnitude <~ 10 with randn inputs and weights), so the gradients agree
  // to ~1e-4 absolute and the parameters, after lr = 0.125, to ~1.3e-5: tolerance 5e-5.
  AccumulationRun acc32 = accumulate(DType::Float32, false, -1, true);
  AccumulationRun big32 = accumulate(DType::Float32, false, -1, false);
  ASSERT_TRUE(acc32.stepped);
  for (size_t i = 0; i < acc32.params.size(); ++i) {
    EXPECT_LT(max_abs_diff(acc32.params[i], big32.params[i]), 5e-5) << "param " << i;
  }
  // The test can fail: the parameters did move by much more than the tolerance.
  Generator gen(26);
  models::MLP fresh(4, {6}, 2);
  {
    autograd::NoGradGuard no_grad;
    for (Tensor p : fresh.parameters()) p.copy_(randn(p.sizes(), TensorOptions(DType::Float32), &gen));
  }
  EXPECT_GT(max_abs_diff(acc32.params[0], fresh.parameters()[0]), 1e-3);
}

TEST(GradScaler, B26_InfInOneMicroBatchSkipsTheWholeStepOnce) {
  AccumulationRun r = accumulate(DType::Float32, false, /*poisoned_micro_batch=*/1, true);
  EXPECT_FALSE(r.stepped);
  EXPECT_EQ(r.scale_after, 32768.0) << "halved once for the effective batch, not once per micro-batch";
  EXPECT_EQ(r.tracker_after, 0);
  // The parameters are still the initial ones (accumulate() draws them from seed 26 like this).
  Generator gen(26);
  models::MLP init(4, {6}, 2);
  {
    autograd::NoGradGuard no_grad;
    for (Tensor p : init.parameters()) p.copy_(randn(p.sizes(), TensorOptions(DType::Float32), &gen));
  }
  for (size_t i = 0; i < r.params.size(); ++i) EXPECT_TRUE(same_bytes(r.params[i], init.parameters()[i])) << i;
}

// The 16-bit master path: model.to(Float16/BFloat16), so every micro-batch's gradient is computed
// in 16 bits. The accumulated step must use the FP32 sum of those 16-bit gradients (the
// optimizer's grad_dtype), unscaled once: checked bit for bit against a reference that runs each
// micro-batch alone on a copy of the model and adds the widened gradients in FP32. A 16-bit
// accumulator (the bug) loses the low bits of every partial sum and fails this.
TEST(GradScaler, B26_SixteenBitModelAccumulatesMicroBatchesInFp32) {
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    Generator gen(260);
    models::MLP model(4, {6}, 2), probe(4, {6}, 2);
    {
      autograd::NoGradGuard no_grad;
      for (Tensor p : model.parameters()) p.copy_(randn(p.sizes(), TensorOptions(DType::Float32), &gen));
    }
    model.to(dt);
    probe.to(dt);
    const Tensor x = randn({16, 4}, TensorOptions(DType::Float32), &gen).to(dt);
    const Tensor t = randn({16, 2}, TensorOptions(DType::Float32), &gen);
    SGD opt(model.parameters(), {.lr = 0.125});
    const auto params = model.parameters(), probes = probe.parameters();
    std::vector<Tensor> masters_before;
    for (const Tensor& p : params) masters_before.push_back(snapshot(opt.master(p)));
    // S = 1024 keeps the 16-bit scaled gradients finite.
    GradScaler scaler({.init_scale = 1024.0});
    std::vector<Tensor> want(params.size());
    for (int k = 0; k < 4; ++k) {
      const Tensor xb = x.narrow(0, 4 * k, 4), tb = t.narrow(0, 4 * k, 4);
      scaler.scale(div(mse_loss(model(xb).to(DType::Float32), tb), 4.0)).backward();
      copy_params(probe, model);
      for (const Tensor& q : probes) q.set_grad(Tensor());
      mul(div(mse_loss(probe(xb).to(DType::Float32), tb), 4.0), 1024.0).backward();  // 16-bit grads
      for (size_t i = 0; i < probes.size(); ++i) {
        ASSERT_EQ(probes[i].grad().dtype(), dt) << "the probe has no optimizer: plain 16-bit gradients";
        const Tensor g32 = probes[i].grad().to(DType::Float32);
        want[i] = k == 0 ? g32 : add(want[i], g32);
      }
    }
    for (size_t i = 0; i < params.size(); ++i) {
      ASSERT_EQ(params[i].grad().dtype(), DType::Float32) << dtype_name(dt) << " param " << i;
      EXPECT_TRUE(same_bytes(params[i].grad(), want[i])) << dtype_name(dt) << " param " << i;
    }
    ASSERT_TRUE(scaler.step(opt));
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor m = opt.master(params[i]);
      for (int64_t j = 0; j < m.numel(); ++j) {
        const float g = static_cast<float>(get_element(want[i], j)) * (1.0f / 1024.0f);
        const float expect = std::fma(-0.125f, g, static_cast<float>(get_element(masters_before[i], j)));
        ASSERT_EQ(bits32(static_cast<float>(get_element(m, j))), bits32(expect))
            << dtype_name(dt) << " param " << i << " element " << j;
      }
    }
  }
}

// ---- 27: clip after unscale ----
TEST(GradScaler, B27_ClipAfterUnscaleMatchesFp32Clipping) {
  Generator gen(27);
  models::MLP ref(5, {8}, 3), amp_model(5, {8}, 3), bad(5, {8}, 3);
  copy_params(amp_model, ref);
  copy_params(bad, ref);
  const Tensor x = mul(randn({6, 5}, {}, &gen), 4.0), t = mul(randn({6, 3}, {}, &gen), 4.0);  // big grads
  const auto initial = snapshots(ref.parameters());

  SGD opt_ref(ref.parameters(), {.lr = 0.1});
  mse_loss(ref(x), t).backward();
  const double norm_ref = optim::clip_grad_norm_(ref.parameters(), 1.0);
  ASSERT_GT(norm_ref, 2.0) << "the true gradient norm must exceed max_norm, or clipping does nothing";
  opt_ref.step();

  SGD opt(amp_model.parameters(), {.lr = 0.1});
  GradScaler scaler;
  scaler.scale(mse_loss(amp_model(x), t)).backward();
  scaler.unscale_(opt);
  const double norm = optim::clip_grad_norm_(amp_model.parameters(), 1.0);
  EXPECT_EQ(norm, norm_ref) << "the unscaled gradients are the true ones, bit for bit";
  double clipped_sq = 0;
  for (const Tensor& p : amp_model.parameters())
    for (int64_t i = 0; i < p.numel(); ++i) clipped_sq += std::pow(get_element(p.grad(), i), 2);
  EXPECT_LE(std::sqrt(clipped_sq), 1.0 + 1e-6);
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  for (size_t i = 0; i < initial.size(); ++i)
    EXPECT_TRUE(same_bytes(amp_model.parameters()[i], ref.parameters()[i])) << "param " << i;

  // The bug (Lightning#9330): clipping the still-scaled gradients. Their norm is S times the true
  // one, so the clip coefficient is S times too small and the update ~S times too small.
  SGD opt_bad(bad.parameters(), {.lr = 0.1});
  GradScaler scaler_bad;
  scaler_bad.scale(mse_loss(bad(x), t)).backward();
  const double scaled_norm = optim::clip_grad_norm_(bad.parameters(), 1.0);
  EXPECT_NEAR(scaled_norm / norm_ref, 65536.0, 65536.0 * 1e-6);
  scaler_bad.step(opt_bad);
  double good_sq = 0, bad_sq = 0;
  for (size_t i = 0; i < initial.size(); ++i) {
    for (int64_t j = 0; j < initial[i].numel(); ++j) {
      good_sq += std::pow(get_element(ref.parameters()[i], j) - get_element(initial[i], j), 2);
      bad_sq += std::pow(get_element(bad.parameters()[i], j) - get_element(initial[i], j), 2);
    }
  }
  const double ratio = std::sqrt(good_sq / bad_sq);
  EXPECT_GT(ratio, 65536.0 * 0.9);
  EXPECT_LT(ratio, 65536.0 * 1.1);
}

TEST(GradScaler, B27_ClipAfterUnscaleOfAnFp16Model) {
  // PyTorch's documented pattern on a 16-bit model: unscale_, then clip model.parameters(). Their
  // grads are FP32 (the optimizer's grad_dtype) and unscale_ unscaled them in place, so the clip
  // sees true gradients; clipping the still-scaled values would report S times the norm.
  Generator gen(270);
  models::MLP model(5, {8}, 3);
  model.to(DType::Float16);
  SGD opt(model.parameters(), {.lr = 0.1});
  // S = 1024: dL/dy (up to ~1.5 here) times S must fit in fp16 where the f32 loss's gradient is
  // cast back to the model's fp16 output.
  GradScaler scaler({.init_scale = 1024.0});
  const Tensor x = randn({6, 5}, {}, &gen).to(DType::Float16), t = mul(randn({6, 3}, {}, &gen), 4.0);
  scaler.scale(mse_loss(model(x).to(DType::Float32), t)).backward();
  const auto params = model.parameters();
  double scaled_sq = 0;
  for (const Tensor& p : params)
    for (int64_t i = 0; i < p.numel(); ++i) scaled_sq += std::pow(get_element(p.grad(), i), 2);
  scaler.unscale_(opt);
  const double norm = optim::clip_grad_norm_(params, 1.0);
  ASSERT_GT(norm, 1.0);
  EXPECT_NEAR(norm, std::sqrt(scaled_sq) / 1024.0, 1e-9 * norm) << "the true norm, not S times it";
  std::vector<Tensor> masters_before, clipped;
  double sq = 0;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    ASSERT_EQ(g.dtype(), DType::Float32);
    masters_before.push_back(snapshot(opt.master(p)));
    clipped.push_back(snapshot(g));
    for (int64_t i = 0; i < g.numel(); ++i) sq += std::pow(get_element(g, i), 2);
  }
  EXPECT_LE(std::sqrt(sq), 1.0 + 1e-6);
  EXPECT_TRUE(scaler.step(opt));
  // The step used the clipped grads: master = fma(-lr, g, master), model = RNE(master).
  for (size_t k = 0; k < params.size(); ++k) {
    const Tensor m = opt.master(params[k]);
    for (int64_t i = 0; i < m.numel(); ++i) {
      const float want = std::fma(static_cast<float>(-0.1), static_cast<float>(get_element(clipped[k], i)),
                                  static_cast<float>(get_element(masters_before[k], i)));
      ASSERT_EQ(bits32(static_cast<float>(get_element(m, i))), bits32(want)) << "param " << k << " element " << i;
      ASSERT_EQ(bits16(params[k], i), Half(want).bits);
    }
  }
}

// ---- 28: multiple optimizers, one scaler ----
TEST(GradScaler, B28_MultipleOptimizersSkipIndependentlyOneUpdate) {
  Generator gen(28);
  models::MLP a(3, {4}, 2), b(3, {4}, 2), b_ref(3, {4}, 2);
  copy_params(b_ref, b);
  SGD opt_a(a.parameters(), {.lr = 0.1}), opt_b(b.parameters(), {.lr = 0.1, .momentum = 0.9});
  SGD opt_b_ref(b_ref.parameters(), {.lr = 0.1, .momentum = 0.9});
  Tensor xa = randn({5, 3}, {}, &gen), xb = randn({5, 3}, {}, &gen), t = randn({5, 2}, {}, &gen);
  set_element(xa, 4, kInf);  // model A's batch overflows
  const auto a_before = snapshots(a.parameters());

  GradScaler scaler;
  scaler.scale(mse_loss(a(xa), t)).backward();
  scaler.scale(mse_loss(b(xb), t)).backward();
  EXPECT_FALSE(scaler.step(opt_a));
  EXPECT_TRUE(scaler.step(opt_b));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0) << "one update(): halved once";
  EXPECT_EQ(scaler.get_growth_tracker(), 0);
  for (size_t i = 0; i < a_before.size(); ++i) EXPECT_TRUE(same_bytes(a.parameters()[i], a_before[i]));
  mse_loss(b_ref(xb), t).backward();
  opt_b_ref.step();
  for (size_t i = 0; i < a_before.size(); ++i)
    EXPECT_TRUE(same_bytes(b.parameters()[i], b_ref.parameters()[i])) << "B stepped exactly as without a scaler";
}

// ---- 29: multiple losses into shared parameters ----
TEST(GradScaler, B29_MultipleLossesAccumulateWithOneScale) {
  Generator gen(29);
  models::MLP model(4, {8}, 3), ref(4, {8}, 3), ref_sum(4, {8}, 3);
  copy_params(ref, model);
  copy_params(ref_sum, model);
  Tensor x0 = randn({6, 4}, {}, &gen), t0 = randn({6, 3}, {}, &gen);
  Tensor x1 = randn({5, 4}, {}, &gen);
  Tensor labels = tensor({0.0, 2.0, 1.0, 1.0, 0.0}, TensorOptions(DType::Int64));
  SGD opt(model.parameters(), {.lr = 0.05}), opt_ref(ref.parameters(), {.lr = 0.05});

  GradScaler scaler;
  scaler.scale(mse_loss(model(x0), t0)).backward();
  const double s0 = scaler.get_scale();
  scaler.scale(cross_entropy(model(x1), labels)).backward();
  EXPECT_EQ(scaler.get_scale(), s0) << "both losses carry the same scale";
  scaler.unscale_(opt);

  mse_loss(ref(x0), t0).backward();
  cross_entropy(ref(x1), labels).backward();
  add(mse_loss(ref_sum(x0), t0), cross_entropy(ref_sum(x1), labels)).backward();
  const auto p = model.parameters(), pr = ref.parameters(), ps = ref_sum.parameters();
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_TRUE(same_bytes(p[i].grad(), pr[i].grad())) << "param " << i << ": unscaled sum of both losses' grads";
    // Against the grad of loss0 + loss1 (the engine may add the two paths in another order):
    // one extra rounding of a sum of two terms, <= 2^-24 relative.
    EXPECT_LT(max_abs_diff(p[i].grad(), ps[i].grad()), 1e-6) << "param " << i;
  }
  EXPECT_TRUE(scaler.step(opt));
  opt_ref.step();
  for (size_t i = 0; i < p.size(); ++i) EXPECT_TRUE(same_bytes(p[i], pr[i]));
}

// ---- 34 (scaling part): FP16 underflow and overflow, in numbers ----
TEST(GradScaler, B34_Fp16UnderflowRecoveredAndOverflowSkipped) {
  // A true gradient of 1e-8 for an fp16 parameter: loss = sum(float(w) * 1e-8); the cast's
  // backward rounds the f32 gradient into fp16.
  const Tensor tiny = tensor({1e-8}, TensorOptions(DType::Float32));
  Tensor w = make_param({1.0}, {1}, DType::Float16);
  sum(mul(w.to(DType::Float32), tiny)).backward();
  EXPECT_EQ(bits16(w.grad()), 0x0000) << "1e-8 is below fp16's smallest subnormal (2^-24 ~ 6e-8): flushed to 0";

  Tensor w2 = make_param({1.0}, {1}, DType::Float16);
  SGD opt({w2}, {.lr = 1.0});
  GradScaler scaler;
  scaler.scale(sum(mul(w2.to(DType::Float32), tiny))).backward();
  // The cast's backward rounds into fp16; the optimizer's FP32 grad_dtype widens that exactly.
  EXPECT_EQ(w2.grad().item<float>(), static_cast<float>(Half::from_bits(0x115E)))
      << "1e-8 * 65536 = 6.55e-4 fits in fp16";
  scaler.unscale_(opt);
  const float unscaled = w2.grad().item<float>();
  EXPECT_EQ(unscaled, static_cast<float>(Half::from_bits(0x115E)) * std::ldexp(1.0f, -16));
  EXPECT_NEAR(unscaled, 9.9972e-9, 1e-12);
  EXPECT_TRUE(scaler.step(opt));
  EXPECT_EQ(opt.master(w2).item<float>(), 1.0f - unscaled);
  scaler.update();

  // A true gradient of 2.0 at S = 65536: 131072 > 65504 overflows to inf in fp16.
  opt.zero_grad();
  scaler.scale(sum(mul(w2.to(DType::Float32), tensor({2.0}, TensorOptions(DType::Float32))))).backward();
  EXPECT_EQ(w2.grad().item<float>(), kInf) << "+inf in fp16, widened";
  const Tensor before = snapshot(w2), master_before = snapshot(opt.master(w2));
  EXPECT_FALSE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  EXPECT_TRUE(same_bytes(w2, before));
  EXPECT_TRUE(same_bytes(opt.master(w2), master_before));
  // At S = 32768 the same gradient fits (65536 is still too big: 2 * 32768 = 65536 > 65504), so it
  // takes one more halving; at 16384 it is 32768 and the step goes through with grad 2.0.
  opt.zero_grad();
  scaler.scale(sum(mul(w2.to(DType::Float32), tensor({2.0}, TensorOptions(DType::Float32))))).backward();
  EXPECT_FALSE(scaler.step(opt));
  scaler.update();
  opt.zero_grad();
  scaler.scale(sum(mul(w2.to(DType::Float32), tensor({2.0}, TensorOptions(DType::Float32))))).backward();
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 16384.0);
  EXPECT_EQ(opt.master(w2).item<float>(), master_before.item<float>() - 2.0f);
}

}  // namespace
}  // namespace mixtape::testing
