// amp/cuda/fp8_im2col_kernels.h — conv2d as a GEMM on the device for Fp8Autocast(CUDA)
// (amp/cuda/fp8_im2col.cu): the im2col matrix of an FP8 image (or of any 1/2/4-byte image, for
// MXFP8), written K-major for cuBLASLt's FP8 matmul with its reduction dim zero-padded, and
// col2im, its adjoint. The CPU's lowering
// (amp/fp8_im2col.h): rows (n, oh, ow), columns (c, i, j), zeros outside the padded image.
// Plain pointers, C++17, no Tensor.
// Invariant: col2im sums each pixel's taps in the CPU col2im's order (kernel row, then column,
// both descending, from +0), so equal matrices give equal bits.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace mixtape::amp::cuda {

struct Im2colGeom {
  int64_t N, C, H, W, kH, kW, sH, sW, pH, pW, dH, dW, OH, OW;
};

// x: the FP8 image (N, C, H, W), one byte a value, contiguous. M = N OH OW, K = C kH kW.
//   transposed false: out (M, ld) row-major, out[m][k] the im2col value for k < K, 0 for K <= k < ld;
//   transposed true:  out (K, ld) row-major, out[k][m] the same value for m < M, 0 for M <= m < ld.
cudaError_t launch_fp8_im2col(const uint8_t* x, uint8_t* out, Im2colGeom g, bool transposed, int64_t ld,
                              cudaStream_t s);
// The same matrix of an image of 1-, 2- or 4-byte elements (FP8, BF16/F16, F32), copied as bits:
// MXFP8's BF16-widened image (forward) and its wgrad's im2col of the input (any float dtype).
cudaError_t launch_im2col(int elem_bytes, const void* x, void* out, Im2colGeom g, bool transposed, int64_t ld,
                          cudaStream_t s);
// cols: f32 (M, K) row-major; image: f32 (N, C, H, W), every pixel written (its sum, or 0).
cudaError_t launch_col2im_f32(const float* cols, float* image, Im2colGeom g, cudaStream_t s);

}  // namespace mixtape::amp::cuda
