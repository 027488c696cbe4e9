// amp/cuda/fp8_im2col.cu — see fp8_im2col_kernels.h: one thread per output element, grid-stride,
// 64-bit indices (a large batch's im2col matrix can pass 2^31 elements).
#include "amp/cuda/fp8_im2col_kernels.h"
#include "core/cuda/launch.cuh"
#include "ops/cuda/loops.cuh"

namespace mixtape::amp::cuda {
namespace {

// T: an unsigned integer of the element's width; values are copied as bits, 0 is +0 in every format.
template <typename T>
__global__ void im2col_kernel(const T* x, T* out, Im2colGeom g, bool transposed, int64_t ld, int64_t rows) {
  const int64_t M = g.N * g.OH * g.OW, K = g.C * g.kH * g.kW;
  const int64_t total = rows * ld;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(blockDim.x) * gridDim.x) {
    const int64_t r = idx / ld, c = idx % ld;
    const int64_t m = transposed ? c : r, k = transposed ? r : c;
    T v = 0;  // +0
    if (m < M && k < K) {
      const int64_t ow = m % g.OW, oh = (m / g.OW) % g.OH, n = m / (g.OW * g.OH);
      const int64_t j = k % g.kW, i = (k / g.kW) % g.kH, ch = k / (g.kW * g.kH);
      const int64_t h = oh * g.sH - g.pH + i * g.dH, w = ow * g.sW - g.pW + j * g.dW;
      if (h >= 0 && h < g.H && w >= 0 && w < g.W) v = x[((n * g.C + ch) * g.H + h) * g.W + w];
    }
    out[idx] = v;
  }
}

__global__ void col2im_kernel(const float* cols, float* image, Im2colGeom g) {
  const int64_t K = g.C * g.kH * g.kW, total = g.N * g.C * g.H * g.W;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(blockDim.x) * gridDim.x) {
    const int64_t w = idx % g.W, h = (idx / g.W) % g.H, ch = (idx / (g.W * g.H)) % g.C, n = idx / (g.W * g.H * g.C);
    float acc = 0.0f;
    // Windows in ascending (oh, ow) order, as the CPU's scatter adds them: kernel rows and
    // columns descending.
    for (int64_t i = g.kH - 1; i >= 0; --i) {
      const int64_t th = h + g.pH - i * g.dH;
      if (th < 0 || th % g.sH != 0 || th / g.sH >= g.OH) continue;
      const int64_t oh = th / g.sH;
      for (int64_t j = g.kW - 1; j >= 0; --j) {
        const int64_t tw = w + g.pW - j * g.dW;
        if (tw < 0 || tw % g.sW != 0 || tw / g.sW >= g.OW) continue;
        const int64_t ow = tw / g.sW;
        acc += cols[((n * g.OH + oh) * g.OW + ow) * K + (ch * g.kH + i) * g.kW + j];
      }
    }
    image[idx] = acc;
  }
}

}  // namespace

cudaError_t launch_im2col(int elem_bytes, const void* x, void* out, Im2colGeom g, bool transposed, int64_t ld,
                          cudaStream_t s) {
  const int64_t rows = transposed ? g.C * g.kH * g.kW : g.N * g.OH * g.OW;
  if (rows * ld == 0) return cudaSuccess;
  using ::mixtape::cuda::grid_for;
  using ::mixtape::cuda::kThreads;
  const unsigned grid = grid_for(rows * ld, kThreads);
  switch (elem_bytes) {
    case 1:
      return ::mixtape::cuda::launch_kernel(im2col_kernel<uint8_t>, grid, kThreads, 0, s,
                                            static_cast<const uint8_t*>(x), static_cast<uint8_t*>(out), g, transposed,
                                            ld, rows);
    case 2:
      return ::mixtape::cuda::launch_kernel(im2col_kernel<uint16_t>, grid, kThreads, 0, s,
                                            static_cast<const uint16_t*>(x), static_cast<uint16_t*>(out), g,
                                            transposed, ld, rows);
    case 4:
      return ::mixtape::cuda::launch_kernel(im2col_kernel<uint32_t>, grid, kThreads, 0, s,
                                            static_cast<const uint32_t*>(x), static_cast<uint32_t*>(out), g,
                                            transposed, ld, rows);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_fp8_im2col(const uint8_t* x, uint8_t* out, Im2colGeom g, bool transposed, int64_t ld,
                              cudaStream_t s) {
  return launch_im2col(1, x, out, g, transposed, ld, s);
}

cudaError_t launch_col2im_f32(const float* cols, float* image, Im2colGeom g, cudaStream_t s) {
  const int64_t total = g.N * g.C * g.H * g.W;
  if (total == 0) return cudaSuccess;
  using ::mixtape::cuda::grid_for;
  using ::mixtape::cuda::kThreads;
  return ::mixtape::cuda::launch_kernel(col2im_kernel, grid_for(total, kThreads), kThreads, 0, s, cols, image, g);
}

}  // namespace mixtape::amp::cuda
