// ops/cuda/batch_norm.cu — batch_norm forward and backward kernels with ops/normalization.cpp's
// numerics: per-channel statistics and gradient sums in f64 (two passes: the mean, then squared
// deviations, so no cancellation), coefficients in f64, the elementwise transforms in acc_t<T>
// rounded once. One block per channel for the sums (threads stride over the N*S values, a tree
// combines them: the CPU sums sequentially, so f64 results differ in the last bits only).
// Direct kernels rather than cuDNN's batch norm: cuDNN accumulates statistics in f32, the CPU op
// (and so the parity test) in f64.
#include "ops/cuda/batch_norm_kernels.h"
#include "ops/cuda/loops.cuh"
#include "ops/normalization_functors.h"

namespace mixtape::cuda {
namespace {

constexpr int kBnThreads = 256;

__device__ double block_sum(double v, double* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  const double r = sh[0];
  __syncthreads();
  return r;
}

template <typename T>
__global__ void bn_stats_kernel(const T* x, BnShape v, double* mean, double* var, double* var_unbiased) {
  __shared__ double sh[kBnThreads];
  const int64_t M = v.N * v.S;
  for (int64_t c = blockIdx.x; c < v.C; c += gridDim.x) {
    double s = 0;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x)
      s += static_cast<double>(static_cast<acc_t<T>>(x[((i / v.S) * v.C + c) * v.S + i % v.S]));
    const double mu = block_sum(s, sh) / static_cast<double>(M);
    double q = 0;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
      const double d = static_cast<double>(static_cast<acc_t<T>>(x[((i / v.S) * v.C + c) * v.S + i % v.S])) - mu;
      q += d * d;
    }
    q = block_sum(q, sh);
    if (threadIdx.x == 0) {
      mean[c] = mu;
      var[c] = q / static_cast<double>(M);
      var_unbiased[c] = q / static_cast<double>(M - 1);
    }
  }
}

__global__ void bn_coefficients_kernel(int64_t C, const double* mean, const double* var, const double* w,
                                       const double* b, double eps, double* invstd, double* scale, double* shift,
                                       double* rm, double* rv, const double* var_unbiased, double momentum) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < C; c += int64_t(blockDim.x) * gridDim.x) {
    const fn::BnCoefficients k = fn::bn_coefficients(mean[c], var[c], w ? w[c] : 1.0, b ? b[c] : 0.0, eps);
    invstd[c] = k.invstd;
    scale[c] = k.scale;
    shift[c] = k.shift;
    if (rm) {
      rm[c] = fn::bn_running(rm[c], mean[c], momentum);
      rv[c] = fn::bn_running(rv[c], var_unbiased[c], momentum);
    }
  }
}

template <typename T>
__global__ void bn_affine_kernel(const T* x, BnShape v, const double* scale, const double* shift, T* out) {
  using A = acc_t<T>;
  const int64_t n = v.N * v.C * v.S;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    const int64_t c = (i / v.S) % v.C;
    out[i] = static_cast<T>(static_cast<A>(x[i]) * static_cast<A>(scale[c]) + static_cast<A>(shift[c]));
  }
}

template <typename T>
__global__ void bn_grad_sums_kernel(const T* g, const T* x, BnShape v, const double* mean, const double* invstd,
                                    double* sum_g, double* sum_gxhat) {
  using A = acc_t<T>;
  __shared__ double sh[kBnThreads];
  const int64_t M = v.N * v.S;
  for (int64_t c = blockIdx.x; c < v.C; c += gridDim.x) {
    double sg = 0, sgx = 0;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
      const int64_t o = ((i / v.S) * v.C + c) * v.S + i % v.S;
      const double gv = static_cast<double>(static_cast<A>(g[o]));
      sg += gv;
      sgx += gv * (static_cast<double>(static_cast<A>(x[o])) - mean[c]);
    }
    sg = block_sum(sg, sh);
    sgx = block_sum(sgx, sh);
    if (threadIdx.x == 0) {
      sum_g[c] = sg;
      sum_gxhat[c] = sgx * invstd[c];
    }
  }
}

