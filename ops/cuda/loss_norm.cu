// ops/cuda/loss_norm.cu — mse_loss, binary_cross_entropy (+ backward), binary_cross_entropy_with_logits
// and layer_norm on the device, each element's arithmetic written as ops/bce_loss.cpp, ops/mse_loss.cpp and
// ops/normalization.cpp write it (same operations in acc_t, same clamps). Reduced losses sum the
// terms in f64 (block partials, then one fold): the order differs from the CPU's sequential sum by
// f64 rounding only. layer_norm walks each row in one thread in the CPU's order: statistics are
// bit-identical.
#include "ops/cuda/loops.cuh"
#include "ops/normalization_functors.h"
#include "ops/cuda/loss_norm_kernels.h"

namespace mixtape::cuda {
namespace {

constexpr int kLossBlocks = 256;
constexpr double kBceEpsilon = 1e-12;

// std::max's rule, (a < b) ? b : a, so a NaN first argument passes through as on the CPU (CUDA's
// max() is fmax, which drops NaN).
template <typename A>
__device__ __forceinline__ A std_max(A a, A b) {
  return (a < b) ? b : a;
}

template <typename A>
__device__ __forceinline__ A loss_term(LossKind kind, A v, A t, const A* w, const A* pw, int64_t i) {
  A l;
  if (kind == LossKind::Mse) {
    const A d = v - t;
    return d * d;
  } else if (kind == LossKind::Bce) {
    const A log_p = std_max(std::log(v), A(-100)), log_1mp = std_max(std::log1p(-v), A(-100));
    l = (t - A(1)) * log_1mp - t * log_p;
  } else {
    const A softplus_neg = std_max(-v, A(0)) + std::log1p(std::exp(-std::abs(v)));
    const A lw = pw ? A(1) + (pw[i] - A(1)) * t : A(1);
    l = (A(1) - t) * v + lw * softplus_neg;
  }
  if (w) l *= w[i];
  return l;
}

template <typename T>
__global__ void loss_kernel(LossKind kind, const T* x, const T* t, const acc_t<T>* w, const acc_t<T>* pw, int64_t n,
                            T* out, double* partials) {
  using A = acc_t<T>;
  __shared__ double sh[kThreads];
  double acc = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    const A l = loss_term<A>(kind, static_cast<A>(x[i]), static_cast<A>(t[i]), w, pw, i);
    if (out)
      out[i] = static_cast<T>(l);
    else
      acc += static_cast<double>(l);
  }
  if (!partials) return;
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = sh[0];
}

template <typename T>
__global__ void loss_final_kernel(const double* partials, int count, int64_t n, bool mean, T* out) {
  if (threadIdx.x != 0) return;
  double total = 0;
  for (int i = 0; i < count; ++i) total += partials[i];
  *out = static_cast<T>(mean ? total / static_cast<double>(n) : total);
}

template <typename T>
__global__ void bce_backward_kernel(const T* g, const T* p, const T* t, const acc_t<T>* w, int64_t n, int reduction,
                                    T* out) {
  using A = acc_t<T>;
  const A count = static_cast<A>(n);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    const A v = static_cast<A>(p[i]), tv = static_cast<A>(t[i]);
    A r = static_cast<A>(g[reduction == 0 ? i : 0]) * (v - tv) / std_max((A(1) - v) * v, static_cast<A>(kBceEpsilon));
    if (w) r *= w[i];
    out[i] = static_cast<T>(reduction == 1 ? r / count : r);
  }
}

template <typename T>
__global__ void first_bad_kernel(const T* p, int64_t n, unsigned long long* first) {
  using A = acc_t<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    const A v = static_cast<A>(p[i]);
    if (!(v >= A(0) && v <= A(1)))
      atomicMin(first, static_cast<unsigned long long>(i));
  }
}

template <typename T>
__global__ void layer_norm_kernel(const T* x, const acc_t<T>* w, const acc_t<T>* b, int64_t rows, int64_t M, double eps,
                                  T* y, double* mean, double* rstd) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += int64_t(blockDim.x) * gridDim.x)
    fn::layer_norm_row<T>(x + r * M, w, b, M, eps, y + r * M, mean[r], rstd[r]);
}

}  // namespace

int loss_scratch_doubles() { return kLossBlocks; }

cudaError_t launch_loss(LossKind kind, DType dt, const void* x, const void* t, const void* w, const void* pw, int64_t n,
                        int reduction, void* out, double* scratch, cudaStream_t s) {
  return visit_floating_cuda(dt, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    auto xp = static_cast<const T*>(x);
    auto tp = static_cast<const T*>(t);
    auto wp = static_cast<const A*>(w);
    auto pwp = static_cast<const A*>(pw);
    if (reduction == 0) {
      if (n == 0) return cudaSuccess;
      return launch_kernel(loss_kernel<T>, grid_for(n, kThreads), kThreads, 0, s, kind, xp, tp, wp, pwp, n,
                           static_cast<T*>(out), nullptr);
    }
    cudaError_t e =
        launch_kernel(loss_kernel<T>, kLossBlocks, kThreads, 0, s, kind, xp, tp, wp, pwp, n, nullptr, scratch);
    if (e != cudaSuccess) return e;
    return launch_kernel(loss_final_kernel<T>, 1, 32, 0, s, scratch, kLossBlocks, n, reduction == 1,
                         static_cast<T*>(out));
  });
}

cudaError_t launch_bce_backward(DType dt, const void* g, const void* p, const void* t, const void* w, int64_t n,
                                int reduction, void* out, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return visit_floating_cuda(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch_kernel(bce_backward_kernel<T>, grid_for(n, kThreads), kThreads, 0, s, static_cast<const T*>(g),
                         static_cast<const T*>(p), static_cast<const T*>(t), static_cast<const acc_t<T>*>(w), n,
                         reduction, static_cast<T*>(out));
  });
}

cudaError_t launch_first_bad_probability(DType dt, const void* p, int64_t n, unsigned long long* first,
                                         cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return visit_floating_cuda(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch_kernel(first_bad_kernel<T>, grid_for(n, kThreads), kThreads, 0, s, static_cast<const T*>(p), n,
                         first);
  });
}

cudaError_t launch_layer_norm(DType dt, const void* x, const void* w, const void* b, int64_t rows, int64_t M, double eps,
                              void* y, double* mean, double* rstd, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  return visit_floating_cuda(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    return launch_kernel(layer_norm_kernel<T>, grid_for(rows, 128), 128, 0, s, static_cast<const T*>(x),
                         static_cast<const A*>(w), static_cast<const A*>(b), rows, M, eps, static_cast<T*>(y), mean,
                         rstd);
  });
}

}  // namespace mixtape::cuda
