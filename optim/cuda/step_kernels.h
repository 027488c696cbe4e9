// optim/cuda/step_kernels.h — the device side of the fused optimizer steps (single- and
// multi-tensor) and of the norm op optimizers use (optim/cuda/step_ops.cpp is the glue): plain
// pointers, C++17, no Tensor.
// Operand layout as optim/step_kernel.h: w (f32/f64 master or param, written), grad (W, or a
// 16-bit grad unscaled by inv_scale on the way in), model (16-bit copy written from w, or null),
// state buffers of dtype W.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace mixtape::optim::cuda {

struct FusedStepArgs {
  void* w = nullptr;
  DType w_dtype = DType::Float32;  // f32 or f64 (the compute type W)
  const void* grad = nullptr;
  DType grad_dtype = DType::Float32;
  void* model = nullptr;  // null: w is the parameter itself
  DType model_dtype = DType::Float16;
  void* state[3] = {nullptr, nullptr, nullptr};
  int64_t n = 0;
  float inv_scale = 1.0f;  // the inverse loss scale (docs/AMP.md#the-inverse-scale)
  bool stochastic = false;
  uint64_t seed = 0, offset = 0;
  // Capturable (optim/step_kernel.h): device pointers, read by the kernels. step non-null makes
  // the launch capturable: found_inf (may be null: never skip) non-zero skips the tensor, else
  // *step advances by one after the update; inv_scale_ptr (may be null) replaces inv_scale, lr
  // (non-null) replaces the params' lr, *step + 1 the update count (Adam) / *step == 0 first (SGD).
  // One launch's tensors share found_inf, inv_scale_ptr and lr.
  const float* found_inf = nullptr;
  const float* inv_scale_ptr = nullptr;
  const double* lr = nullptr;
  int64_t* step = nullptr;
};

struct SGDParams {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, first;
};
struct AdamParams {
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad, decoupled;
  int64_t step;
};

cudaError_t launch_sgd_step(const FusedStepArgs& a, const SGDParams& p, cudaStream_t s);
cudaError_t launch_adam_step(const FusedStepArgs& a, const AdamParams& p, cudaStream_t s);

// Multi-tensor steps: `count` tensors, each updated exactly as launch_sgd_step / launch_adam_step
// would update it alone (same functor values, same element indices for stochastic rounding), in
// as few launches as the kernel-parameter limit allows (multi_step_tensors_per_launch; a launch
// also ends where the rounding seed changes). Every tensor must have tensor 0's dtypes (w, grad,
// model or none), the same number of state buffers, inv_scale and stochastic; else
// cudaErrorInvalidValue and nothing is launched. Per tensor: first[k] is SGD's first (p.first is
// not read), step[k] Adam's step (p.step is not read). Empty tensors launch nothing.
cudaError_t launch_sgd_step_multi(const FusedStepArgs* tensors, const bool* first, int count, const SGDParams& p,
                                  cudaStream_t s);
cudaError_t launch_adam_step_multi(const FusedStepArgs* tensors, const int64_t* step, int count, const AdamParams& p,
                                   cudaStream_t s);
// How many tensors one launch of a multi-tensor step holds (its descriptor table's capacity).
int multi_step_tensors_per_launch(bool adam, DType w_dtype);
// out[0] (f64) = sum |x|^p (p = inf: max |x|, NaN sticks) over x (floating dtype), in double.
// `partials` holds at least norm_partials_needed() doubles of scratch.
int norm_partials_needed();
cudaError_t launch_norm_pow_sum(const void* x, DType dt, int64_t n, double p, double* partials, double* out,
                                cudaStream_t s);

}  // namespace mixtape::optim::cuda
