// ops/cuda/batch_norm_kernels.h — launchers of ops/cuda/batch_norm.cu (plain data, C++17).
// x, g are dense (N, C, S); per-channel arrays are f64 device buffers of C values.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace mixtape::cuda {

struct BnShape {
  int64_t N, C, S;
};

// Training statistics: mean[c] = E x, var[c] = E (x - mean)^2, var_unbiased[c] (two passes, f64).
cudaError_t launch_bn_stats(DType dt, const void* x, BnShape v, double* mean, double* var, double* var_unbiased,
                            cudaStream_t s);
// Per channel: invstd = 1 / sqrt(var + eps), scale = invstd * w (1 without), shift = b - mean *
// scale (0 without b); with running (training): running = (1 - m) running + m batch (in place,
// f64 buffers; the caller writes them back in the running tensors' dtype).
cudaError_t launch_bn_coefficients(int64_t C, const double* mean, const double* var, const double* w,
                                   const double* b, double eps, double* invstd, double* scale, double* shift,
                                   double* running_mean, double* running_var, const double* var_unbiased,
                                   double momentum, cudaStream_t s);
// out = x * scale[c] + shift[c] in acc_t, rounded once.
cudaError_t launch_bn_affine(DType dt, const void* x, BnShape v, const double* scale, const double* shift, void* out,
                             cudaStream_t s);
// Backward: sum_g[c] = sum g, sum_gxhat[c] = invstd[c] * sum g (x - mean[c]) (f64), then
// gx = ka g + kb x + kd with ops/normalization.cpp's per-channel coefficients.
cudaError_t launch_bn_backward(DType dt, const void* g, const void* x, BnShape v, const double* mean,
                               const double* invstd, const double* w, bool training, double* sum_g, double* sum_gxhat,
                               double* coeffs /* 3 C */, void* gx, cudaStream_t s);

}  // namespace mixtape::cuda
