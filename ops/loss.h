// ops/loss.h — loss functions, with PyTorch's names, arguments and semantics (torch 1.13).
//
// Reduction::Mean and ::Sum return 0-d tensors; ::None returns the per-element losses. Every loss
// runs in f32 under autocast (PyTorch's CUDA fp32 list; docs/autocast-policy.md), binary_cross_entropy excepted: it is refused
// under CUDA autocast (use binary_cross_entropy_with_logits). Outside autocast a loss keeps its
// input's dtype; the per-element math runs in f32 (f64 for f64) and the reduction accumulates in
// f64, with one rounding on store. A `weight` (and `pos_weight`) is a constant: passing one that
// requires grad is an error, as in PyTorch.
#pragma once
#include "core/tensor.h"

namespace mixtape {

enum class Reduction { None, Mean, Sum };

// logp: (N, C) or (N, C, d1, ..., dk) log-probabilities, or (C) with a 0-d target.
// target: (N) or (N, d1, ..., dk) Int64 class indices in [0, C), or ignore_index.
// weight: (C) per-class weights, or undefined (all 1).
// loss at position p = -weight[t_p] * logp[n, t_p, ...] (0 where t_p == ignore_index); Mean
// divides the sum by the sum of weight[t_p] over the non-ignored positions (NaN if none).
Tensor nll_loss(const Tensor& logp, const Tensor& target, const Tensor& weight = {}, int64_t ignore_index = -100,
                Reduction reduction = Reduction::Mean);

// cross_entropy, in PyTorch's two forms (torch.nn.functional.cross_entropy), chosen by the target:
// logits: (N, C), (N, C, d1, ...) or (C); logp = log_softmax(logits, class dim); eps =
// label_smoothing in [0, 1].
// * Class indices (target Int64, shaped as for nll_loss): nll_loss(logp, target, weight,
//   ignore_index); with eps > 0,
//     (1 - eps) * nll + eps / C * smooth,  smooth_p = -sum_c weight[c] * logp[n, c, ...]
//   (0 at ignored positions; Mean divides by the same sum of weights as nll_loss), as torch 1.13.
// * Class probabilities (target floating, of the logits' shape, e.g. soft labels or mixup):
//     loss_p = -sum_c weight[c] * t'[n, c, ...] * logp[n, c, ...],  t' = target (1 - eps) + eps / C
//   per position p = (n, d1, ...); Mean divides the sum by the number of positions N d1 ... dk
//   (not by a sum of weights). Targets are used as given (they need not sum to 1). ignore_index
//   must be negative (the default -100 is; it has no effect), as in PyTorch. The result is in
//   the promoted dtype of logits, target and weight; a target that requires grad gets a gradient.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight = {},
                     int64_t ignore_index = -100, Reduction reduction = Reduction::Mean,
                     double label_smoothing = 0.0);

// (input - target)^2; input and target of the same shape (PyTorch broadcasts with a warning; a
// mismatch is an error here), the result in their promoted floating dtype.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

// -weight * (t log(p) + (1 - t) log(1 - p)), each log clamped at -100 (PyTorch).
// probs: probabilities in [0, 1] (anything else, NaN included, is an error); target: same shape;
// weight: broadcastable to probs' shape, or undefined.
Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target, const Tensor& weight = {},
                            Reduction reduction = Reduction::Mean);

// The stable form of binary_cross_entropy(sigmoid(x), t):
//   weight * ((1 - t) x + (1 + (pos_weight - 1) t) softplus(-x))
// logits, target: same shape; weight, pos_weight (e.g. (C) for (N, C) logits): broadcastable to
// the logits' shape, or undefined.
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, const Tensor& weight = {},
                                        const Tensor& pos_weight = {}, Reduction reduction = Reduction::Mean);

// ---- gradient ops (public so they are differentiable themselves and can be gradchecked) ----
// d nll_loss / d logp for the output gradient g (target's shape for None, 0-d otherwise):
// zeros(logp_sizes) with -weight[t] * g (/ total weight for Mean) at each target position.
Tensor nll_loss_backward(const Tensor& g, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                         Reduction reduction, const IntList& logp_sizes);
// d binary_cross_entropy / d probs: g * weight * (p - t) / max(p (1 - p), 1e-12) (/ numel for Mean).
Tensor binary_cross_entropy_backward(const Tensor& g, const Tensor& probs, const Tensor& target,
                                     const Tensor& weight, Reduction reduction);

const char* reduction_name(Reduction r);  // "none", "mean", "sum"

}  // namespace mixtape
