// ops/normalization_functors.h — the arithmetic of batch_norm and layer_norm written once for the
// CPU loops (ops/normalization.cpp) and the CUDA kernels (ops/cuda/batch_norm.cu, loss_norm.cu)
// (MIXTAPE_HD): per-channel coefficients in f64, the running-statistics update, the backward's
// per-channel coefficients, and one layer_norm row (statistics in f64, two passes; the affine
// transform in acc_t<T>, rounded once on store). Each backend keeps only its loop over channels
// or rows. C++17-clean: CUDA translation units include this header.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/macros.h"

namespace mixtape::fn {

// batch_norm forward: out = x * scale + shift per channel, from the statistics used (mean, var),
// weight w (1 without) and bias b (0 without).
struct BnCoefficients {
  double invstd, scale, shift;
};
MIXTAPE_INLINE BnCoefficients bn_coefficients(double mean, double var, double w, double b, double eps) {
  const double invstd = 1.0 / std::sqrt(var + eps);
  const double scale = invstd * w;
  return {invstd, scale, b - mean * scale};
}

// running = (1 - momentum) running + momentum batch.
MIXTAPE_INLINE double bn_running(double running, double batch, double momentum) {
  return (1.0 - momentum) * running + momentum * batch;
}

// batch_norm backward: grad_x = ka g + kb x + kd per channel, M values per channel. Training:
// k (g - mean(g) - xhat mean(g xhat)), xhat = (x - mean) invstd, expanded in x; eval: k g.
struct BnGradCoefficients {
  double ka, kb, kd;
};
MIXTAPE_INLINE BnGradCoefficients bn_grad_coefficients(double w, double invstd, double mean, double sum_g,
                                                       double sum_gxhat, double M, bool training) {
  const double k = w * invstd;
  if (!training) return {k, 0.0, 0.0};
  const double kb = -k * invstd * sum_gxhat / M;
  return {k, kb, -k * sum_g / M - kb * mean};
}

// One layer_norm row of M values: mean and rstd = 1 / sqrt(var + eps) in f64 (M == 0: NaN, as
// PyTorch's), y = (x * rstd - rstd * mean) * w + b in acc_t<T> (PyTorch's form), w / b optional.
template <typename T>
MIXTAPE_INLINE void layer_norm_row(const T* xr, const acc_t<T>* w, const acc_t<T>* b, int64_t M, double eps, T* yr,
                                   double& mean, double& rstd) {
  using A = acc_t<T>;
  double s = 0;
  for (int64_t j = 0; j < M; ++j) s += static_cast<double>(static_cast<A>(xr[j]));
  const double mu = s / static_cast<double>(M);
  double q = 0;
  for (int64_t j = 0; j < M; ++j) {
    const double d = static_cast<double>(static_cast<A>(xr[j])) - mu;
#if defined(__CUDA_ARCH__)
    q += __dmul_rn(d, d);  // nvcc would fuse d * d + q into an FMA; the CPU (-ffp-contract=off) rounds twice
#else
    q += d * d;
#endif
  }
  const double rs = 1.0 / std::sqrt(q / static_cast<double>(M) + eps);
  mean = mu;
  rstd = rs;
  const A scale = static_cast<A>(rs), shift = static_cast<A>(-rs * mu);
  for (int64_t j = 0; j < M; ++j) {
    A y = static_cast<A>(xr[j]) * scale + shift;
    if (w) y = y * w[j];
    if (b) y = y + b[j];
    yr[j] = static_cast<T>(y);
  }
}

}  // namespace mixtape::fn
