// ops/cuda/softmax_loss_kernels.h — launchers of ops/cuda/softmax_loss.cu (plain data, C++17).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace mixtape::cuda {

// x, y dense (outer, len, inner); y = softmax or log_softmax along len.
cudaError_t launch_softmax(bool log, DType dt, const void* x, void* y, int64_t outer, int64_t len, int64_t inner,
                           cudaStream_t s);
// out = log ? g - exp(y) sum(g) : y (g - sum(g y)), all dense (outer, len, inner).
cudaError_t launch_softmax_grad(bool log, DType dt, const void* g, const void* y, void* out, int64_t outer,
                                int64_t len, int64_t inner, cudaStream_t s);

// nll geometry: input (N, C, S) dense (S = product of the spatial dims, 1 without), target (N, S)
// i64 dense and already checked in [0, C) or == ignore, weight (C) f64 dense or null.
struct NllArgs {
  const void* x;
  const int64_t* target;
  const double* weight;
  int64_t n, c, s, ignore;
  int reduction;  // 0 none, 1 mean, 2 sum
  // Device slot of a deferred check (core/cuda/deferred_check.h): the first position whose target
  // is neither a class in [0, c) nor ignore; such a target counts as ignored.
  unsigned long long* bad;
};
// out: (N, S) for none, else one element. scratch: 2 N S doubles (mean/sum).
cudaError_t launch_nll(DType dt, const NllArgs& a, void* out, double* scratch, cudaStream_t s);
// out (N, C, S), zero-filled by the caller, receives -w[t] g (/ total weight for mean) at targets.
// scratch: 1 double (mean).
cudaError_t launch_nll_backward(DType dt, const NllArgs& a, const void* g, void* out, double* scratch,
                                cudaStream_t s);

}  // namespace mixtape::cuda
