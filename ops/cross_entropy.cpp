// ops/cross_entropy.cpp — cross_entropy: a composite of recorded ops (log_softmax, nll_loss and,
// with label smoothing, the smoothing sums), so it runs on every device and autograd gives its
// backward; torch 1.13's cross_entropy_loss_label_smoothing when label_smoothing > 0.
// Invariant: no kernel of its own; with label_smoothing = 0 the result is exactly
// nll_loss(log_softmax(logits, class dim)). AMP: fp32 as a whole (one decision for the
// composite; its pieces then run on f32 inputs).
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
