// ops/nll_loss.cpp — nll_loss and its gradient op nll_loss_backward (torch 1.13 semantics, formulas
// in ops/loss.h): logp (N, C, d1..dk) read as (N, C, S), Int64 targets (N, d1..dk) as (N, S).
// Invariant: nll_loss is linear in logp and nll_loss_backward is its adjoint, so each is the
// other's VJP (double backward included); both check every target (a class in [0, C) or
// ignore_index) before reading through it, and Mean divides by the same total weight.
// Dtypes: ops/loss_util.h's contract; the weights are read in f64.
#include <cstring>
#include <vector>

#include "ops/loss.h"
#include "ops/loss_args.h"
#include "ops/loss_util.h"
#include "ops/op_def.h"

namespace mixtape {
using namespace loss_impl;  // the shared loss helpers (ops/loss_util.h)
namespace {

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
// ---- samples ----
// Targets of a sample: exact Int64 values on the device of the sample's input (an Index sample
// argument draws uniform classes; these cases need ignore_index at given positions).
Tensor sample_targets(const Tensor& like, const IntList& sizes, const std::vector<double>& v) {
  return tensor(v, sizes, TensorOptions(DType::Int64)).to(like.device());
}
// The class weights of the samples: a constant input (nll_loss refuses a weight that requires grad).
SampleArg sample_class_weight() { return values_arg({4}, {0.5, 2.0, 1.0, 3.0}).constant(); }
// Parity: the device selects the same values, multiplies them by the same weights (read in f64)
// and folds the reduction sequentially in the CPU's order (ops/cuda/softmax_loss.cu), forward and
// backward: bit-identical, 0 roundings.
constexpr SampleChecks kNllParity{.parity_roundings = 0};

const OpSchema& kNllLossBackward =
    define_op("nll_loss_backward")
        .save({1, 2})
        .grad(nll_loss_backward_grad)
        .kernel(DeviceType::CPU, nll_loss_backward_cpu)
        // With respect to g (nll_loss's double backward), per position and for the mean.
        .sample("double", {arg({5}), sample_class_weight()},
                [](const TensorList& x) {
                  return TensorList{nll_loss_backward(x[0], sample_targets(x[0], {5}, {0, 3, 1, 2, -100}), x[1], -100,
                                                      Reduction::None, {5, 4})};
                },
                kNllParity)
        .sample("double-mean", {arg({}), sample_class_weight()},
                [](const TensorList& x) {
                  return TensorList{nll_loss_backward(x[0], sample_targets(x[0], {5}, {0, 3, 1, 2, -100}), x[1], -100,
                                                      Reduction::Mean, {5, 4})};
                },
                kNllParity);

TensorList nll_loss_grad(BackwardContext& c) {
  return {nll_loss_backward(c.grad(), c.input(1), optional_input(c, 2), c.attrs.get<int64_t>("ignore_index"),
                            loss_reduction(c.attrs, "nll_loss"), c.input_sizes(0)),
          Tensor(), Tensor()};
}
// Samples: logp need not be normalised for the gradient of a function linear in it.
const OpSchema& kNllLoss =
    define_op("nll_loss")
        .args({"input", "target", "weight"})
        .policy(AmpPolicy::FP32)
        .save({1, 2})
        .grad(nll_loss_grad)
        .kernel(DeviceType::CPU, nll_loss_cpu)
        .sample("mean", {arg({5, 4})},
                [](const TensorList& x) { return TensorList{nll_loss(x[0], sample_targets(x[0], {5}, {0, 3, 1, 2, 3}))}; },
                kNllParity)
        .sample("sum-weight", {arg({5, 4}), sample_class_weight()},
                [](const TensorList& x) {
                  return TensorList{
                      nll_loss(x[0], sample_targets(x[0], {5}, {0, 3, 1, 2, 3}), x[1], -100, Reduction::Sum)};
                },
                kNllParity)
        .sample("none-ignore", {arg({5, 4})},
                [](const TensorList& x) {
                  return TensorList{
                      nll_loss(x[0], sample_targets(x[0], {5}, {0, 1, 1, 2, 3}), Tensor(), 1, Reduction::None)};
                },
                kNllParity)
        .sample("mean-weight-ignore", {arg({5, 4}), sample_class_weight()},
                [](const TensorList& x) {
                  return TensorList{
                      nll_loss(x[0], sample_targets(x[0], {5}, {0, -100, 1, 2, 3}), x[1], -100, Reduction::Mean)};
                },
                kNllParity)
        .sample("spatial", {arg({3, 4, 2}), sample_class_weight()},
                [](const TensorList& x) {
                  return TensorList{nll_loss(x[0], sample_targets(x[0], {3, 2}, {0, 3, 2, 2, 1, -100}), x[1])};
                },
                kNllParity);

}  // namespace

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

}  // namespace mixtape
