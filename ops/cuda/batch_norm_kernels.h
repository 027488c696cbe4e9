// ops/cuda/batch_norm_kernels.h — launchers of ops/cuda/batch_norm.cu (plain data, C++17).
// x, g are dense (N, C, S). Per-channel tensors (weight, bias, running and saved statistics, the
// statistics outputs) cross as BnChan: pointer, element stride and dtype, read and written in
// their own dtype by the kernels (no f64 copies). f64 scratch (partials, coefficients) is the
// caller's, sized by bn_scratch_doubles.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace mixtape::cuda {

struct BnShape {
  int64_t N, C, S;
};

// A (C) channel tensor of any floating dtype (data == nullptr: absent).
struct BnChan {
  void* data = nullptr;
  int64_t stride = 1;  // elements
  DType dtype = DType::Float32;
};

// How the M = N S values of a channel are cut into chunks for the statistics and gradient sums:
// `chunks` blocks per channel of `len` values (the last may be shorter). A function of the shape
// only, so results never depend on the GPU (bn_partition in batch_norm.cu says how).
struct BnPartition {
  int64_t chunks, len;
};
BnPartition bn_partition(BnShape v);
// f64 scratch the launchers below need: the partials (2 per chunk) and 3 coefficients per channel.
int64_t bn_scratch_doubles(BnShape v);

// batch_norm forward. training: 2 launches for the statistics (per-chunk partials, then a
// finalize that combines them in a fixed order, writes save_mean / save_invstd, updates the
// running statistics in place when given, and adds 1 to *counter when given), eval: 1 (the
// finalize reading running_mean / running_var); then 1 for out = x * scale[c] + shift[c] in
// acc_t, rounded once (none when x is empty).
cudaError_t launch_bn_forward(DType dt, const void* x, BnShape v, bool training, BnChan running_mean,
                              BnChan running_var, BnChan weight, BnChan bias, double momentum, double eps,
                              int64_t* counter, BnChan save_mean, BnChan save_invstd, double* scratch, void* out,
                              cudaStream_t s);

// batch_norm backward: sum_g[c] = sum g, sum_gxhat[c] = invstd[c] sum g (x - mean[c]) in f64
// (partials, then a finalize writing both outputs and the per-channel coefficients), then
// gx = ka g + kb x + kd (ops/normalization.cpp's coefficients). 3 launches (2 when x is empty).
cudaError_t launch_bn_backward(DType dt, const void* g, const void* x, BnShape v, bool training, BnChan weight,
                               BnChan save_mean, BnChan save_invstd, BnChan sum_gxhat, BnChan sum_g, double* scratch,
                               void* gx, cudaStream_t s);

}  // namespace mixtape::cuda
