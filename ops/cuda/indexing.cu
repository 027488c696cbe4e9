// ops/cuda/indexing.cu — gather / scatter_add and index_select / its backward on the device
// (ops/indexing.cpp, ops/shape_ops.cpp). An index value out of range is recorded in a deferred-check
// slot (core/cuda/deferred_check.h) and its element skipped, so kernels never read out of bounds. Gathers are plain
// copies (exact). Scatters accumulate with atomic adds in the compute type (f32 for 16-bit, as the CPU's accumulator),
// so where several indices hit one element the order of the additions is not the CPU's sequential order: such elements
// differ by summation order only (unique indices: exact).
#include "ops/cuda/indexing_kernels.h"
#include "ops/cuda/loops.cuh"

namespace mixtape::cuda {
namespace {

// Whether index value v is in [0, n); records position p in `bad` when it is not.
__device__ __forceinline__ bool in_range(int64_t v, int64_t n, int64_t p, unsigned long long* bad) {
  if (v >= 0 && v < n) return true;
  atomicMin(bad, static_cast<unsigned long long>(p));
  return false;
}

__device__ __forceinline__ int64_t data_offset(const IndexGeom& g, const int64_t* index, int64_t i) {
  int64_t rem = i, off = 0;
  for (int d = g.nd - 1; d >= 0; --d) {
    int64_t c = rem % g.sizes[d];
    rem /= g.sizes[d];
    if (d == g.dim) c = index[i];
    off += c * g.data_strides[d];
  }
  return off;
}

template <typename U>
__global__ void gather_kernel(IndexGeom g, const U* data, const int64_t* index, U* out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < g.n; i += int64_t(blockDim.x) * gridDim.x)
    out[i] = in_range(index[i], g.dim_size, i, g.bad) ? data[data_offset(g, index, i)] : U(0);
}

__device__ __forceinline__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(int32_t* p, int32_t v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(int64_t* p, int64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));  // two's complement
}

template <typename T>
__global__ void scatter_add_kernel(IndexGeom g, const T* src, const int64_t* index, T* acc) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < g.n; i += int64_t(blockDim.x) * gridDim.x)
    if (in_range(index[i], g.dim_size, i, g.bad)) atomic_add(acc + data_offset(g, index, i), src[i]);
}

template <typename U>
__global__ void index_select_kernel(const U* x, const int64_t* idx, U* out, int64_t outer, int64_t n, int64_t k,
                                    int64_t inner, unsigned long long* bad) {
  const int64_t total = outer * k * inner;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(blockDim.x) * gridDim.x) {
    const int64_t i = e % inner, r = e / inner, j = r % k, o = r / k;
    out[e] = in_range(idx[j], n, j, bad) ? x[(o * n + idx[j]) * inner + i] : U(0);
  }
}

template <typename T>
__global__ void index_add_kernel(const T* g, const int64_t* idx, T* acc, int64_t outer, int64_t n, int64_t k,
                                 int64_t inner, unsigned long long* bad) {
  const int64_t total = outer * k * inner;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(blockDim.x) * gridDim.x) {
    const int64_t i = e % inner, r = e / inner, j = r % k, o = r / k;
    if (in_range(idx[j], n, j, bad)) atomic_add(acc + (o * n + idx[j]) * inner + i, g[e]);
  }
}

// When the selection moves no element (outer * inner == 0) the indices are still checked, as on
// the CPU.
__global__ void check_indices_kernel(const int64_t* idx, int64_t k, int64_t n, unsigned long long* bad) {
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < k; j += int64_t(blockDim.x) * gridDim.x)
    in_range(idx[j], n, j, bad);
}

template <typename Fn>
cudaError_t by_size(size_t elem_size, Fn&& fn) {
  switch (elem_size) {
    case 1: return fn(TypeTag<uint8_t>{});
    case 2: return fn(TypeTag<uint16_t>{});
    case 4: return fn(TypeTag<uint32_t>{});
    case 8: return fn(TypeTag<uint64_t>{});
    default: return cudaErrorInvalidValue;
  }
}
template <typename Fn>
cudaError_t by_acc(DType dt, Fn&& fn) {
  switch (dt) {
    case DType::Float32: return fn(TypeTag<float>{});
    case DType::Float64: return fn(TypeTag<double>{});
    case DType::Int32: return fn(TypeTag<int32_t>{});
    case DType::Int64: return fn(TypeTag<int64_t>{});
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch_gather(size_t elem_size, const IndexGeom& g, const void* data, const int64_t* index, void* out,
                          cudaStream_t s) {
  if (g.n == 0) return cudaSuccess;
  return by_size(elem_size, [&](auto tag) {
    using U = typename decltype(tag)::type;
    return launch_kernel(gather_kernel<U>, grid_for(g.n, kThreads), kThreads, 0, s, g, static_cast<const U*>(data),
                         index, static_cast<U*>(out));
  });
}

cudaError_t launch_scatter_add(DType dt, const IndexGeom& g, const void* src, const int64_t* index, void* acc,
                               cudaStream_t s) {
  if (g.n == 0) return cudaSuccess;
  return by_acc(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch_kernel(scatter_add_kernel<T>, grid_for(g.n, kThreads), kThreads, 0, s, g, static_cast<const T*>(src),
                         index, static_cast<T*>(acc));
  });
}

cudaError_t launch_index_select(size_t elem_size, const void* x, const int64_t* idx, void* out, int64_t outer,
                                int64_t n, int64_t k, int64_t inner, unsigned long long* bad, cudaStream_t s) {
  const int64_t total = outer * k * inner;
  if (total == 0)
    return k == 0 ? cudaSuccess : launch_kernel(check_indices_kernel, grid_for(k, kThreads), kThreads, 0, s, idx, k, n, bad);
  return by_size(elem_size, [&](auto tag) {
    using U = typename decltype(tag)::type;
    return launch_kernel(index_select_kernel<U>, grid_for(total, kThreads), kThreads, 0, s, static_cast<const U*>(x),
                         idx, static_cast<U*>(out), outer, n, k, inner, bad);
  });
}

cudaError_t launch_index_add(DType dt, const void* g, const int64_t* idx, void* acc, int64_t outer, int64_t n,
                             int64_t k, int64_t inner, unsigned long long* bad, cudaStream_t s) {
  const int64_t total = outer * k * inner;
  if (total == 0)
    return k == 0 ? cudaSuccess : launch_kernel(check_indices_kernel, grid_for(k, kThreads), kThreads, 0, s, idx, k, n, bad);
  return by_acc(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch_kernel(index_add_kernel<T>, grid_for(total, kThreads), kThreads, 0, s, static_cast<const T*>(g), idx,
                         static_cast<T*>(acc), outer, n, k, inner, bad);
  });
}

}  // namespace mixtape::cuda
