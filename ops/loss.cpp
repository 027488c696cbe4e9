// ops/loss.cpp — nll_loss, cross_entropy, mse_loss, binary_cross_entropy(_with_logits), and the
// gradient ops nll_loss_backward and binary_cross_entropy_backward. Semantics are torch 1.13's
// (formulas in ops/loss.h); the gradient formulas below are PyTorch's derivatives.yaml ones.
//
// Dtypes: inputs f16/bf16/f32/f64 (target of nll_loss: Int64). Per-element math in acc_t<T>
// (f32 for 16-bit); the Sum/Mean accumulators are f64 whatever T, and the result is rounded
// once to the output dtype. Weights are read as f32 (f64 for f64 losses) without rounding
// them to a 16-bit input's dtype first.
// Subgradients: binary_cross_entropy clamps log at -100 (a zero slope there, as PyTorch) and
// divides its gradient by max(p (1 - p), 1e-12); softplus and the logits form are smooth.
// AMP: every loss is fp32; cross_entropy is a composite (its log_softmax and nll_loss are
// recorded one by one); binary_cross_entropy is refused under CUDA autocast.
#include "ops/loss.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/cpu/elementwise.h"
#include "ops/loss_args.h"
#include "ops/op_def.h"
#include "ops/shape_ops.h"
#include "ops/softmax.h"

