// ops/cuda/loops.cuh — the CUDA elementwise machinery every pointwise kernel shares (the device
// twin of ops/cpu/loops.h): grid-stride loops over N operands, an offset calculator over up to
// kMaxDims broadcast/strided dims with 32-bit index arithmetic when the element count allows it
// (64-bit otherwise), and a vectorized path (16-byte loads) for dense operands.
//
// Invariant, as on the CPU: a map functor receives storage values and returns a storage value;
// the wrappers in this file widen to acc_t<T>, call the shared MIXTAPE_HD functor and round once
// on store, so a CUDA result equals the CPU result wherever the functor's arithmetic is exact
// (+ - * / and conversions; transcendental functions may differ by a few ulp).
// Included by .cu files only (C++17).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/cuda/launch.cuh"
#include "core/dtype.h"
#include "ops/cuda/kernel_api.h"

namespace mixtape::cuda {

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls fn(TypeTag<T>{}) for a floating dtype; returns cudaErrorInvalidValue for other dtypes
// (the .cpp glue checks dtypes first and names the op, so this is a backstop).
template <typename Fn>
cudaError_t visit_floating_cuda(DType dt, Fn&& fn) {
  switch (dt) {
    case DType::Float16: return fn(TypeTag<Half>{});
    case DType::BFloat16: return fn(TypeTag<BFloat16>{});
    case DType::Float32: return fn(TypeTag<float>{});
    case DType::Float64: return fn(TypeTag<double>{});
    default: return cudaErrorInvalidValue;
  }
}
// Every dtype except bool (integers compute in their own type, as on the CPU).
template <typename Fn>
cudaError_t visit_numeric_cuda(DType dt, Fn&& fn) {
  switch (dt) {
    case DType::UInt8: return fn(TypeTag<uint8_t>{});
    case DType::Int32: return fn(TypeTag<int32_t>{});
    case DType::Int64: return fn(TypeTag<int64_t>{});
    default: return visit_floating_cuda(dt, fn);
  }
}
template <typename Fn>
cudaError_t visit_all_cuda(DType dt, Fn&& fn) {
  if (dt == DType::Bool) return fn(TypeTag<bool>{});
  return visit_numeric_cuda(dt, fn);
}

// Blocks for n elements at `per_thread` elements per thread, capped so a grid-stride loop covers
// the rest (a few waves of any current GPU; the cap keeps 64-bit counts launchable).
inline unsigned grid_for(int64_t n, int threads, int per_thread = 1) {
  int64_t blocks = (n + int64_t(threads) * per_thread - 1) / (int64_t(threads) * per_thread);
  if (blocks < 1) blocks = 1;
  if (blocks > 65535LL * 8) blocks = 65535LL * 8;
  return static_cast<unsigned>(blocks);
}
inline constexpr int kThreads = 256;

template <typename T, int N>
struct Array {
  T v[N];
  __host__ __device__ T& operator[](int i) { return v[i]; }
  __host__ __device__ const T& operator[](int i) const { return v[i]; }
};

// Linear index -> byte offset of each operand. Index arithmetic in IndexT (uint32_t when the
// element count fits: integer division is the cost of a strided kernel), offsets in int64.
template <int N, typename IndexT>
struct OffsetCalc {
  int ndim;
  IndexT sizes[kMaxDims];
  int64_t strides[N][kMaxDims];

  static OffsetCalc make(const Operands& ops) {
    OffsetCalc c{};
    c.ndim = ops.ndim;
    for (int d = 0; d < ops.ndim; ++d) {
      c.sizes[d] = static_cast<IndexT>(ops.sizes[d]);
      for (int k = 0; k < N; ++k) c.strides[k][d] = ops.strides[k][d];
    }
    return c;
  }
  __device__ __forceinline__ Array<int64_t, N> get(IndexT idx) const {
    Array<int64_t, N> off;
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d) {
      if (d >= ndim) continue;
      const IndexT i = idx % sizes[d];
      idx /= sizes[d];
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += static_cast<int64_t>(i) * strides[k][d];
    }
    return off;
  }
};

// ---- map: out = f(in_0, ..., in_{NIN-1}); all inputs of type In, output of type Out ----

template <typename F, typename In, int NIN>
__device__ __forceinline__ auto apply(const F& f, const In (&x)[NIN]) {
  if constexpr (NIN == 1)
    return f(x[0]);
  else if constexpr (NIN == 2)
    return f(x[0], x[1]);
  else
    return f(x[0], x[1], x[2]);
}

template <typename Out, typename In, int NIN, typename F, typename IndexT>
__global__ void map_strided_kernel(OffsetCalc<NIN + 1, IndexT> oc, Array<char*, NIN + 1> p, IndexT n, F f) {
  for (IndexT i = static_cast<IndexT>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<IndexT>(blockDim.x) * gridDim.x) {
    const Array<int64_t, NIN + 1> off = oc.get(i);
    In x[NIN];
#pragma unroll
    for (int k = 0; k < NIN; ++k) x[k] = *reinterpret_cast<const In*>(p[k + 1] + off[k + 1]);
    *reinterpret_cast<Out*>(p[0] + off[0]) = apply(f, x);
  }
}

