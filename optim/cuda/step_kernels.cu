// optim/cuda/step_kernels.cu — fused SGD / Adam / AdamW steps on the device from the SAME per-element
// functors as the CPU loop (optim/optim_functors.h: fn::SGDUpdate, fn::AdamUpdate, fn::unscale,
// fn::round_stochastic), so a step is bit-identical to the CPU step: the functors spell every
// fused multiply-add with madd() (__fmaf_rn / __fma_rn here, std::fma there) and every other
// operation is one IEEE operation. One pass per element: load the grad (widening a 16-bit one and
// unscaling it), update master and state in registers, store them and the 16-bit model copy.
// Also norm_pow_sum (clip_grad_norm_'s reduction, in double).
#include "core/cuda/launch.cuh"
#include "optim/cuda/step_kernels.h"
#include "optim/optim_functors.h"

namespace mixtape::optim::cuda {
using ::mixtape::cuda::launch_kernel;
namespace {

constexpr int kThreads = 256;
unsigned blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  if (b > 65535LL * 4) b = 65535LL * 4;
  return static_cast<unsigned>(b);
}

template <typename W>
__device__ __forceinline__ W load_grad(const FusedStepArgs& a, int64_t i) {
  if (a.grad_dtype == a.w_dtype) return static_cast<const W*>(a.grad)[i];  // arrives unscaled
  float g = a.grad_dtype == DType::Float16 ? float(static_cast<const Half*>(a.grad)[i])
                                           : float(static_cast<const BFloat16*>(a.grad)[i]);
  return static_cast<W>(fn::unscale(g, a.inv_scale));
}

template <typename W>
__device__ __forceinline__ void store_model(const FusedStepArgs& a, W w, int64_t i) {
  if constexpr (std::is_same<W, float>::value) {
    if (!a.model) return;
    if (a.model_dtype == DType::Float16) {
      static_cast<Half*>(a.model)[i] =
          a.stochastic ? fn::round_stochastic<Half>(w, fn::rounding_uniform(a.seed, a.offset, uint64_t(i))) : Half(w);
    } else {
      static_cast<BFloat16*>(a.model)[i] =
          a.stochastic ? fn::round_stochastic<BFloat16>(w, fn::rounding_uniform(a.seed, a.offset, uint64_t(i)))
                       : BFloat16(w);
    }
  }
}

template <typename W>
__global__ void sgd_kernel(FusedStepArgs a, fn::SGDUpdate<W> f, bool has_buf) {
  W* w = static_cast<W*>(a.w);
  W* buf = static_cast<W*>(a.state[0]);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += int64_t(blockDim.x) * gridDim.x) {
    W wi = w[i];
    W b = has_buf ? buf[i] : W(0);
    f(wi, load_grad<W>(a, i), b);
    w[i] = wi;
    if (has_buf) buf[i] = b;
    store_model<W>(a, wi, i);
  }
}

template <typename W>
__global__ void adam_kernel(FusedStepArgs a, fn::AdamUpdate<W> f) {
  W* w = static_cast<W*>(a.w);
  W* m = static_cast<W*>(a.state[0]);
  W* v = static_cast<W*>(a.state[1]);
  W* vmax = static_cast<W*>(a.state[2]);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += int64_t(blockDim.x) * gridDim.x) {
    W wi = w[i], mi = m[i], vi = v[i], vm = vmax ? vmax[i] : W(0);
    f(wi, load_grad<W>(a, i), mi, vi, vm);
    w[i] = wi;
    m[i] = mi;
    v[i] = vi;
    if (vmax) vmax[i] = vm;
    store_model<W>(a, wi, i);
  }
}