namespace mixtape {
namespace {

void check_same_shape(const char* op, const Tensor& input, const Tensor& target, const char* input_name) {
  MT_CHECK(target.sizes() == input.sizes(), op, ": target ", target.describe(), " must have the same shape as ",
           input_name, " ", input.describe(), " (no broadcasting: reshape one of them explicitly)");
}

void check_broadcastable_to(const char* op, const Tensor& w, const Tensor& input, const char* what) {
  if (!w.defined()) return;
  MT_CHECK(is_floating(w.dtype()), op, ": expected a floating ", what, ", got ", w.describe());
  bool ok = w.dim() <= input.dim();
  for (int64_t d = 0; ok && d < w.dim(); ++d) {
    const int64_t ws = w.sizes()[d], xs = input.sizes()[input.dim() - w.dim() + d];
    ok = ws == xs || ws == 1;
  }
  MT_CHECK(ok, op, ": ", what, " ", w.describe(), " must be broadcastable to the input's shape ",
           shape_str(input.sizes()));
}

// A flat position in `shape` as its index, e.g. 5 in [2, 3] -> [1, 2].
std::string index_str(int64_t linear, const IntList& shape) {
  IntList idx(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? linear % shape[d] : 0;
    linear = shape[d] ? linear / shape[d] : 0;
  }
  return shape_str(idx);
}
}  // namespace

Reduction loss_reduction(const Attrs& a, const char* op) {
  const int64_t r = a.get<int64_t>("reduction");
  MT_CHECK(r >= 0 && r <= 2, op, ": invalid reduction ", r, " (expected None = 0, Mean = 1, Sum = 2)");
  return static_cast<Reduction>(r);
}

void check_loss_floating(const char* op, const Tensor& t, const char* what) {
  MT_CHECK(t.defined(), op, ": ", what, " is undefined");
  MT_CHECK(is_floating(t.dtype()), op, ": expected a floating ", what, ", got ", t.describe());
}

void check_elementwise_loss_args(const char* op, const Tensor& input, const Tensor& target, const Tensor& weight,
                                 const Tensor& pos_weight) {
  check_loss_floating(op, input, "input");
  check_loss_floating(op, target, "target");
  check_same_shape(op, input, target, "input");
  check_broadcastable_to(op, weight, input, "weight");
  check_broadcastable_to(op, pos_weight, input, "pos_weight");
}

NllGeom nll_geometry(const IntList& sizes) {
  NllGeom g;
  if (sizes.size() == 1) {
    g.c = sizes[0];
    return g;
  }
  g.n = sizes[0];
  g.c = sizes[1];
  g.target_shape.push_back(sizes[0]);
  for (size_t d = 2; d < sizes.size(); ++d) {
    g.s *= sizes[d];
    g.target_shape.push_back(sizes[d]);
  }
  return g;
}

std::string bad_target_message(int64_t value, int64_t position, const IntList& shape, int64_t classes,
                               int64_t ignore_index) {
  return detail::str_cat("target ", value, " at position ", index_str(position, shape),
                         " is out of bounds: expected a class in [0, ", classes, ") or ignore_index ", ignore_index);
}
std::string bad_probability_message(double value, int64_t position, const IntList& shape) {
  return detail::str_cat("all elements of input should be between 0 and 1 (probabilities; use "
                         "binary_cross_entropy_with_logits for logits), got ", value, " at position ",
                         index_str(position, shape));
}

namespace {

// ---- shared helpers ----
int64_t reduction_attr(Reduction r) { return static_cast<int64_t>(r); }

// t as a contiguous tensor of dtype dt (t itself when it already is one); not recorded.
Tensor dense(const Tensor& t, DType dt) {
  if (t.dtype() == dt && t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.sizes(), TensorOptions(dt));
  cpu::copy_into(out, t);
  return out;
}

// The dtype weights are read in for a loss computed in dt: f64 for f64, else f32.
DType weight_dtype(DType dt) { return dt == DType::Float64 ? DType::Float64 : DType::Float32; }

// w broadcast to `shape` and materialised in dtype dt (undefined stays undefined).
Tensor broadcast_dense(const Tensor& w, const IntList& shape, DType dt) {
  if (!w.defined()) return w;
  Tensor out = Tensor::empty(shape, TensorOptions(dt));
  cpu::copy_into(out, w);
  return out;
}

// Optional inputs that were undefined at forward time have no saved slot.
Tensor optional_input(const BackwardContext& c, size_t i) {
  return c.saved_inputs[i].defined() || c.saved_inputs[i].released() ? c.input(i) : Tensor();
}

// PyTorch refuses, at forward time, a weight that requires grad for these losses.
void check_constant(const char* op, const Tensor& t, const char* what) {
  MT_CHECK(!(t.defined() && t.requires_grad() && autograd::GradMode::is_enabled()), op, ": ", what, " ",
           t.describe(), " requires grad, but ", op, " is not differentiable with respect to ", what,
           " (as in PyTorch); pass ", what, ".detach()");
}

IntList output_shape(Reduction r, const IntList& elementwise) { return r == Reduction::None ? elementwise : IntList{}; }

// ---- nll_loss: checks shared with cross_entropy ----
NllGeom nll_check(const char* op, const Tensor& input, const Tensor& target, const Tensor& weight,
                  const char* input_name) {
  check_loss_floating(op, input, input_name);
  MT_CHECK(target.defined(), op, ": target is undefined");
  MT_CHECK(input.dim() >= 1, op, ": expected ", input_name, " of shape (N, C), (N, C, d1, ...) or (C), got ",
           input.describe());
  MT_CHECK(target.dtype() == DType::Int64, op, ": target must hold Int64 class indices, got ", target.describe(),
           is_floating(target.dtype()) ? " (class-probability targets are not supported)" : "");
  NllGeom g = nll_geometry(input.sizes());
  MT_CHECK(target.sizes() == g.target_shape, op, ": expected target of shape ", shape_str(g.target_shape), " for ",
           input_name, " ", input.describe(), ", got ", target.describe());
  if (weight.defined()) {
    MT_CHECK(is_floating(weight.dtype()), op, ": expected a floating weight, got ", weight.describe());
    MT_CHECK(weight.dim() == 1 && weight.sizes()[0] == g.c, op, ": weight must be 1-D of size C = ", g.c,
             " (one weight per class), got ", weight.describe());
  }
  return g;
}

// Every target is a class in [0, C) or ignore_index; reports the first that is not.
void check_targets(const char* op, const int64_t* t, int64_t count, int64_t classes, int64_t ignore_index,
                   const IntList& shape) {
  for (int64_t p = 0; p < count; ++p) {
    const int64_t v = t[p];
    MT_CHECK(v == ignore_index || (v >= 0 && v < classes), op, ": ",
             bad_target_message(v, p, shape, classes, ignore_index));
  }
}

// Sum of the weights of the non-ignored targets (their count without a weight).
double total_weight(const int64_t* t, int64_t count, int64_t ignore_index, const double* w) {
  double total = 0;
  for (int64_t p = 0; p < count; ++p)
    if (t[p] != ignore_index) total += w ? w[t[p]] : 1.0;
  return total;
}

// ---- nll_loss(logp, target, weight?) ----
TensorList nll_loss_cpu(const OpCall& c) {
  const Tensor& logp = c.inputs[0];
  const Tensor& target = c.inputs[1];
  const Tensor& weight = c.inputs[2];
  const NllGeom geo = nll_check(c.name(), logp, target, weight, "input");
  const int64_t ignore = c.attrs.get<int64_t>("ignore_index");
  const Reduction red = loss_reduction(c.attrs, c.name());
  Tensor lp = dense(logp, logp.dtype()), tg = dense(target, DType::Int64);
  Tensor wd = weight.defined() ? dense(weight, DType::Float64) : Tensor();
  const int64_t* t = tg.data_ptr<int64_t>();
  const double* w = wd.defined() ? wd.data_ptr<double>() : nullptr;
  const int64_t count = geo.n * geo.s;
  check_targets(c.name(), t, count, geo.c, ignore, geo.target_shape);
  Tensor out = Tensor::empty(output_shape(red, geo.target_shape), TensorOptions(logp.dtype()));
  visit_floating(logp.dtype(), c.name(), [&]<typename T>() {
    using A = acc_t<T>;
    const T* x = static_cast<const T*>(lp.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    double total = 0, wsum = 0;
    for (int64_t n = 0; n < geo.n; ++n) {
      for (int64_t s = 0; s < geo.s; ++s) {
        const int64_t p = n * geo.s + s, k = t[p];
        if (k == ignore) {
          if (red == Reduction::None) o[p] = static_cast<T>(A(0));
          continue;
        }
        const A wk = w ? static_cast<A>(w[k]) : A(1);
        const A l = -wk * static_cast<A>(x[(n * geo.c + k) * geo.s + s]);
        if (red == Reduction::None) {
          o[p] = static_cast<T>(l);
        } else {
          total += static_cast<double>(l);
          wsum += static_cast<double>(wk);
        }
      }
    }
    if (red == Reduction::Sum) o[0] = static_cast<T>(total);
    if (red == Reduction::Mean) o[0] = static_cast<T>(total / wsum);  // 0 / 0 = NaN, as PyTorch
  });
  return {out};
}

// nll_loss_backward(g, target, weight?): zeros(sizes), -weight[t] g (/ total weight) at targets.
TensorList nll_loss_backward_cpu(const OpCall& c) {
  const Tensor& g = c.inputs[0];
  const Tensor& target = c.inputs[1];
  const Tensor& weight = c.inputs[2];
  const IntList& sizes = c.attrs.get<IntList>("sizes");
  const int64_t ignore = c.attrs.get<int64_t>("ignore_index");
  const Reduction red = loss_reduction(c.attrs, c.name());
  check_loss_floating(c.name(), g, "gradient");
  MT_CHECK(!sizes.empty(), c.name(), ": expected input sizes (N, C, ...) or (C), got []");
  const NllGeom geo = nll_geometry(sizes);
  MT_CHECK(target.dtype() == DType::Int64 && target.sizes() == geo.target_shape, c.name(), ": expected Int64 target of shape ",
           shape_str(geo.target_shape), ", got ", target.describe());
  MT_CHECK(g.sizes() == output_shape(red, geo.target_shape), c.name(), ": expected a gradient of shape ",
           shape_str(output_shape(red, geo.target_shape)), " for reduction ", reduction_name(red), ", got ",
           g.describe());
  MT_CHECK(!weight.defined() || (weight.dim() == 1 && weight.sizes()[0] == geo.c), c.name(),
           ": weight must be 1-D of size C = ", geo.c, ", got ", weight.describe());
  Tensor gd = dense(g, g.dtype()), tg = dense(target, DType::Int64);
  Tensor wd = weight.defined() ? dense(weight, DType::Float64) : Tensor();
  const int64_t* t = tg.data_ptr<int64_t>();
  const double* w = wd.defined() ? wd.data_ptr<double>() : nullptr;
  const int64_t count = geo.n * geo.s;
  check_targets(c.name(), t, count, geo.c, ignore, geo.target_shape);
  const double scale = red == Reduction::Mean ? 1.0 / total_weight(t, count, ignore, w) : 1.0;
  Tensor out = Tensor::empty(sizes, TensorOptions(g.dtype()));
  if (out.nbytes()) std::memset(out.data_ptr(), 0, out.nbytes());  // all-zero bits are +0 in every float type
  visit_floating(g.dtype(), c.name(), [&]<typename T>() {
    const T* gp = static_cast<const T*>(gd.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    for (int64_t n = 0; n < geo.n; ++n) {
      for (int64_t s = 0; s < geo.s; ++s) {
        const int64_t p = n * geo.s + s, k = t[p];
        if (k == ignore) continue;
        const double gv = static_cast<double>(static_cast<acc_t<T>>(gp[red == Reduction::None ? p : 0]));
        o[(n * geo.c + k) * geo.s + s] = static_cast<T>(-(w ? w[k] : 1.0) * gv * scale);
      }
    }
  });
  return {out};
}

// nll_loss is linear in logp and nll_loss_backward is its adjoint, so each is the other's VJP.
TensorList nll_loss_backward_grad(BackwardContext& c) {
  return {nll_loss(c.grad(), c.input(1), optional_input(c, 2), c.attrs.get<int64_t>("ignore_index"),
                   loss_reduction(c.attrs, "nll_loss_backward")),
          Tensor(), Tensor()};
}
const OpSchema& kNllLossBackward = define_op("nll_loss_backward")
                                       .save({1, 2})
                                       .grad(nll_loss_backward_grad)
                                       .kernel(DeviceType::CPU, nll_loss_backward_cpu);

TensorList nll_loss_grad(BackwardContext& c) {
  return {nll_loss_backward(c.grad(), c.input(1), optional_input(c, 2), c.attrs.get<int64_t>("ignore_index"),
                            loss_reduction(c.attrs, "nll_loss"), c.input_sizes(0)),
          Tensor(), Tensor()};
}
const OpSchema& kNllLoss =
    define_op("nll_loss").args({"input", "target", "weight"}).policy(AmpPolicy::FP32).save({1, 2}).grad(nll_loss_grad).kernel(DeviceType::CPU, nll_loss_cpu);

// ---- cross_entropy(logits, target, weight?): a composite, PyTorch 1.13's
// cross_entropy_loss_label_smoothing when label_smoothing > 0 ----
TensorList cross_entropy_composite(const OpCall& c) {
  const char* op = c.name();
  const Tensor& logits = c.inputs[0];
  const Tensor& target = c.inputs[1];
  const Tensor& weight = c.inputs[2];
  const int64_t ignore = c.attrs.get<int64_t>("ignore_index");
  const Reduction red = loss_reduction(c.attrs, op);
  const double eps = c.attrs.get<double>("label_smoothing");
  const NllGeom geo = nll_check(op, logits, target, weight, "logits");
  MT_CHECK(eps >= 0.0 && eps <= 1.0, op, ": label_smoothing must be between 0.0 and 1.0, got ", eps);
  const int64_t cdim = logits.dim() == 1 ? 0 : 1;
  Tensor logp = log_softmax(logits, cdim);
  Tensor nll = nll_loss(logp, target, weight, ignore, red);
  if (eps == 0.0) return {nll};

  // smooth_p = -sum_c weight[c] logp[n, c, ...], 0 where the target is ignored (PyTorch's
  // masked_fill: a -inf log-probability at an ignored position must not turn into NaN, so the
  // kept positions are selected rather than multiplied by a 0/1 mask).
  Tensor smooth;
  if (weight.defined()) {
    IntList wshape(static_cast<size_t>(logits.dim()), 1);
    wshape[static_cast<size_t>(cdim)] = geo.c;
    smooth = -sum(logp * weight.reshape(wshape), IntList{cdim});
  } else {
    smooth = -sum(logp, IntList{cdim});
  }
  const std::vector<int64_t> t = target.to_vector<int64_t>();  // already validated by nll_loss
  const std::vector<double> w = weight.defined() ? weight.to_vector<double>() : std::vector<double>{};
  std::vector<double> keep;
  double wsum = 0;
  for (size_t p = 0; p < t.size(); ++p) {
    if (t[p] == ignore) continue;
    keep.push_back(static_cast<double>(p));
    wsum += w.empty() ? 1.0 : w[static_cast<size_t>(t[p])];
  }
  const int64_t count = static_cast<int64_t>(t.size());
  Tensor smooth_red;
  if (static_cast<int64_t>(keep.size()) == count) {
    smooth_red = red == Reduction::None ? smooth : sum(smooth);
  } else {
    Tensor idx = to_device(tensor(keep, {static_cast<int64_t>(keep.size())}, TensorOptions(DType::Int64)),
                           target.device());
    Tensor kept = index_select(smooth.reshape({count}), 0, idx);
    smooth_red = red == Reduction::None ? index_select_backward(kept, {count}, 0, idx).reshape(target.sizes())
                                        : sum(kept);
  }
  if (red == Reduction::Mean) smooth_red = smooth_red / wsum;  // the same denominator as nll_loss
  return {nll * (1.0 - eps) + smooth_red * (eps / static_cast<double>(geo.c))};
}
const OpSchema& kCrossEntropy =
    define_op("cross_entropy").args({"input", "target", "weight"}).policy(AmpPolicy::FP32).composite_of_ops(cross_entropy_composite);

// ---- mse_loss(x, t) = (x - t)^2; d/dx = 2 (x - t) g (/ numel for Mean), d/dt = -d/dx ----
TensorList mse_loss_cpu(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& tt = c.inputs[1];
  check_elementwise_loss_args(c.name(), x, tt);
  const Reduction red = loss_reduction(c.attrs, c.name());
  const DType dt = promote_types(x.dtype(), tt.dtype());
  Tensor xd = dense(x, dt), td = dense(tt, dt);
  Tensor out = Tensor::empty(output_shape(red, x.sizes()), TensorOptions(dt));
  const int64_t n = x.numel();
  visit_floating(dt, c.name(), [&]<typename T>() {
    using A = acc_t<T>;
    const T* xp = static_cast<const T*>(xd.data_ptr());
    const T* tp = static_cast<const T*>(td.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    double total = 0;
    for (int64_t i = 0; i < n; ++i) {
      const A d = static_cast<A>(xp[i]) - static_cast<A>(tp[i]);
      if (red == Reduction::None)
        o[i] = static_cast<T>(d * d);
      else
        total += static_cast<double>(d * d);
    }
    if (red == Reduction::Sum) o[0] = static_cast<T>(total);
    if (red == Reduction::Mean) o[0] = static_cast<T>(total / static_cast<double>(n));  // empty: NaN
  });
  return {out};
}
TensorList mse_loss_grad(BackwardContext& c) {
  Tensor x = c.input(0), t = c.input(1);
  const double scale = loss_reduction(c.attrs, "mse_loss") == Reduction::Mean ? 2.0 / static_cast<double>(x.numel()) : 2.0;
  Tensor gx = (x - t) * (c.grad() * scale);
  return {c.needs_input_grad(0) ? gx : Tensor(), c.needs_input_grad(1) ? -gx : Tensor()};
}
const OpSchema& kMseLoss =
    define_op("mse_loss").args({"input", "target"}).policy(AmpPolicy::FP32).grad(mse_loss_grad).kernel(DeviceType::CPU, mse_loss_cpu);

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
const OpSchema& kBceBackward = define_op("binary_cross_entropy_backward")
                                   .grad(bce_backward_grad)
                                   .kernel(DeviceType::CPU, bce_backward_cpu);

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
        .kernel(DeviceType::CPU, bce_cpu);

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
                                 .kernel(DeviceType::CPU, bce_logits_cpu);

}  // namespace

const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::None: return "none";
    case Reduction::Mean: return "mean";
    case Reduction::Sum: return "sum";
  }
  return "?";
}

Tensor nll_loss(const Tensor& logp, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                Reduction reduction) {
  check_constant("nll_loss", weight, "weight");
  return dispatch1(kNllLoss, {logp, target, weight},
                   {{"ignore_index", ignore_index}, {"reduction", reduction_attr(reduction)}});
}

Tensor nll_loss_backward(const Tensor& g, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                         Reduction reduction, const IntList& logp_sizes) {
  return dispatch1(kNllLossBackward, {g, target, weight},
                   {{"ignore_index", ignore_index}, {"reduction", reduction_attr(reduction)}, {"sizes", logp_sizes}});
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                     Reduction reduction, double label_smoothing) {
  check_constant("cross_entropy", weight, "weight");
  return dispatch1(kCrossEntropy, {logits, target, weight},
                   {{"ignore_index", ignore_index},
                    {"reduction", reduction_attr(reduction)},
                    {"label_smoothing", label_smoothing}});
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return dispatch1(kMseLoss, {input, target}, {{"reduction", reduction_attr(reduction)}});
}

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
