// optim/clip_grad.h — gradient-norm clipping, PyTorch's torch.nn.utils.clip_grad_norm_.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace mixtape::optim {

// Rescales the gradients of `params` in place so that their total norm is at most max_norm, and
// returns the total norm before clipping.
//   total = (sum over every element g of every defined grad of |g|^p)^(1/p)   (p = norm_type > 0)
//   total = max |g|                                                          (norm_type = +inf)
// computed in f64 whatever the grads' dtypes (16-bit and f32 values are exact in f64; the sum is
// the only rounding). Then, as PyTorch: coef = max_norm / (total + 1e-6), clamped to 1, and every
// grad is multiplied by coef (16-bit grads in float, rounded once), skipped when coef is 1.
// Parameters whose grad is undefined are ignored; no grads at all returns 0.
// Non-finite grads (PyTorch's behaviour with error_if_nonfinite=False, kept):
//   total = inf  -> coef = 0: finite grads become 0 (+-0), inf grads become NaN;
//   total = NaN  -> coef = NaN: every grad becomes NaN.
// Under AMP, clip the unscaled grads: scaler.unscale_(opt) first, then clip model.parameters(),
// as in PyTorch. That holds for a 16-bit model too: its parameters' grads are FP32 (the optimizer
// sets their grad_dtype, optim/optimizer.h) and unscale_ unscaled them in place.
// clip_grad_norm_ reads the total norm back (one host sync, whatever the number of parameters);
// clip_grad_norm_on_device_ does the same and returns it as a 0-d f64 tensor on the (first)
// gradient's device instead: the norm, the coefficient and the scaling all stay on the devices,
// so a step that clips never waits for them (docs/CUDA.md, "A step with no host sync"). It
// multiplies every grad (by 1 when nothing needs clipping: the same values, but every grad's
// version advances). No grads: a CPU 0. Gradients may be on several devices: the per-gradient
// partials meet on the first gradient's device, the coefficient goes to each gradient's.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);
Tensor clip_grad_norm_on_device_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

// clip_grad_norm_ in three parts, for gradients spread over processes (distributed::
// ZeroRedundancyOptimizer, where each rank holds a shard of them): this process's
// grad_norm_pow_sum (the sum of |g|^p over the defined grads of `params`, p = inf: the max |g|, a
// 0-d f64 on the first grad's device, a CPU 0 when none), combined by the caller across the
// processes (a sum; a max for inf), total_norm_from_pow_sum (the p-th root), then
// clip_grads_with_norm_, which scales `params`' grads by clip_grad_norm_'s coefficient for that
// total. One process: the same numbers as clip_grad_norm_.
Tensor grad_norm_pow_sum(const std::vector<Tensor>& params, double norm_type = 2.0);
double total_norm_from_pow_sum(double pow_sum, double norm_type = 2.0);
void clip_grads_with_norm_(const std::vector<Tensor>& params, double max_norm, double total_norm);

}  // namespace mixtape::optim
