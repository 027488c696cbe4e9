// ops/cuda/reduce.cu — reductions over contiguous runs (sum, mean, max with its index), the device
// side of ops/cuda/reduce_ops.cpp. One block reduces one run (grid-stride over runs); threads
// stride through the run, then a shared-memory tree combines their partials.
// Accumulators follow the CPU's reduce_acc (ops/reduce.cpp): f64 for f32/f64 input, f32 for
// f16/bf16, i64 for integers — so a CUDA sum differs from the CPU's only by summation order.
// Max: NaN wins (the first NaN by index), otherwise the largest value with the smallest index:
// the same answer as the CPU's sequential scan, independent of how threads split the run.
#include <cmath>

#include "ops/cuda/loops.cuh"

namespace mixtape::cuda {
namespace {

template <typename T> struct ReduceAcc { using type = double; };
template <> struct ReduceAcc<Half> { using type = float; };
template <> struct ReduceAcc<BFloat16> { using type = float; };
template <> struct ReduceAcc<int64_t> { using type = int64_t; };
template <> struct ReduceAcc<int32_t> { using type = int64_t; };
template <> struct ReduceAcc<uint8_t> { using type = int64_t; };
template <> struct ReduceAcc<bool> { using type = int64_t; };

constexpr int kReduceThreads = 256;

template <typename T, typename Acc>
__global__ void sum_runs_kernel(const T* in, int64_t runs, int64_t len, Acc* out, bool mean) {
  __shared__ Acc part[kReduceThreads];
  for (int64_t r = blockIdx.x; r < runs; r += gridDim.x) {
    const T* p = in + r * len;
    Acc s = 0;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) s += static_cast<Acc>(static_cast<acc_t<T>>(p[j]));
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
      if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      Acc total = part[0];
      if (mean) {  // integer accumulators divide as integers, as the CPU's s / Acc(len)
        if constexpr (std::is_floating_point<Acc>::value)
          total = len ? total / static_cast<Acc>(len) : Acc(NAN);
        else
          total = len ? total / static_cast<Acc>(len) : Acc(0);
      }
      out[r] = total;
    }
    __syncthreads();
  }
}

template <typename A>
__device__ __forceinline__ bool is_nan_value(A v) {
  if constexpr (std::is_floating_point<A>::value)
    return v != v;
  else
    return false;
}
// Whether candidate (v, i) beats the current best (bv, bi).
template <typename A>
__device__ __forceinline__ bool better(A v, int64_t i, A bv, int64_t bi) {
  const bool vn = is_nan_value(v), bn = is_nan_value(bv);
  if (vn || bn) return vn && (!bn || i < bi);
  return v > bv || (v == bv && i < bi);
}

template <typename T>
__global__ void max_runs_kernel(const T* in, int64_t runs, int64_t len, T* out, int64_t* indices) {
  using A = acc_t<T>;
  __shared__ A pv[kReduceThreads];
  __shared__ int64_t pi[kReduceThreads];
  for (int64_t r = blockIdx.x; r < runs; r += gridDim.x) {
    const T* p = in + r * len;
    A bv = 0;
    int64_t bi = -1;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      const A v = static_cast<A>(p[j]);
      if (bi < 0 || better(v, j, bv, bi)) {
        bv = v;
        bi = j;
      }
    }
    pv[threadIdx.x] = bv;
    pi[threadIdx.x] = bi;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
      if (threadIdx.x < w) {
        const int64_t oi = pi[threadIdx.x + w];
        if (oi >= 0 && (pi[threadIdx.x] < 0 || better(pv[threadIdx.x + w], oi, pv[threadIdx.x], pi[threadIdx.x]))) {
          pv[threadIdx.x] = pv[threadIdx.x + w];
          pi[threadIdx.x] = oi;
        }
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      const int64_t best = pi[0] < 0 ? 0 : pi[0];
      if (out) out[r] = p[best];  // the stored bits, as the CPU (no round trip through A)
      if (indices) indices[r] = best;
    }
    __syncthreads();
  }
}

unsigned run_blocks(int64_t runs) { return static_cast<unsigned>(runs < 65535LL * 16 ? (runs < 1 ? 1 : runs) : 65535LL * 16); }

}  // namespace

cudaError_t launch_reduce_runs(ReduceOp op, DType in_dt, const void* in, int64_t runs, int64_t len, void* out,
                               int64_t* indices, cudaStream_t s) {
  if (runs == 0) return cudaSuccess;
  return visit_all_cuda(in_dt, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    if (op == ReduceOp::Max) {
      if constexpr (std::is_same<T, bool>::value) {
        return cudaErrorInvalidValue;
      } else {
        return launch_kernel(max_runs_kernel<T>, run_blocks(runs), kReduceThreads, 0, s, static_cast<const T*>(in),
                             runs, len, static_cast<T*>(out), indices);
      }
    }
    using Acc = typename ReduceAcc<T>::type;
    return launch_kernel(sum_runs_kernel<T, Acc>, run_blocks(runs), kReduceThreads, 0, s, static_cast<const T*>(in),
                         runs, len, static_cast<Acc*>(out), op == ReduceOp::Mean);
  });
}

}  // namespace mixtape::cuda
