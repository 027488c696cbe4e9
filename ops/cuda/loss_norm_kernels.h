// ops/cuda/loss_norm_kernels.h — launchers of ops/cuda/loss_norm.cu (plain data, C++17): the
// elementwise losses (mse, binary cross-entropy and its gradient, bce with logits) and layer_norm.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace mixtape::cuda {

enum class LossKind : uint8_t { Mse, Bce, BceLogits };
// Per element i of dense x, t (dtype dt) and optional dense weights w, pw (acc dtype: f32, or f64
// for f64): the loss term l_i in acc_t. reduction 0: out[i] = l_i (dtype dt); 1 mean / 2 sum:
// out[0] = (sum l_i in f64) (/ n), rounded once. scratch: loss_scratch_doubles() doubles.
int loss_scratch_doubles();
cudaError_t launch_loss(LossKind kind, DType dt, const void* x, const void* t, const void* w, const void* pw, int64_t n,
                        int reduction, void* out, double* scratch, cudaStream_t s);
// binary_cross_entropy_backward: out[i] = g (g[i] or g[0]) w (p - t) / max((1 - p) p, 1e-12) (/ n).
cudaError_t launch_bce_backward(DType dt, const void* g, const void* p, const void* t, const void* w, int64_t n,
                                int reduction, void* out, cudaStream_t s);
// Lowers *first (a deferred-check slot, core/cuda/deferred_check.h) to the first index whose
// probability is outside [0, 1] (NaN included).
cudaError_t launch_first_bad_probability(DType dt, const void* p, int64_t n, unsigned long long* first,
                                         cudaStream_t s);

// layer_norm over rows of M contiguous values: one thread per row in the CPU's order (f64 mean,
// then squared deviations), y = (x rstd - rstd mean) w + b in acc_t (w, b: acc dtype, may be null);
// mean, rstd: f64 per row.
cudaError_t launch_layer_norm(DType dt, const void* x, const void* w, const void* b, int64_t rows, int64_t M, double eps,
                              void* y, double* mean, double* rstd, cudaStream_t s);

}  // namespace mixtape::cuda
