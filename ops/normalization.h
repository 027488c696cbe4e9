// ops/normalization.h — batch_norm and layer_norm, with PyTorch's semantics and argument order.
// Statistics accumulate in f64 on CPU; 16-bit inputs compute in f32 and round once on store.
#pragma once
#include <tuple>

#include "core/tensor.h"

namespace mixtape {

// Batch normalisation over the channel dim 1 of x: (N, C) or (N, C, *).
//   out = (x - mean_c) / sqrt(var_c + eps) * weight_c + bias_c, in x's dtype.
// training: mean/var are the batch statistics over every dim but 1 (biased var normalises);
//   running_mean / running_var (C), when defined, are updated in place, outside autograd, with
//   running = (1 - momentum) * running + momentum * batch (the running var takes the UNBIASED
//   batch var); their version counters are bumped. Needs more than one value per channel.
// eval: normalises with running_mean / running_var (both required).
// weight, bias: (C) or undefined (no affine). x may be f16/bf16 while weight, bias and the
// running statistics are f32 (docs/amp-behaviours.md behaviour 4): the output has x's dtype and the
// statistics stay f32. AMP policy None (on no autocast list).
// num_batches_tracked (an i64 tensor of one element, nn::BatchNorm2d's buffer) or undefined: a
// training call adds 1 to it in place, in the same kernel (version bumped; eval leaves it).
Tensor batch_norm(const Tensor& x, Tensor running_mean, Tensor running_var, const Tensor& weight, const Tensor& bias,
                  bool training, double momentum = 0.1, double eps = 1e-5, Tensor num_batches_tracked = {});

// The gradient of batch_norm for grad_out (x's shape): (grad_x, grad_weight, grad_bias), the
// last two (C) in the statistics dtype (f64 for f64 x, else f32). save_mean / save_invstd (C)
// are the statistics the forward normalised with (training: the batch's mean and
// 1/sqrt(var + eps), eval: the running ones). In training the returned grad_x is the total
// derivative (through the batch statistics), so gradients w.r.t. save_mean / save_invstd are
// not produced. Differentiable (double backward); weight may be undefined (= 1).
std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                                                       const Tensor& save_mean, const Tensor& save_invstd,
                                                       bool training, double eps);

// Layer normalisation over the trailing dims given by normalized_shape: x (*, normalized_shape).
//   out = (x - mean) / sqrt(var + eps) * weight + bias, mean / biased var over those dims.
// weight, bias: normalized_shape, or undefined. AMP policy FP32 (PyTorch's list): under
// autocast a 16-bit x is cast to f32 first. Backward written with ops (differentiable again).
Tensor layer_norm(const Tensor& x, IntList normalized_shape, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);

}  // namespace mixtape
