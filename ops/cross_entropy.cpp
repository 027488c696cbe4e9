// ops/cross_entropy.cpp — cross_entropy, in both of PyTorch's forms: class-index targets (Int64;
// torch 1.13's cross_entropy_loss_label_smoothing when label_smoothing > 0) and class-probability
// targets (floating, of the logits' shape; torch >= 1.10's cross_entropy_loss_prob_target).
// Invariant: a composite of recorded ops (log_softmax, nll_loss, mul, sum, ...) with no kernel
// of its own, so it runs on every device and autograd gives its backward (to the logits, and to
// a probability target that requires grad); with label_smoothing = 0 the index form is exactly
// nll_loss(log_softmax(logits, class dim)). The form is chosen by the target's dtype, and every
// argument is checked before any op runs. AMP: fp32 as a whole (one decision for the composite,
// which casts 16-bit logits, probability targets and weights; its pieces then run in f32).
#include <vector>

#include "ops/loss.h"
#include "ops/loss_args.h"
#include "ops/loss_util.h"
#include "ops/op_def.h"
#include "ops/shape_ops.h"
#include "ops/softmax.h"

namespace mixtape {
using namespace loss_impl;  // the shared loss helpers (ops/loss_util.h)
namespace {

// weight (C) shaped to multiply (N, C, d1, ...) log-probabilities along the class dim; a (C)
// input takes it as it is.
Tensor class_weight_view(const Tensor& weight, int64_t dim, int64_t cdim, int64_t classes) {
  if (dim == 1) return weight;
  IntList wshape(static_cast<size_t>(dim), 1);
  wshape[static_cast<size_t>(cdim)] = classes;
  return weight.reshape(wshape);
}

void check_label_smoothing(const char* op, double eps) {
  MT_CHECK(eps >= 0.0 && eps <= 1.0, op, ": label_smoothing must be between 0.0 and 1.0, got ", eps);
}

// ---- class-probability targets ----
// loss_p = -sum_c weight[c] t'[n, c, ...] logp[n, c, ...],  t' = t (1 - eps) + eps / C.
// Mean divides the sum by the number of positions N d1 ... dk (numel / C), not by a sum of
// weights as the index form does: PyTorch's definition, where a weight scales a class's term
// without renormalising the mean. Targets are used as given (no check that they sum to 1 or lie
// in [0, 1], as in PyTorch). The op order is PyTorch's, ((logp * t') * weight).sum(), so 16-bit
// inputs (outside autocast) are rounded at the same steps as by PyTorch's ops.
TensorList cross_entropy_prob(const char* op, const Tensor& logits, const Tensor& target, const Tensor& weight,
                              int64_t ignore, Reduction red, double eps) {
  MT_CHECK(target.sizes() == logits.sizes(), op, ": a floating target holds class probabilities and must have the "
           "logits' shape ", shape_str(logits.sizes()), " (logits ", logits.describe(), "), got target ",
           target.describe(), "; class indices must be Int64");
  // PyTorch's rule: any negative ignore_index (the default -100 included) is accepted and unused.
  MT_CHECK(ignore < 0, op, ": ignore_index ", ignore, " is not supported with class-probability targets (",
           target.describe(), "): PyTorch accepts only a negative ignore_index here, such as the default -100");
  const int64_t cdim = logits.dim() == 1 ? 0 : 1;
  const int64_t classes = logits.sizes()[static_cast<size_t>(cdim)];
  check_class_weight(op, weight, classes);
  check_label_smoothing(op, eps);

  Tensor logp = log_softmax(logits, cdim);
  Tensor t = eps > 0.0 ? target * (1.0 - eps) + eps / static_cast<double>(classes) : target;
  Tensor prod = logp * t;
  if (weight.defined()) prod = prod * class_weight_view(weight, logits.dim(), cdim, classes);
  switch (red) {
    case Reduction::None: return {-sum(prod, IntList{cdim})};
    case Reduction::Sum: return {-sum(prod)};
    case Reduction::Mean: break;
  }
  // An empty input gives 0 / 0 = NaN, as PyTorch.
  const int64_t positions = classes > 0 ? logits.numel() / classes : 0;
  return {-sum(prod) / static_cast<double>(positions)};
}

// ---- cross_entropy(logits, target, weight?): a composite ----
TensorList cross_entropy_composite(const OpCall& c) {
  const char* op = c.name();
  const Tensor& logits = c.inputs[0];
  const Tensor& target = c.inputs[1];
  const Tensor& weight = c.inputs[2];
  const int64_t ignore = c.attrs.get<int64_t>("ignore_index");
  const Reduction red = loss_reduction(c.attrs, op);
  const double eps = c.attrs.get<double>("label_smoothing");
  check_loss_floating(op, logits, "logits");
  MT_CHECK(target.defined(), op, ": target is undefined");
  MT_CHECK(logits.dim() >= 1, op, ": expected logits of shape (N, C), (N, C, d1, ...) or (C), got ",
           logits.describe());
  if (is_floating(target.dtype())) return cross_entropy_prob(op, logits, target, weight, ignore, red, eps);
  // PyTorch reads a target of the logits' shape as probabilities whatever its dtype: say so
  // rather than report a shape mismatch against the index form's (N, d1, ...).
  MT_CHECK(target.sizes() != logits.sizes(), op, ": a target of the logits' shape ", shape_str(logits.sizes()),
           " holds class probabilities and must be floating, got ", target.describe(),
           " (class indices have shape ", shape_str(nll_geometry(logits.sizes()).target_shape), ")");

  // ---- class-index targets: torch 1.13's cross_entropy_loss_label_smoothing when eps > 0 ----
  const NllGeom geo = nll_check(op, logits, target, weight, "logits");
  check_label_smoothing(op, eps);
  const int64_t cdim = logits.dim() == 1 ? 0 : 1;
  Tensor logp = log_softmax(logits, cdim);
  Tensor nll = nll_loss(logp, target, weight, ignore, red);
  if (eps == 0.0) return {nll};

  // smooth_p = -sum_c weight[c] logp[n, c, ...], 0 where the target is ignored (PyTorch's
  // masked_fill: a -inf log-probability at an ignored position must not turn into NaN, so the
  // kept positions are selected rather than multiplied by a 0/1 mask).
  Tensor smooth;
  if (weight.defined()) {
    smooth = -sum(logp * class_weight_view(weight, logits.dim(), cdim, geo.c), IntList{cdim});
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
// ---- samples ----
// Class-index targets of a sample: exact Int64 values on the device of the logits (an Index
// sample argument draws uniform classes; these cases need ignore_index at given positions).
Tensor sample_targets(const Tensor& like, const IntList& sizes, const std::vector<double>& v) {
  return tensor(v, sizes, TensorOptions(DType::Int64)).to(like.device());
}
SampleArg sample_class_weight(std::vector<double> w) {
  const auto c = static_cast<int64_t>(w.size());
  return values_arg({c}, std::move(w)).constant();  // cross_entropy refuses a weight that requires grad
}
// Parity: log_softmax's 8 roundings (ops/softmax.cpp), then nll_loss (bit-identical on the
// device), so what remains are the sums this composite runs as sum ops, whose device kernel adds in
// another order: `terms` more roundings (the class sum of the smoothing or probability term plus
// the reduction's sum; all their terms have one sign: no cancellation).
SampleChecks ce_parity(double terms) { return SampleChecks{.parity_roundings = 8 + terms}; }

// Logits in (-2, 2); probability targets in (0, 1) are an input too (their gradient is
// -w t'/dt logp). The smoothing cases with an ignored target run index_select and its backward.
const OpSchema& kCrossEntropy =
    define_op("cross_entropy")
        .args({"input", "target", "weight"})
        .policy(AmpPolicy::FP32)
        .composite_of_ops(cross_entropy_composite)
        .sample("mean", {arg({4, 5}, -2, 2)},
                [](const TensorList& x) {
                  return TensorList{cross_entropy(x[0], sample_targets(x[0], {4}, {4, 0, 2, 2}))};
                },
                ce_parity(0))
        .sample("smoothing-weight-ignore", {arg({4, 5}, -2, 2), sample_class_weight({1.0, 0.5, 2.0, 1.5, 0.25})},
                [](const TensorList& x) {
                  return TensorList{cross_entropy(x[0], sample_targets(x[0], {4}, {4, -100, 2, 1}), x[1], -100,
                                                  Reduction::Mean, 0.2)};
                },
                ce_parity(5 + 3))
        .sample("smoothing-none", {arg({4, 5}, -2, 2)},
                [](const TensorList& x) {
                  return TensorList{cross_entropy(x[0], sample_targets(x[0], {4}, {4, 3, 2, 1}), Tensor(), 3,
                                                  Reduction::None, 0.1)};
                },
                ce_parity(5))
        .sample("spatial-sum", {arg({2, 3, 4}, -2, 2)},
                [](const TensorList& x) {
                  return TensorList{cross_entropy(x[0], sample_targets(x[0], {2, 4}, {0, 1, 2, 0, 2, 2, 1, 0}),
                                                  Tensor(), -100, Reduction::Sum, 0.3)};
                },
                ce_parity(3 + 8))
        .sample("prob-mean", {arg({4, 5}, -2, 2), arg({4, 5}, 0, 1)},
                [](const TensorList& x) { return TensorList{cross_entropy(x[0], x[1])}; }, ce_parity(20))
        .sample("prob-weight-smoothing-none",
                {arg({4, 5}, -2, 2), arg({4, 5}, 0, 1), sample_class_weight({1.0, 0.5, 2.0, 1.5, 0.25})},
                [](const TensorList& x) {
                  return TensorList{cross_entropy(x[0], x[1], x[2], -100, Reduction::None, 0.2)};
                },
                ce_parity(5))
        .sample("prob-spatial-weight-sum",
                {arg({2, 3, 2, 2}, -2, 2), arg({2, 3, 2, 2}, 0, 1), sample_class_weight({0.5, 2.0, 1.0})},
                [](const TensorList& x) {
                  return TensorList{cross_entropy(x[0], x[1], x[2], -100, Reduction::Sum, 0.1)};
                },
                ce_parity(24))
        .sample("prob-1d-mean", {arg({5}, -2, 2), arg({5}, 0, 1)},
                [](const TensorList& x) {
                  return TensorList{cross_entropy(x[0], x[1], Tensor(), -100, Reduction::Mean, 0.3)};
                },
                ce_parity(5));

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                     Reduction reduction, double label_smoothing) {
  check_constant("cross_entropy", weight, "weight");
  return dispatch1(kCrossEntropy, {logits, target, weight},
                   {{"ignore_index", ignore_index},
                    {"reduction", reduction_attr(reduction)},
                    {"label_smoothing", label_smoothing}});
}

}  // namespace mixtape