constexpr int kNormBlocks = 256;
// Stage 1: each block folds its elements into one double; stage 2 (one block) folds the partials.
// Order differs from the CPU's sequential sum: the result differs by summation order only.
__device__ __forceinline__ double fold(double acc, double a, bool is_max) {
  if (is_max) return (acc != acc) ? acc : ((a > acc || a != a) ? a : acc);  // NaN sticks
  return acc + a;
}
template <typename T>
__global__ void norm_partial_kernel(const T* x, int64_t n, double p, double* partials) {
  __shared__ double sh[kThreads];
  const bool is_max = ::isinf(p);
  double acc = 0.0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    const double v = static_cast<double>(static_cast<acc_t<T>>(x[i]));
    const double a = fabs(v);
    acc = fold(acc, is_max ? a : (p == 2.0 ? v * v : (p == 1.0 ? a : pow(a, p))), is_max);
  }
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) sh[threadIdx.x] = fold(sh[threadIdx.x], sh[threadIdx.x + w], is_max);
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = sh[0];
}
__global__ void norm_final_kernel(const double* partials, int count, double p, double* out) {
  if (threadIdx.x != 0) return;
  const bool is_max = ::isinf(p);
  double acc = 0.0;
  for (int i = 0; i < count; ++i) acc = fold(acc, partials[i], is_max);
  *out = acc;
}

}  // namespace

cudaError_t launch_sgd_step(const FusedStepArgs& a, const SGDParams& p, cudaStream_t s) {
  if (a.n == 0) return cudaSuccess;
  const bool has_buf = a.state[0] != nullptr;
  if (a.w_dtype == DType::Float64) {
    const auto f = fn::SGDUpdate<double>::make(p.lr, p.momentum, p.dampening, p.weight_decay, p.nesterov, p.first);
    return launch_kernel(sgd_kernel<double>, blocks_for(a.n), kThreads, 0, s, a, f, has_buf);
  } else {
    const auto f = fn::SGDUpdate<float>::make(p.lr, p.momentum, p.dampening, p.weight_decay, p.nesterov, p.first);
    return launch_kernel(sgd_kernel<float>, blocks_for(a.n), kThreads, 0, s, a, f, has_buf);
  }
}

cudaError_t launch_adam_step(const FusedStepArgs& a, const AdamParams& p, cudaStream_t s) {
  if (a.n == 0) return cudaSuccess;
  if (a.w_dtype == DType::Float64) {
    const auto f = fn::AdamUpdate<double>::make(p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, p.amsgrad, p.decoupled,
                                                p.step);
    return launch_kernel(adam_kernel<double>, blocks_for(a.n), kThreads, 0, s, a, f);
  } else {
    const auto f = fn::AdamUpdate<float>::make(p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, p.amsgrad, p.decoupled,
                                               p.step);
    return launch_kernel(adam_kernel<float>, blocks_for(a.n), kThreads, 0, s, a, f);
  }
}

int norm_partials_needed() { return kNormBlocks; }

cudaError_t launch_norm_pow_sum(const void* x, DType dt, int64_t n, double p, double* partials, double* out,
                                cudaStream_t s) {
  cudaError_t e = cudaSuccess;
  switch (dt) {
    case DType::Float16:
      e = launch_kernel(norm_partial_kernel<Half>, kNormBlocks, kThreads, 0, s, static_cast<const Half*>(x), n, p,
                        partials);
      break;
    case DType::BFloat16:
      e = launch_kernel(norm_partial_kernel<BFloat16>, kNormBlocks, kThreads, 0, s, static_cast<const BFloat16*>(x), n,
                        p, partials);
      break;
    case DType::Float32:
      e = launch_kernel(norm_partial_kernel<float>, kNormBlocks, kThreads, 0, s, static_cast<const float*>(x), n, p,
                        partials);
      break;
    case DType::Float64:
      e = launch_kernel(norm_partial_kernel<double>, kNormBlocks, kThreads, 0, s, static_cast<const double*>(x), n, p,
                        partials);
      break;
    default: return cudaErrorInvalidValue;
  }
  if (e != cudaSuccess) return e;
  return launch_kernel(norm_final_kernel, 1, 32, 0, s, partials, kNormBlocks, p, out);
}

}  // namespace mixtape::optim::cuda
