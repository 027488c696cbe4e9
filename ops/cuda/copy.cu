// ops/cuda/copy.cu — the strided-gather kernel behind to_device and contiguous_on_device: one
// grid-stride loop that turns any strided view into a dense buffer, moving raw bytes (1, 2, 4 or
// 8 per element), so every dtype, f16/bf16 included, is copied bit-exactly.
#include <cstdint>

#include "core/cuda/check.h"
#include "core/cuda/launch.cuh"
#include "ops/cuda/copy_kernels.h"

namespace mixtape::cuda {
namespace {

constexpr int kMaxDims = 16;
struct Geometry {
  int ndim;
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims];  // source, in elements
};

template <typename Word>
__global__ void strided_gather_kernel(Word* __restrict__ dst, const Word* __restrict__ src, int64_t numel,
                                      Geometry g) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = i, off = 0;
    for (int d = g.ndim - 1; d >= 0; --d) {
      int64_t s = g.sizes[d];
      off += (rest % s) * g.strides[d];
      rest /= s;
    }
    dst[i] = src[off];
  }
}

template <typename Word>
void launch(void* dst, const void* src, int64_t numel, const Geometry& g, cudaStream_t stream) {
  constexpr int kThreads = 256;
  int64_t blocks = (numel + kThreads - 1) / kThreads;
  if (blocks > 65535 * 8) blocks = 65535 * 8;  // grid-stride covers the rest
  MT_CUDA_CHECK(launch_kernel(strided_gather_kernel<Word>, static_cast<unsigned>(blocks), kThreads, 0, stream,
                              static_cast<Word*>(dst), static_cast<const Word*>(src), numel, g),
                "to_device (strided gather)");
}

}  // namespace

void launch_strided_gather(void* dst, const void* src, int64_t numel, int elem_size, int ndim,
                           const int64_t* sizes, const int64_t* src_strides, cudaStream_t stream) {
  if (numel == 0) return;
  MT_CHECK(ndim <= kMaxDims, "to_device: strided copy supports up to ", kMaxDims, " dimensions, got ", ndim);
  Geometry g{};
  g.ndim = ndim;
  for (int d = 0; d < ndim; ++d) {
    g.sizes[d] = sizes[d];
    g.strides[d] = src_strides[d];
  }
  switch (elem_size) {
    case 1: return launch<uint8_t>(dst, src, numel, g, stream);
    case 2: return launch<uint16_t>(dst, src, numel, g, stream);
    case 4: return launch<uint32_t>(dst, src, numel, g, stream);
    case 8: return launch<uint64_t>(dst, src, numel, g, stream);
    default: MT_ERROR("to_device: strided copy of ", elem_size, "-byte elements is not supported");
  }
}

}  // namespace mixtape::cuda
