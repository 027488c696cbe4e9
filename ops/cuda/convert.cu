// ops/cuda/convert.cu — dtype conversion (to_dtype, clone, copy_, the casts every CUDA op makes
// of its inputs), fill_ and where on the device, with ops/cast.cpp's and ops/creation.cpp's
// rules: to bool is `v != 0`; to f16/bf16 goes through float (f64 -> f32 -> 16-bit, as PyTorch);
// otherwise static_cast through the source's compute type. Same-dtype copies move bits (NaN
// payloads included). Also dropout and the Philox random fill (core/rng.h's stream, element i from words
// i or 2i, 2i+1), so a CUDA rand/randn equals the CPU one up to libm's last ulp in Box–Muller.
#include "core/rng.h"
#include "ops/cuda/fp8_kernels.h"
#include "ops/cuda/loops.cuh"

namespace mixtape::cuda {
namespace {

template <typename To, typename From>
struct Convert {
  __device__ __forceinline__ To operator()(From v) const {
    if constexpr (std::is_same<To, From>::value) {
      return v;
    } else if constexpr (std::is_same<To, bool>::value) {
      return static_cast<acc_t<From>>(v) != acc_t<From>(0);
    } else if constexpr (std::is_same<To, Half>::value || std::is_same<To, BFloat16>::value) {
      return To(static_cast<float>(static_cast<acc_t<From>>(v)));
    } else {
      return static_cast<To>(static_cast<acc_t<From>>(v));
    }
  }
};

template <typename T>
struct Constant {
  T v;
  __device__ __forceinline__ T operator()(T) const { return v; }
};

template <typename T>
__global__ void fill_contig_kernel(T* p, int64_t n, T v) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) p[i] = v;
}

// where's condition is a bool byte while a and b are U; the strided kernel below reads each
// operand with its own type.
template <typename U, typename IndexT>
__global__ void where_kernel(OffsetCalc<4, IndexT> oc, Array<char*, 4> p, IndexT n) {
  for (IndexT i = static_cast<IndexT>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<IndexT>(blockDim.x) * gridDim.x) {
    const Array<int64_t, 4> off = oc.get(i);
    const bool c = *reinterpret_cast<const uint8_t*>(p[1] + off[1]) != 0;
    *reinterpret_cast<U*>(p[0] + off[0]) = *reinterpret_cast<const U*>((c ? p[2] + off[2] : p[3] + off[3]));
  }
}

template <typename T>
__global__ void random_fill_kernel(T* p, int64_t n, uint64_t seed, uint64_t offset, bool normal) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    const double v = normal ? normal_from_words(philox_word(seed, offset, 2 * uint64_t(i)),
                                                philox_word(seed, offset, 2 * uint64_t(i) + 1))
                            : double(uniform_from_bits(philox_word(seed, offset, uint64_t(i))));
    if constexpr (std::is_same<T, Half>::value || std::is_same<T, BFloat16>::value)
      p[i] = T(static_cast<float>(v));
    else
      p[i] = static_cast<T>(v);
  }
}

template <typename T>
__global__ void dropout_kernel(const T* x, T* out, bool* mask, int64_t n, double p, uint64_t seed, uint64_t offset,
                               const uint64_t* state) {
  using A = acc_t<T>;
  if (state) {  // a captured draw: the replay's seed and base offset, from the graph's slot
    seed = state[0];
    offset += state[1];
  }
  const double keep = 1.0 - p;
  const A scale = p < 1.0 ? static_cast<A>(1.0 / keep) : A(0);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    const bool k = p < 1.0 && static_cast<double>(uniform_from_bits(philox_word(seed, offset, uint64_t(i)))) < keep;
    mask[i] = k;
    out[i] = k ? static_cast<T>(static_cast<A>(x[i]) * scale) : static_cast<T>(A(0));
  }
}

}  // namespace

cudaError_t launch_dropout(DType dt, const void* x, void* out, bool* mask, int64_t n, double p, uint64_t seed,
                           uint64_t offset, const uint64_t* state, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return visit_floating_cuda(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch_kernel(dropout_kernel<T>, grid_for(n, kThreads), kThreads, 0, s, static_cast<const T*>(x),
                         static_cast<T*>(out), mask, n, p, seed, offset, state);
  });
}

cudaError_t launch_copy(DType dst, DType src, const Operands& ops, cudaStream_t s) {
  if (is_float8(dst) || is_float8(src)) return launch_copy_float8(dst, src, ops, s);  // ops/cuda/fp8_convert.cu
  return visit_all_cuda(dst, [&](auto to_tag) {
    using To = typename decltype(to_tag)::type;
    return visit_all_cuda(src, [&](auto from_tag) {
      using From = typename decltype(from_tag)::type;
      return launch_map<To, From, 1, Convert<To, From>, /*kWide64=*/true>(ops, Convert<To, From>{}, s);
    });
  });
}

cudaError_t launch_fill(DType dt, const Operands& ops, double value, cudaStream_t s) {
  if (is_float8(dt)) return launch_fill_float8(dt, ops, value, s);  // ops/cuda/fp8_convert.cu
  return visit_all_cuda(dt, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    T v;
    if constexpr (std::is_same<T, Half>::value || std::is_same<T, BFloat16>::value)
      v = T(static_cast<float>(value));
    else
      v = static_cast<T>(value);
    if (ops.numel == 0) return cudaSuccess;
    if (ops.contiguous) {
      return launch_kernel(fill_contig_kernel<T>, grid_for(ops.numel, kThreads), kThreads, 0, s,
                           reinterpret_cast<T*>(ops.data[0]), ops.numel, v);
    }
    // Strided output: the map kernel reads operand 1 = operand 0 and ignores it.
    Operands o = ops;
    o.nops = 2;
    o.data[1] = o.data[0];
    for (int d = 0; d < o.ndim; ++d) o.strides[1][d] = o.strides[0][d];
    return launch_map<T, T, 1, Constant<T>, true>(o, Constant<T>{v}, s);
  });
}

cudaError_t launch_where(size_t elem_size, const Operands& ops, cudaStream_t s) {
  const int64_t n = ops.numel;
  if (n == 0) return cudaSuccess;
  Array<char*, 4> p;
  for (int k = 0; k < 4; ++k) p[k] = ops.data[k];
  auto go = [&](auto tag) -> cudaError_t {
    using U = typename decltype(tag)::type;
    if (n <= INT32_MAX)
      return launch_kernel(where_kernel<U, uint32_t>, grid_for(n, kThreads), kThreads, 0, s,
                           OffsetCalc<4, uint32_t>::make(ops), p, uint32_t(n));
    else
      return launch_kernel(where_kernel<U, uint64_t>, grid_for(n, kThreads), kThreads, 0, s,
                           OffsetCalc<4, uint64_t>::make(ops), p, uint64_t(n));
  };
  switch (elem_size) {
    case 1: return go(TypeTag<uint8_t>{});
    case 2: return go(TypeTag<uint16_t>{});
    case 4: return go(TypeTag<uint32_t>{});
    case 8: return go(TypeTag<uint64_t>{});
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_random_fill(DType dt, void* data, int64_t n, uint64_t seed, uint64_t offset, bool normal,
                               cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return visit_floating_cuda(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch_kernel(random_fill_kernel<T>, grid_for(n, kThreads), kThreads, 0, s, static_cast<T*>(data), n, seed,
                         offset, normal);
  });
}

}  // namespace mixtape::cuda
