// ops/cuda/fp8_convert.cu — FP8 conversion kernels on the device (ops/cuda/fp8_kernels.h): copies
// to/from FP8, fills, and the recipes' scaled saturating casts with their amax.
// Invariant: every FP8 value is produced by core/float8.h's integer-only scalar conversion (the
// same function the CPU runs), never by cuda_fp8.h's intrinsics: __nv_cvt_float_to_fp8 has no
// mode for e4m3fn's "beyond 464 -> NaN" (c10's to()), so sharing the one function is what makes the
// bits equal on every GPU and on the emulator. The amax is exact (max is order-free).
#include "core/float8.h"
#include "ops/cuda/fp8_kernels.h"
#include "ops/cuda/loops.cuh"

namespace mixtape::cuda {
namespace {

template <typename T>
struct IsFp8 : std::false_type {};
template <>
struct IsFp8<Float8_e4m3fn> : std::true_type {};
template <>
struct IsFp8<Float8_e5m2> : std::true_type {};

// ops/cast.cpp's convert_value with an FP8 end: to FP8 through float (double -> float -> fp8, as
// PyTorch), from FP8 through its exact float.
template <typename To, typename From>
struct ConvertFp8 {
  __device__ __forceinline__ To operator()(From v) const {
    if constexpr (std::is_same<To, From>::value) {
      return v;  // a copy moves bits, NaN payloads included
    } else if constexpr (IsFp8<To>::value) {
      return To(static_cast<float>(v));
    } else if constexpr (std::is_same<To, bool>::value) {
      return static_cast<float>(v) != 0.0f;
    } else if constexpr (std::is_same<To, Half>::value || std::is_same<To, BFloat16>::value) {
      return To(static_cast<float>(v));
    } else {
      return static_cast<To>(static_cast<float>(v));
    }
  }
};

template <typename Fn>
cudaError_t visit_float8_cuda(DType dt, Fn&& fn) {
  switch (dt) {
    case DType::Float8_e4m3fn: return fn(TypeTag<Float8_e4m3fn>{});
    case DType::Float8_e5m2: return fn(TypeTag<Float8_e5m2>{});
    default: return cudaErrorInvalidValue;
  }
}
template <typename Fn>
cudaError_t visit_all_with_float8_cuda(DType dt, Fn&& fn) {
  if (is_float8(dt)) return visit_float8_cuda(dt, fn);
  return visit_all_cuda(dt, fn);
}
// The 16-bit and f32 sources the scaled casts take (exactly representable in f32).
template <typename Fn>
cudaError_t visit_cast_source_cuda(DType dt, Fn&& fn) {
  switch (dt) {
    case DType::Float32: return fn(TypeTag<float>{});
    case DType::Float16: return fn(TypeTag<Half>{});
    case DType::BFloat16: return fn(TypeTag<BFloat16>{});
    default: return cudaErrorInvalidValue;
  }
}

template <typename T>
struct Constant8 {
  T v;
  __device__ __forceinline__ T operator()(T) const { return v; }
};

constexpr int kAmaxThreads = 256;

// y == nullptr: the amax alone (current scaling reads it before it knows its scale).
// One block reduces its grid-stride share of |x| in shared memory; thread 0 folds the block's max
// into *amax with an integer atomicMax on the float's bits (non-negative floats order like their
// bits, and the running value starts at +0 or a previous non-negative amax).
template <typename To, typename From>
__global__ void to_float8_kernel(const From* x, To* y, int64_t n, float scale_host, const float* scale_dev,
                                 Fp8Saturation sat, float* amax) {
  __shared__ float block_max[kAmaxThreads];
  const float scale = scale_dev ? *scale_dev : scale_host;
  float m = 0.0f;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    const float v = static_cast<float>(x[i]);
    if (y != nullptr) y[i] = To::from_float(v * scale, sat);  // the product rounds to f32 first, as on the CPU
    const float a = fabsf(v);
    m = a > m ? a : m;  // a NaN compares false and is dropped
  }
  if (amax == nullptr) return;  // uniform across the block: no thread waits at the barrier below
  block_max[threadIdx.x] = m;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      const float o = block_max[threadIdx.x + half];
      if (o > block_max[threadIdx.x]) block_max[threadIdx.x] = o;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    atomicMax(reinterpret_cast<unsigned*>(amax), static_cast<unsigned>(detail::float_to_u32(block_max[0])));
  }
}

template <typename From>
__global__ void from_float8_kernel(const From* x, float* y, int64_t n, float scale) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x)
    y[i] = static_cast<float>(x[i]) * scale;
}

}  // namespace

cudaError_t launch_copy_float8(DType dst, DType src, const Operands& ops, cudaStream_t s) {
  return visit_all_with_float8_cuda(dst, [&](auto to_tag) {
    using To = typename decltype(to_tag)::type;
    return visit_all_with_float8_cuda(src, [&](auto from_tag) {
      using From = typename decltype(from_tag)::type;
      return launch_map<To, From, 1, ConvertFp8<To, From>, /*kWide64=*/true>(ops, ConvertFp8<To, From>{}, s);
    });
  });
}

cudaError_t launch_fill_float8(DType dt, const Operands& ops, double value, cudaStream_t s) {
  return visit_float8_cuda(dt, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    Operands o = ops;  // the map kernel reads operand 1 = operand 0 and ignores it
    o.nops = 2;
    o.data[1] = o.data[0];
    for (int d = 0; d < o.ndim; ++d) o.strides[1][d] = o.strides[0][d];
    return launch_map<T, T, 1, Constant8<T>, /*kWide64=*/true>(o, Constant8<T>{T(static_cast<float>(value))}, s);
  });
}

cudaError_t launch_to_float8(DType dst, DType src, const void* x, void* y, int64_t n, float scale_host,
                             const float* scale_dev, Fp8Saturation saturation, float* amax_dev, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return visit_float8_cuda(dst, [&](auto to_tag) {
    using To = typename decltype(to_tag)::type;
    return visit_cast_source_cuda(src, [&](auto from_tag) {
      using From = typename decltype(from_tag)::type;
      return launch_kernel(to_float8_kernel<To, From>, grid_for(n, kAmaxThreads), kAmaxThreads, 0, s,
                           static_cast<const From*>(x), static_cast<To*>(y), n, scale_host, scale_dev, saturation,
                           amax_dev);
    });
  });
}

cudaError_t launch_from_float8(DType src, const void* x, float* y, int64_t n, float scale, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return visit_float8_cuda(src, [&](auto tag) {
    using From = typename decltype(tag)::type;
    return launch_kernel(from_float8_kernel<From>, grid_for(n, kThreads), kThreads, 0, s, static_cast<const From*>(x),
                         y, n, scale);
  });
}

}  // namespace mixtape::cuda
