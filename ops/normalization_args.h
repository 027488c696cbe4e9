// ops/normalization_args.h — argument checks and shape arithmetic of batch_norm,
// batch_norm_backward and layer_norm, shared by the CPU kernels (ops/normalization.cpp, where
// they are defined) and the CUDA glue (ops/cuda/batch_norm_ops.cpp, loss_norm_ops.cpp), so both
// backends accept the same arguments and fail with the same messages. Internal: not part of the
// public API.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace mixtape {

// Statistics outputs (and the accumulation dtype of weight/bias on CUDA): f64 for f64 x, else f32.
DType norm_stat_dtype(DType x);

// x (N, C, *) viewed as contiguous (N, C, S), S the product of the trailing dims.
struct ChannelView {
  int64_t N, C, S;
  int64_t M() const { return N * S; }  // values per channel
};

// batch_norm: checks x (N, C, *) floating, the (C) running_mean / running_var / weight / bias
// (each optional), the running pair and eval-mode rules, more than one value per channel when
// training, eps >= 0, the batch counter (optional) i64 of one element. Returns x's channel view.
ChannelView check_batch_norm_args(const char* op, const Tensor& x, const Tensor& running_mean,
                                  const Tensor& running_var, const Tensor& weight, const Tensor& bias, bool training,
                                  double eps, const Tensor& num_batches_tracked = Tensor());

// batch_norm_backward: grad_out has x's shape; weight (C) optional; save_mean / save_invstd (C)
// required; more than one value per channel when training. Returns x's channel view.
ChannelView check_batch_norm_backward_args(const char* op, const Tensor& grad_out, const Tensor& x,
                                           const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd,
                                           bool training);

// layer_norm over the trailing normalized_shape of x (*, normalized_shape): rows of M values.
struct LayerNormRows {
  int64_t rows, M;     // x is (rows, M) when contiguous
  IntList stat_shape;  // (*, 1, ..., 1): the mean / rstd outputs
};
// Checks normalized_shape non-empty, x floating and ending with it, weight / bias (optional)
// floating of shape normalized_shape, eps >= 0.
LayerNormRows check_layer_norm_args(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    const IntList& normalized_shape, double eps);

}  // namespace mixtape