__global__ void bn_grad_coeffs_kernel(BnShape v, const double* sum_g, const double* sum_gxhat, const double* mean,
                                      const double* invstd, const double* w, bool training, double* ka, double* kb,
                                      double* kd) {
  const double M = static_cast<double>(v.N * v.S);
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < v.C; c += int64_t(blockDim.x) * gridDim.x) {
    const fn::BnGradCoefficients k =
        fn::bn_grad_coefficients(w ? w[c] : 1.0, invstd[c], mean[c], sum_g[c], sum_gxhat[c], M, training);
    ka[c] = k.ka;
    kb[c] = k.kb;
    kd[c] = k.kd;
  }
}

template <typename T>
__global__ void bn_grad_input_kernel(const T* g, const T* x, BnShape v, const double* ka, const double* kb,
                                     const double* kd, T* gx) {
  using A = acc_t<T>;
  const int64_t n = v.N * v.C * v.S;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    const int64_t c = (i / v.S) % v.C;
    gx[i] = static_cast<T>(static_cast<A>(ka[c]) * static_cast<A>(g[i]) + static_cast<A>(kb[c]) * static_cast<A>(x[i]) +
                           static_cast<A>(kd[c]));
  }
}

unsigned channel_blocks(int64_t C) { return static_cast<unsigned>(C < 65535 ? (C < 1 ? 1 : C) : 65535); }

}  // namespace

cudaError_t launch_bn_stats(DType dt, const void* x, BnShape v, double* mean, double* var, double* var_unbiased,
                            cudaStream_t s) {
  return visit_floating_cuda(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch_kernel(bn_stats_kernel<T>, channel_blocks(v.C), kBnThreads, 0, s, static_cast<const T*>(x), v, mean,
                         var, var_unbiased);
  });
}

cudaError_t launch_bn_coefficients(int64_t C, const double* mean, const double* var, const double* w,
                                   const double* b, double eps, double* invstd, double* scale, double* shift,
                                   double* running_mean, double* running_var, const double* var_unbiased,
                                   double momentum, cudaStream_t s) {
  return launch_kernel(bn_coefficients_kernel, grid_for(C, 128), 128, 0, s, C, mean, var, w, b, eps, invstd, scale,
                       shift, running_mean, running_var, var_unbiased, momentum);
}

cudaError_t launch_bn_affine(DType dt, const void* x, BnShape v, const double* scale, const double* shift, void* out,
                             cudaStream_t s) {
  const int64_t n = v.N * v.C * v.S;
  if (n == 0) return cudaSuccess;
  return visit_floating_cuda(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch_kernel(bn_affine_kernel<T>, grid_for(n, kThreads), kThreads, 0, s, static_cast<const T*>(x), v, scale,
                         shift, static_cast<T*>(out));
  });
}

cudaError_t launch_bn_backward(DType dt, const void* g, const void* x, BnShape v, const double* mean,
                               const double* invstd, const double* w, bool training, double* sum_g, double* sum_gxhat,
                               double* coeffs, void* gx, cudaStream_t s) {
  return visit_floating_cuda(dt, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    auto gp = static_cast<const T*>(g);
    auto xp = static_cast<const T*>(x);
    cudaError_t e = launch_kernel(bn_grad_sums_kernel<T>, channel_blocks(v.C), kBnThreads, 0, s, gp, xp, v, mean,
                                  invstd, sum_g, sum_gxhat);
    if (e != cudaSuccess) return e;
    double* ka = coeffs;
    double* kb = coeffs + v.C;
    double* kd = coeffs + 2 * v.C;
    e = launch_kernel(bn_grad_coeffs_kernel, grid_for(v.C, 128), 128, 0, s, v, sum_g, sum_gxhat, mean, invstd, w,
                      training, ka, kb, kd);
    if (e != cudaSuccess) return e;
    const int64_t n = v.N * v.C * v.S;
    if (n == 0) return cudaSuccess;
    return launch_kernel(bn_grad_input_kernel<T>, grid_for(n, kThreads), kThreads, 0, s, gp, xp, v, ka, kb, kd,
                         static_cast<T*>(gx));
  });
}

}  // namespace mixtape::cuda
