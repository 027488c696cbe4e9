// amp/cuda/mx_block.cu — see mx_block_kernels.h. One thread per block (grid-stride, 64-bit
// indices): two passes over the block's k values (the amax, then the casts), each value read as
// f32 (exact from bf16 and f16). Neighbouring threads take neighbouring `inner` positions, so
// blocks along a dim with inner > 1 read along memory.
#include "amp/cuda/mx_block_kernels.h"
#include "amp/mx_scale_rule.h"
#include "core/bfloat16.h"
#include "core/cuda/launch.cuh"
#include "core/half.h"
#include "ops/cuda/loops.cuh"

namespace mixtape::amp::cuda {
namespace {

template <typename T>
__global__ void mx_quantize_kernel(const T* x, MxBlocks b, uint8_t* data, uint8_t* codes, uint16_t* widened) {
  const int64_t nb = (b.len + b.k - 1) / b.k, total = b.outer * nb * b.inner;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(blockDim.x) * gridDim.x) {
    const int64_t i = idx % b.inner, blk = (idx / b.inner) % nb, o = idx / (b.inner * nb);
    const int64_t n = b.len - blk * b.k < b.k ? b.len - blk * b.k : b.k;
    const int64_t base = (o * b.len + blk * b.k) * b.inner + i;
    // The amax as a max of |v|'s bits (monotonic for non-NaN floats); an inf or NaN makes it
    // >= 0x7F800000, which mx_code_of turns into the NaN code, as on the CPU.
    uint32_t am = 0;
    for (int64_t j = 0; j < n; ++j) {
      const uint32_t a = ::mixtape::detail::float_to_u32(static_cast<float>(x[base + j * b.inner])) & 0x7FFFFFFFu;
      am = a > am ? a : am;
    }
    const uint8_t code = mx_code_of(::mixtape::detail::u32_to_float(am), b.e5m2, b.spec);
    if (codes != nullptr) codes[idx] = code;
    const float pow2 = mx_scale_of(code);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t at = base + j * b.inner;
      const uint8_t q = mx_element_bits(static_cast<float>(x[at]), code, b.e5m2);
      if (data != nullptr) data[at] = q;
      if (widened != nullptr) widened[at] = mx_widen_bits(mx_decode(q, b.e5m2), pow2);
    }
  }
}

__global__ void mx_widen_kernel(const uint8_t* data, const uint8_t* codes, MxBlocks b, uint16_t* widened) {
  const int64_t nb = (b.len + b.k - 1) / b.k, total = b.outer * b.len * b.inner;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(blockDim.x) * gridDim.x) {
    const int64_t i = idx % b.inner, l = (idx / b.inner) % b.len, o = idx / (b.inner * b.len);
    const uint8_t code = codes[(o * nb + l / b.k) * b.inner + i];
    widened[idx] = mx_widen_bits(mx_decode(data[idx], b.e5m2), mx_scale_of(code));
  }
}

}  // namespace

cudaError_t launch_mx_quantize(DType src, const void* x, MxBlocks b, uint8_t* data, uint8_t* codes,
                               uint16_t* widened, cudaStream_t s) {
  const int64_t total = b.outer * ((b.len + b.k - 1) / b.k) * b.inner;
  if (total == 0) return cudaSuccess;
  using ::mixtape::cuda::grid_for;
  using ::mixtape::cuda::kThreads;
  switch (src) {
    case DType::Float32:
      return ::mixtape::cuda::launch_kernel(mx_quantize_kernel<float>, grid_for(total, kThreads), kThreads, 0, s,
                                            static_cast<const float*>(x), b, data, codes, widened);
    case DType::BFloat16:
      return ::mixtape::cuda::launch_kernel(mx_quantize_kernel<BFloat16>, grid_for(total, kThreads), kThreads, 0, s,
                                            static_cast<const BFloat16*>(x), b, data, codes, widened);
    case DType::Float16:
      return ::mixtape::cuda::launch_kernel(mx_quantize_kernel<Half>, grid_for(total, kThreads), kThreads, 0, s,
                                            static_cast<const Half*>(x), b, data, codes, widened);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_mx_widen(const uint8_t* data, const uint8_t* codes, MxBlocks b, uint16_t* widened, cudaStream_t s) {
  const int64_t total = b.outer * b.len * b.inner;
  if (total == 0) return cudaSuccess;
  using ::mixtape::cuda::grid_for;
  using ::mixtape::cuda::kThreads;
  return ::mixtape::cuda::launch_kernel(mx_widen_kernel, grid_for(total, kThreads), kThreads, 0, s, data, codes, b,
                                        widened);
}

}  // namespace mixtape::amp::cuda