template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

// Dense operands: each thread handles V consecutive elements through one vector load/store per
// operand when every pointer is aligned to the vector (`vec`); the tail and unaligned buffers
// go element by element.
template <typename Out, typename In, int NIN, int V, typename F>
__global__ void map_contig_kernel(Array<char*, NIN + 1> p, int64_t n, bool vec, F f) {
  Out* out = reinterpret_cast<Out*>(p[0]);
  const int64_t stride = int64_t(blockDim.x) * gridDim.x * V;
  for (int64_t base = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V; base < n; base += stride) {
    if (vec && base + V <= n) {
      Vec<In, V> xv[NIN];
#pragma unroll
      for (int k = 0; k < NIN; ++k) xv[k] = *reinterpret_cast<const Vec<In, V>*>(reinterpret_cast<const In*>(p[k + 1]) + base);
      Vec<Out, V> ov;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        In x[NIN];
#pragma unroll
        for (int k = 0; k < NIN; ++k) x[k] = xv[k].v[j];
        ov.v[j] = apply(f, x);
      }
      *reinterpret_cast<Vec<Out, V>*>(out + base) = ov;
    } else {
      for (int64_t e = base; e < n && e < base + V; ++e) {
        In x[NIN];
#pragma unroll
        for (int k = 0; k < NIN; ++k) x[k] = reinterpret_cast<const In*>(p[k + 1])[e];
        out[e] = apply(f, x);
      }
    }
  }
}

// Launches the map over `ops` (operand 0 = out). kWide64: also instantiate the 64-bit-index
// strided kernel; without it, callers must hand strided work of >= 2^31 elements over as dense
// copies (ops/cuda/tensor_iter.cpp does), which keeps the number of kernel instantiations down.
template <typename Out, typename In, int NIN, typename F, bool kWide64 = false>
cudaError_t launch_map(const Operands& ops, F f, cudaStream_t s) {
  const int64_t n = ops.numel;
  if (n == 0) return cudaSuccess;
  Array<char*, NIN + 1> p;
  for (int k = 0; k <= NIN; ++k) p[k] = ops.data[k];
  if (ops.contiguous) {
    constexpr int kBytes = sizeof(In) > sizeof(Out) ? sizeof(In) : sizeof(Out);
    constexpr int V = kBytes >= 8 ? 2 : (kBytes >= 4 ? 4 : 8);  // 16-byte vectors of the wider type
    bool vec = reinterpret_cast<uintptr_t>(p[0]) % (sizeof(Out) * V) == 0;
    for (int k = 1; k <= NIN; ++k) vec = vec && reinterpret_cast<uintptr_t>(p[k]) % (sizeof(In) * V) == 0;
    return launch_kernel(map_contig_kernel<Out, In, NIN, V, F>, grid_for(n, kThreads, V), kThreads, 0, s, p, n, vec, f);
  }
  if (n <= INT32_MAX) {
    return launch_kernel(map_strided_kernel<Out, In, NIN, F, uint32_t>, grid_for(n, kThreads), kThreads, 0, s,
                         OffsetCalc<NIN + 1, uint32_t>::make(ops), p, uint32_t(n), f);
  }
  if constexpr (kWide64) {
    return launch_kernel(map_strided_kernel<Out, In, NIN, F, uint64_t>, grid_for(n, kThreads), kThreads, 0, s,
                         OffsetCalc<NIN + 1, uint64_t>::make(ops), p, uint64_t(n), f);
  }
  return cudaErrorInvalidValue;  // unreachable when the caller follows the contract above
}

// ---- wrappers: storage values in, shared functor on acc_t<T>, one rounding out ----

template <typename T, typename F>
struct UnaryMap {
  F f;
  __device__ __forceinline__ T operator()(T x) const { return static_cast<T>(f(static_cast<acc_t<T>>(x))); }
};
template <typename T, typename F>
struct BinaryMap {
  F f;
  __device__ __forceinline__ T operator()(T a, T b) const {
    return static_cast<T>(f(static_cast<acc_t<T>>(a), static_cast<acc_t<T>>(b)));
  }
};
// Comparisons: the functor yields 0/1 in the compute type; stored as bool.
template <typename T, typename F>
struct BinaryBoolMap {
  F f;
  __device__ __forceinline__ bool operator()(T a, T b) const {
    return f(static_cast<acc_t<T>>(a), static_cast<acc_t<T>>(b)) != acc_t<T>(0);
  }
};
// One operand is a wrapped number held in the compute type (never rounded to T).
template <typename Out, typename T, typename F>
struct ScalarMap {
  F f;
  acc_t<T> s;
  bool scalar_first;
  __device__ __forceinline__ Out operator()(T x) const {
    const acc_t<T> v = static_cast<acc_t<T>>(x);
    const acc_t<T> r = scalar_first ? f(s, v) : f(v, s);
    if constexpr (std::is_same<Out, bool>::value)
      return r != acc_t<T>(0);
    else
      return static_cast<T>(r);
  }
};

}  // namespace mixtape::cuda
