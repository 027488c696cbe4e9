// ops/cuda/softmax_loss.cu — softmax / log_softmax and their gradients, nll_loss and its gradient, on
// the device. Softmax works on x viewed as (outer, len, inner) with the softmax dim in the middle
// (ops/softmax.cpp's layout); one thread owns one (outer, inner) row and walks it in the CPU's
// order (max, then sum of exp, then the outputs), so the only differences from the CPU are the
// exp/log ulps of libdevice vs glibc. Math in acc_t<T>, one rounding on store.
#include "ops/cuda/loops.cuh"
#include "ops/cuda/softmax_loss_kernels.h"

namespace mixtape::cuda {
namespace {

template <typename T, bool Log>
__global__ void softmax_kernel(const T* x, T* y, int64_t outer, int64_t len, int64_t inner) {
  using A = acc_t<T>;
  const int64_t rows = outer * inner;
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += int64_t(blockDim.x) * gridDim.x) {
    const int64_t off = (r / inner) * len * inner + r % inner;
    A m = -INFINITY, s = 0;
    for (int64_t j = 0; j < len; ++j) {
      const A v = static_cast<A>(x[off + j * inner]);
      m = (m < v) ? v : m;  // std::max(m, v): a NaN v keeps m (the sum turns the row into NaN)
    }
    for (int64_t j = 0; j < len; ++j) s += std::exp(static_cast<A>(x[off + j * inner]) - m);
    if (Log) s = std::log(s);
    for (int64_t j = 0; j < len; ++j) {
      const A d = static_cast<A>(x[off + j * inner]) - m;
      y[off + j * inner] = Log ? static_cast<T>(d - s) : static_cast<T>(std::exp(d) / s);
    }
  }
}

template <typename T, bool Log>
__global__ void softmax_grad_kernel(const T* g, const T* y, T* out, int64_t outer, int64_t len, int64_t inner) {
  using A = acc_t<T>;
  const int64_t rows = outer * inner;
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += int64_t(blockDim.x) * gridDim.x) {
    const int64_t off = (r / inner) * len * inner + r % inner;
    A s = 0;
    for (int64_t j = 0; j < len; ++j) {
      const int64_t i = off + j * inner;
      s += Log ? static_cast<A>(g[i]) : static_cast<A>(g[i]) * static_cast<A>(y[i]);
    }
    for (int64_t j = 0; j < len; ++j) {
      const int64_t i = off + j * inner;
      const A gv = static_cast<A>(g[i]), yv = static_cast<A>(y[i]);
      out[i] = Log ? static_cast<T>(gv - std::exp(yv) * s) : static_cast<T>(yv * (gv - s));
    }
  }
}

// nll: one thread per target position p = n * S + s; loss_p = -w[k] * x[(n C + k) S + s]. For
// mean/sum the per-position losses and weights go to f64 scratch, folded by nll_reduce_kernel.
// Whether target k is ignored; a k outside [0, c) is recorded in `bad` and ignored as well, so
// no thread reads or writes out of bounds because of it (the host reports it later).
__device__ __forceinline__ bool skip_target(int64_t k, int64_t c, int64_t ignore, int64_t p,
                                            unsigned long long* bad) {
  if (k == ignore) return true;
  if (k >= 0 && k < c) return false;
  if (bad) atomicMin(bad, static_cast<unsigned long long>(p));
  return true;
}

template <typename T>
__global__ void nll_kernel(const T* x, const int64_t* t, const double* w, int64_t n, int64_t c, int64_t s,
                           int64_t ignore, unsigned long long* bad, T* per_pos, double* loss_d, double* weight_d) {
  using A = acc_t<T>;
  const int64_t count = n * s;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < count; p += int64_t(blockDim.x) * gridDim.x) {
    const int64_t k = t[p];
    if (skip_target(k, c, ignore, p, bad)) {
      if (per_pos) per_pos[p] = static_cast<T>(A(0));
      if (loss_d) {
        loss_d[p] = 0.0;
        weight_d[p] = 0.0;
      }
      continue;
    }
    const A wk = w ? static_cast<A>(w[k]) : A(1);
    const A l = -wk * static_cast<A>(x[((p / s) * c + k) * s + p % s]);
    if (per_pos) per_pos[p] = static_cast<T>(l);
    if (loss_d) {
      loss_d[p] = static_cast<double>(l);
      weight_d[p] = static_cast<double>(wk);
    }
  }
}

// Sequential fold of the per-position values in index order (as the CPU loop), one thread: the
// reduced nll is bit-identical to the CPU's. Positions number N*S (a batch), so this is cheap.
template <typename T>
__global__ void nll_reduce_kernel(const double* loss_d, const double* weight_d, int64_t count, bool mean, T* out) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double total = 0, wsum = 0;
  for (int64_t p = 0; p < count; ++p) {
    total += loss_d[p];
    wsum += weight_d[p];
  }
  *out = static_cast<T>(mean ? total / wsum : total);
}

