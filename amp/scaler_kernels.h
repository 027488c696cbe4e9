// amp/scaler_kernels.h — the GradScaler's two kernels as ops (PyTorch's names), callable directly:
// what amp::GradScaler runs, and what a test or a curious reader can run by hand.
//
//   _amp_foreach_non_finite_check_and_unscale_(found_inf, inv_scale, grads...)
//       One dispatch over a whole list of gradients (a multi-tensor op: one pass over memory, one
//       kernel launch on a GPU), each element through amp/amp_functors.h fn::UnscaleAndCheck.
//   _amp_update_scale_(scale, growth_tracker, found_inf)
//       The scale/tracker state machine, fn::update_scale.
// Both are in place and never recorded by autograd. Kernels: CPU here (scaler_kernels.cpp), CUDA
// in amp/cuda/scaler_ops.cpp (same op names, same operand checks and functors).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace mixtape::amp {

// For every element g of every tensor in `grads` (f32, f64, f16 or bf16, any mix of dtypes, all
// on one device): sets found_inf to 1 if g is inf/NaN (or, when inv_scale > 1, if g * inv_scale
// overflows), and for grads[i] with i < unscale_count stores g * inv_scale back in place (16-bit
// grads computed in float and rounded once). grads[unscale_count..] are only checked: the
// GradScaler uses that for 16-bit grads of parameters with FP32 masters, which the optimizer
// unscales at the copy into FP32 (optim/optimizer.h).
//   found_inf: 1-element f32, zeroed by the caller, only ever set to 1 (so several calls OR together)
//   inv_scale: 1-element f32 holding the inverse scale (docs/AMP.md#the-inverse-scale)
// Undefined entries in grads are skipped (a parameter without a gradient). Non-contiguous grads
// are handled through a contiguous copy written back.
void non_finite_check_and_unscale_(const std::vector<Tensor>& grads, const Tensor& found_inf,
                                   const Tensor& inv_scale, size_t unscale_count);
inline void non_finite_check_and_unscale_(const std::vector<Tensor>& grads, const Tensor& found_inf,
                                          const Tensor& inv_scale) {
  non_finite_check_and_unscale_(grads, found_inf, inv_scale, grads.size());
}

// PyTorch's torch._amp_update_scale_: updates `scale` (1-element f32) and `growth_tracker`
// (1-element i32) in place from `found_inf` (1-element f32; non-zero = an overflow this
// iteration). Rules in amp/amp_functors.h fn::update_scale. Returns `scale`.
Tensor update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                     double growth_factor, double backoff_factor, int64_t growth_interval);

}  // namespace mixtape::amp
