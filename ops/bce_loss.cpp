// ops/bce_loss.cpp — binary_cross_entropy, its gradient op binary_cross_entropy_backward, and
// binary_cross_entropy_with_logits (torch 1.13 semantics, formulas in ops/loss.h; the gradient
// formulas are PyTorch's derivatives.yaml ones).
// Invariant: probabilities outside [0, 1] (NaN included) are refused before any value is
// computed; the log is clamped at -100 (a zero slope there, as PyTorch) and the gradient divides
// by max(p (1 - p), 1e-12), so the probability form stays finite; softplus and the logits form
// are smooth. AMP: binary_cross_entropy is refused under CUDA autocast (the reason is in its
// schema), the logits form runs in fp32.
// Dtypes: ops/loss_util.h's contract.
#include <algorithm>
#include <cmath>

#include "ops/activation.h"  // sigmoid, relu (bce_logits_grad)
#include "ops/loss.h"
#include "ops/loss_args.h"
#include "ops/loss_util.h"
#include "ops/op_def.h"

namespace mixtape {
using namespace loss_impl;  // the shared loss helpers (ops/loss_util.h)
namespace {

// ---- binary_cross_entropy(p, t, weight?) ----
constexpr double kBceEpsilon = 1e-12;  // PyTorch's EPSILON in binary_cross_entropy_backward

TensorList bce_cpu(const OpCall& c) {
  const Tensor& p = c.inputs[0];
  const Tensor& tt = c.inputs[1];
  const Tensor& weight = c.inputs[2];
  check_elementwise_loss_args(c.name(), p, tt, weight);
  const Reduction red = loss_reduction(c.attrs, c.name());
  const DType dt = promote_types(p.dtype(), tt.dtype());
  Tensor pd = dense(p, dt), td = dense(tt, dt), wd = broadcast_dense(weight, p.sizes(), weight_dtype(dt));
  Tensor out = Tensor::empty(output_shape(red, p.sizes()), TensorOptions(dt));
  const int64_t n = p.numel();
  visit_floating(dt, c.name(), [&]<typename T>() {
    using A = acc_t<T>;
    const T* pp = static_cast<const T*>(pd.data_ptr());
    const T* tp = static_cast<const T*>(td.data_ptr());
    const A* wp = wd.defined() ? static_cast<const A*>(wd.data_ptr()) : nullptr;
    T* o = static_cast<T*>(out.data_ptr());
    for (int64_t i = 0; i < n; ++i) {
      const A v = static_cast<A>(pp[i]);
      MT_CHECK(v >= A(0) && v <= A(1), c.name(), ": ", bad_probability_message(static_cast<double>(v), i, p.sizes()));
    }
    double total = 0;
    for (int64_t i = 0; i < n; ++i) {
      const A v = static_cast<A>(pp[i]), t = static_cast<A>(tp[i]);
      const A log_p = std::max(std::log(v), A(-100)), log_1mp = std::max(std::log1p(-v), A(-100));
      A l = (t - A(1)) * log_1mp - t * log_p;
      if (wp) l *= wp[i];
      if (red == Reduction::None)
        o[i] = static_cast<T>(l);
      else
        total += static_cast<double>(l);
    }
    if (red == Reduction::Sum) o[0] = static_cast<T>(total);
    if (red == Reduction::Mean) o[0] = static_cast<T>(total / static_cast<double>(n));
  });
  return {out};
}

// binary_cross_entropy_backward(g, p, t, weight?) = g w (p - t) / max(p (1 - p), 1e-12) (/ n).
TensorList bce_backward_cpu(const OpCall& c) {
  const Tensor& g = c.inputs[0];
  const Tensor& p = c.inputs[1];
  const Tensor& tt = c.inputs[2];
  const Tensor& weight = c.inputs[3];
  check_loss_floating(c.name(), g, "gradient");
  check_elementwise_loss_args(c.name(), p, tt, weight);
  const Reduction red = loss_reduction(c.attrs, c.name());
  MT_CHECK(g.sizes() == output_shape(red, p.sizes()), c.name(), ": expected a gradient of shape ",
           shape_str(output_shape(red, p.sizes())), " for reduction ", reduction_name(red), ", got ", g.describe());
  const DType dt = promote_types(g.dtype(), promote_types(p.dtype(), tt.dtype()));
  Tensor gd = dense(g, dt), pd = dense(p, dt), td = dense(tt, dt), wd = broadcast_dense(weight, p.sizes(), weight_dtype(dt));
  Tensor out = Tensor::empty(p.sizes(), TensorOptions(dt));
  const int64_t n = p.numel();
  visit_floating(dt, c.name(), [&]<typename T>() {
    using A = acc_t<T>;
    const T* gp = static_cast<const T*>(gd.data_ptr());
    const T* pp = static_cast<const T*>(pd.data_ptr());
    const T* tp = static_cast<const T*>(td.data_ptr());
    const A* wp = wd.defined() ? static_cast<const A*>(wd.data_ptr()) : nullptr;
    T* o = static_cast<T*>(out.data_ptr());
    const A count = static_cast<A>(n);
    for (int64_t i = 0; i < n; ++i) {
      const A v = static_cast<A>(pp[i]), t = static_cast<A>(tp[i]);
      A r = static_cast<A>(gp[red == Reduction::None ? i : 0]) * (v - t) /
            std::max((A(1) - v) * v, static_cast<A>(kBceEpsilon));
      if (wp) r *= wp[i];
      o[i] = static_cast<T>(red == Reduction::Mean ? r / count : r);
    }
  });
  return {out};
}

// VJP of binary_cross_entropy_backward (upstream h), with D = p (1 - p), q = (p - t) / D,
// s = 1/n for Mean: d/dg = h w q (summed, times s, for Sum/Mean); d/dp = h w g s (D - (p - t)
// (1 - 2p)) / D^2; d/dt = -h w g s / D. Exact where p (1 - p) >= 1e-12 (the forward's clamp is
// inactive); the clamped region, where PyTorch's own second derivative is also a constant, is
// not modelled.
TensorList bce_backward_grad(BackwardContext& c) {
  const Tensor& h = c.grad();
  Tensor g = c.input(0), p = c.input(1), t = c.input(2), w = optional_input(c, 3);
  const Reduction red = loss_reduction(c.attrs, "binary_cross_entropy_backward");
  const double s = red == Reduction::Mean ? 1.0 / static_cast<double>(p.numel()) : 1.0;
  Tensor hw = w.defined() ? h * w : h;
  Tensor d = p * (1.0 - p), pt = p - t;
  Tensor gs = g * s;
  Tensor dg, dp, dt;
  if (c.needs_input_grad(0)) dg = red == Reduction::None ? hw * pt / d : sum(hw * pt / d) * s;
  if (c.needs_input_grad(1)) dp = hw * gs * (d - pt * (1.0 - 2.0 * p)) / (d * d);
  if (c.needs_input_grad(2)) dt = -(hw * gs / d);
  return {dg, dp, dt, Tensor()};
}
// Samples (double backward of binary_cross_entropy: g, p and t differentiated), p in (0.1, 0.9)
// so the clamp of p (1 - p) is inactive. Parity: g (p - t) / max(p (1 - p), eps) w is one
// rounding per operation on both (no a b + c to contract): bit-identical forward. Its gradient
// with respect to g for Mean sums the 12 terms (a sum op, in another order on the device): 12.
const OpSchema& kBceBackward =
    define_op("binary_cross_entropy_backward")
        .grad(bce_backward_grad)
        .kernel(DeviceType::CPU, bce_backward_cpu)
        .sample("double",
                {arg({3, 4}), arg({3, 4}, 0.1, 0.9), arg({3, 4}, 0, 1), values_arg({4}, {0.5, 1.0, 2.0, 1.5}).constant()},
                [](const TensorList& x) {
                  return TensorList{binary_cross_entropy_backward(x[0], x[1], x[2], x[3], Reduction::None)};
                },
                SampleChecks{.parity_roundings = 0})
        .sample("double-mean", {arg({}), arg({3, 4}, 0.1, 0.9), arg({3, 4}, 0, 1)},
                [](const TensorList& x) {
                  return TensorList{binary_cross_entropy_backward(x[0], x[1], x[2], Tensor(), Reduction::Mean)};
                },
                sums_of(12));

// Parity of the samples: a term costs log and log1p (4 roundings each) and the contraction of
// (t - 1) log(1 - p) - t log(p) into an FMA on the device (1): 9; both of its parts are >= 0, so
// no cancellation. Mean and Sum add the `terms` terms in f64 in another order (block partials),
// which only an f64 result can show: `terms` more.
SampleChecks bce_parity(double terms) { return SampleChecks{.parity_roundings = 9 + terms}; }

// d/dp via the gradient op; d/dt = g w (log(1 - p) - log(p)) (/ n), unclamped as in PyTorch.
TensorList bce_grad(BackwardContext& c) {
  Tensor g = c.grad(), p = c.input(0), t = c.input(1), w = optional_input(c, 2);
  const Reduction red = loss_reduction(c.attrs, "binary_cross_entropy");
  Tensor dp, dt;
  if (c.needs_input_grad(0)) dp = binary_cross_entropy_backward(g, p, t, w, red);
  if (c.needs_input_grad(1)) {
    dt = (log(1.0 - p) - log(p)) * g;
    if (w.defined()) dt = dt * w;
    if (red == Reduction::Mean) dt = dt / static_cast<double>(p.numel());
  }
  return {dp, dt, Tensor()};
}
const OpSchema& kBce =
    define_op("binary_cross_entropy").args({"input", "target", "weight"})
        .policy(AmpPolicy::FP32)  // CPU autocast runs it in f32, as PyTorch does
        .ban_under_cuda_autocast(
            "binary_cross_entropy (and BCELoss) are unsafe to autocast: under autocast the probabilities "
            "usually come from a float16 sigmoid, and the backward of this loss, g * (p - t) / (p * (1 - p)), "
            "produces gradients that float16 cannot represent (p = 1e-5 already gives 1e5 > 65504), while a "
            "float16 p rounds to exactly 0 or 1 once |logit| > ~11, where the log saturates at its -100 clamp "
            "and the gradient is lost. Running the loss in float32 does not help: the cast of p up to float32 "
            "is undone in backward, so the gradient flows back into the float16 p and overflows there. Use "
            "binary_cross_entropy_with_logits (BCEWithLogitsLoss) on the logits instead: it fuses the sigmoid "
            "into the loss, is numerically stable, and is safe to autocast (it runs in float32). Or compute "
            "this loss outside the autocast region on float32 probabilities.")
        .grad(bce_grad)
        .kernel(DeviceType::CPU, bce_cpu)
        // p in (0.1, 0.9): the log clamp and the gradient's clamp are inactive; t is differentiated.
        .sample("mean", {arg({3, 4}, 0.1, 0.9), arg({3, 4}, 0, 1)},
                [](const TensorList& x) { return TensorList{binary_cross_entropy(x[0], x[1])}; }, bce_parity(12))
        .sample("sum-weight",
                {arg({3, 4}, 0.1, 0.9), arg({3, 4}, 0, 1), values_arg({4}, {0.5, 1.0, 2.0, 1.5}).constant()},
                [](const TensorList& x) {
                  return TensorList{binary_cross_entropy(x[0], x[1], x[2], Reduction::Sum)};
                },
                bce_parity(12))
        .sample("none-weight", {arg({3, 4}, 0.1, 0.9), arg({3, 4}, 0, 1), arg({3, 1}, 0.5, 2).constant()},
                [](const TensorList& x) {
                  return TensorList{binary_cross_entropy(x[0], x[1], x[2], Reduction::None)};
                },
                bce_parity(0));

// ---- binary_cross_entropy_with_logits(x, t, weight?, pos_weight?) ----
TensorList bce_logits_cpu(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& tt = c.inputs[1];
  const Tensor& weight = c.inputs[2];
  const Tensor& pos_weight = c.inputs[3];
  check_elementwise_loss_args(c.name(), x, tt, weight, pos_weight);
  const Reduction red = loss_reduction(c.attrs, c.name());
  const DType dt = promote_types(x.dtype(), tt.dtype());
  Tensor xd = dense(x, dt), td = dense(tt, dt);
  Tensor wd = broadcast_dense(weight, x.sizes(), weight_dtype(dt));
  Tensor pwd = broadcast_dense(pos_weight, x.sizes(), weight_dtype(dt));
  Tensor out = Tensor::empty(output_shape(red, x.sizes()), TensorOptions(dt));
  const int64_t n = x.numel();
  visit_floating(dt, c.name(), [&]<typename T>() {
    using A = acc_t<T>;
    const T* xp = static_cast<const T*>(xd.data_ptr());
    const T* tp = static_cast<const T*>(td.data_ptr());
    const A* wp = wd.defined() ? static_cast<const A*>(wd.data_ptr()) : nullptr;
    const A* pwp = pwd.defined() ? static_cast<const A*>(pwd.data_ptr()) : nullptr;
    T* o = static_cast<T*>(out.data_ptr());
    double total = 0;
    for (int64_t i = 0; i < n; ++i) {
      const A v = static_cast<A>(xp[i]), t = static_cast<A>(tp[i]);
      const A softplus_neg = std::max(-v, A(0)) + std::log1p(std::exp(-std::abs(v)));  // log(1 + e^-x)
      const A lw = pwp ? A(1) + (pwp[i] - A(1)) * t : A(1);
      A l = (A(1) - t) * v + lw * softplus_neg;
      if (wp) l *= wp[i];
      if (red == Reduction::None)
        o[i] = static_cast<T>(l);
      else
        total += static_cast<double>(l);
    }
    if (red == Reduction::Sum) o[0] = static_cast<T>(total);
    if (red == Reduction::Mean) o[0] = static_cast<T>(total / static_cast<double>(n));
  });
  return {out};
}

// Parity of the samples: a term costs exp and log1p (4 roundings each) and two contractions
// into FMAs on the device (1 + (pw - 1) t, and (1 - t) x + lw softplus(-x)): 10; where those two
// parts cancel (x < 0) the error stays that of the parts, within the bound's (max|out| + 1) term.
// Mean and Sum add the `terms` terms in f64 in another order: `terms` more.
SampleChecks bce_logits_parity(double terms) { return SampleChecks{.parity_roundings = 10 + terms}; }

// d/dx = g w ((pw t + 1 - t) sigmoid(x) - pw t)   (pw = 1: g w (sigmoid(x) - t))
// d/dt = g w ((pw - 1) softplus(-x) - x)          (pw = 1: -g w x)     (/ n for Mean)
TensorList bce_logits_grad(BackwardContext& c) {
  Tensor x = c.input(0), t = c.input(1), w = optional_input(c, 2), pw = optional_input(c, 3);
  const Reduction red = loss_reduction(c.attrs, "binary_cross_entropy_with_logits");
  Tensor gs = red == Reduction::Mean ? c.grad() / static_cast<double>(x.numel()) : c.grad();
  Tensor dx, dt;
  if (c.needs_input_grad(0)) {
    Tensor sig = sigmoid(x);
    if (pw.defined()) {
      Tensor pt = pw * t;
      dx = (pt + 1.0 - t) * sig - pt;
    } else {
      dx = sig - t;
    }
    if (w.defined()) dx = dx * w;
    dx = dx * gs;
  }
  if (c.needs_input_grad(1)) {
    if (pw.defined()) {
      Tensor softplus_neg = relu(-x) + log(1.0 + exp(-abs(x)));
      dt = (pw - 1.0) * softplus_neg - x;
    } else {
      dt = -x;
    }
    if (w.defined()) dt = dt * w;
    dt = dt * gs;
  }
  return {dx, dt, Tensor(), Tensor()};
}
const OpSchema& kBceLogits = define_op("binary_cross_entropy_with_logits").args({"input", "target", "weight", "pos_weight"})
                                 .policy(AmpPolicy::FP32)
                                 .grad(bce_logits_grad)
                                 .kernel(DeviceType::CPU, bce_logits_cpu)
                                 .sample("mean", {arg({3, 4}, -3, 3), arg({3, 4}, 0, 1)},
                                         [](const TensorList& x) {
                                           return TensorList{binary_cross_entropy_with_logits(x[0], x[1])};
                                         },
                                         bce_logits_parity(12))
                                 .sample("weight-pos_weight",
                                         {arg({3, 4}, -3, 3), arg({3, 4}, 0, 1),
                                          values_arg({4}, {0.5, 1.0, 2.0, 1.5}).constant(),
                                          values_arg({4}, {3.0, 0.5, 1.0, 2.0}).constant()},
                                         [](const TensorList& x) {
                                           return TensorList{
                                               binary_cross_entropy_with_logits(x[0], x[1], x[2], x[3], Reduction::Sum)};
                                         },
                                         bce_logits_parity(12))
                                 .sample("none-pos_weight",
                                         {arg({3, 4}, -3, 3), arg({3, 4}, 0, 1), values_arg({4}, {3.0, 0.5, 1.0, 2.0}).constant()},
                                         [](const TensorList& x) {
                                           return TensorList{binary_cross_entropy_with_logits(x[0], x[1], Tensor(), x[2],
                                                                                              Reduction::None)};
                                         },
                                         bce_logits_parity(0));

}  // namespace

Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target, const Tensor& weight, Reduction reduction) {
  check_constant("binary_cross_entropy", weight, "weight");
  return dispatch1(kBce, {probs, target, weight}, {{"reduction", reduction_attr(reduction)}});
}

Tensor binary_cross_entropy_backward(const Tensor& g, const Tensor& probs, const Tensor& target, const Tensor& weight,
                                     Reduction reduction) {
  return dispatch1(kBceBackward, {g, probs, target, weight}, {{"reduction", reduction_attr(reduction)}});
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, const Tensor& weight,
                                        const Tensor& pos_weight, Reduction reduction) {
  check_constant("binary_cross_entropy_with_logits", weight, "weight");
  check_constant("binary_cross_entropy_with_logits", pos_weight, "pos_weight");
  return dispatch1(kBceLogits, {logits, target, weight, pos_weight}, {{"reduction", reduction_attr(reduction)}});
}

}  // namespace mixtape