template <typename T>
__global__ void nll_backward_kernel(const T* g, const int64_t* t, const double* w, int64_t n, int64_t c, int64_t s,
                                    int64_t ignore, unsigned long long* bad, bool per_position,
                                    const double* scale_d, T* out) {
  using A = acc_t<T>;
  const int64_t count = n * s;
  const double scale = scale_d ? 1.0 / *scale_d : 1.0;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < count; p += int64_t(blockDim.x) * gridDim.x) {
    const int64_t k = t[p];
    if (skip_target(k, c, ignore, p, bad)) continue;
    const double gv = static_cast<double>(static_cast<A>(g[per_position ? p : 0]));
    out[((p / s) * c + k) * s + p % s] = static_cast<T>(-(w ? w[k] : 1.0) * gv * scale);
  }
}
// Total weight of the non-ignored targets, in index order (the CPU's total_weight).
__global__ void total_weight_kernel(const int64_t* t, const double* w, int64_t count, int64_t c, int64_t ignore,
                                    double* out) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double total = 0;
  for (int64_t p = 0; p < count; ++p)
    if (!skip_target(t[p], c, ignore, p, nullptr)) total += w ? w[t[p]] : 1.0;
  *out = total;
}

}  // namespace

cudaError_t launch_softmax(bool log, DType dt, const void* x, void* y, int64_t outer, int64_t len, int64_t inner,
                           cudaStream_t s) {
  const int64_t rows = outer * inner;
  if (rows == 0 || len == 0) return cudaSuccess;
  return visit_floating_cuda(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (log)
      return launch_kernel(softmax_kernel<T, true>, grid_for(rows, 128), 128, 0, s, static_cast<const T*>(x),
                           static_cast<T*>(y), outer, len, inner);
    else
      return launch_kernel(softmax_kernel<T, false>, grid_for(rows, 128), 128, 0, s, static_cast<const T*>(x),
                           static_cast<T*>(y), outer, len, inner);
  });
}

cudaError_t launch_softmax_grad(bool log, DType dt, const void* g, const void* y, void* out, int64_t outer,
                                int64_t len, int64_t inner, cudaStream_t s) {
  const int64_t rows = outer * inner;
  if (rows == 0 || len == 0) return cudaSuccess;
  return visit_floating_cuda(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto gp = static_cast<const T*>(g);
    auto yp = static_cast<const T*>(y);
    auto op = static_cast<T*>(out);
    if (log)
      return launch_kernel(softmax_grad_kernel<T, true>, grid_for(rows, 128), 128, 0, s, gp, yp, op, outer, len, inner);
    else
      return launch_kernel(softmax_grad_kernel<T, false>, grid_for(rows, 128), 128, 0, s, gp, yp, op, outer, len,
                           inner);
  });
}

cudaError_t launch_nll(DType dt, const NllArgs& a, void* out, double* scratch, cudaStream_t s) {
  const int64_t count = a.n * a.s;
  return visit_floating_cuda(dt, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    auto x = static_cast<const T*>(a.x);
    if (a.reduction == 0) {  // none
      if (count == 0) return cudaSuccess;
      return launch_kernel(nll_kernel<T>, grid_for(count, kThreads), kThreads, 0, s, x, a.target, a.weight, a.n, a.c,
                           a.s, a.ignore, a.bad, static_cast<T*>(out), nullptr, nullptr);
    }
    if (count > 0) {
      const cudaError_t e = launch_kernel(nll_kernel<T>, grid_for(count, kThreads), kThreads, 0, s, x, a.target,
                                          a.weight, a.n, a.c, a.s, a.ignore, a.bad, nullptr, scratch,
                                          scratch + count);
      if (e != cudaSuccess) return e;
    }
    return launch_kernel(nll_reduce_kernel<T>, 1, 32, 0, s, scratch, scratch + count, count, a.reduction == 1,
                         static_cast<T*>(out));
  });
}

cudaError_t launch_nll_backward(DType dt, const NllArgs& a, const void* g, void* out, double* scratch,
                                cudaStream_t s) {
  const int64_t count = a.n * a.s;
  if (count == 0) return cudaSuccess;
  if (a.reduction == 1) {
    cudaError_t e = launch_kernel(total_weight_kernel, 1, 32, 0, s, a.target, a.weight, count, a.c, a.ignore, scratch);
    if (e != cudaSuccess) return e;
  }
  return visit_floating_cuda(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch_kernel(nll_backward_kernel<T>, grid_for(count, kThreads), kThreads, 0, s, static_cast<const T*>(g),
                         a.target, a.weight, a.n, a.c, a.s, a.ignore, a.bad, a.reduction == 0,
                         a.reduction == 1 ? scratch : nullptr, static_cast<T*>(out));
  });
}

}  // namespace mixtape::cuda
