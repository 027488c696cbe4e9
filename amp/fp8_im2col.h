// amp/fp8_im2col.h — conv2d as a GEMM for the FP8 path (amp/fp8_ops.cpp): the im2col matrix of
// an image, one row per output pixel (n, oh, ow) holding its window in (c, i, j) order with zeros
// where the window leaves the padded image, and its adjoint col2im. Groups 1.
// Invariant: every function gives the same bits at every thread count (im2col copies; col2im
// sums each pixel in a fixed order on one thread).
#pragma once
#include "core/tensor.h"
#include "ops/conv_args.h"

namespace mixtape::amp {

// x (N, C, H, W) f32 contiguous -> f32 (N OH OW, C kH kW).
Tensor im2col_f32(const Tensor& x, const ConvGeom& g);
// x (N, C, H, W) BF16 contiguous -> BF16 (N OH OW, C kH kW) (MXFP8's wgrad: its blocks run along
// the matrix's rows, so it is cast from the matrix itself, here without an f32 copy).
Tensor im2col_bf16(const Tensor& x, const ConvGeom& g);
// An FP8 image (N, C, H, W) contiguous -> BF16 (N OH OW, C kH kW), each value widened exactly.
Tensor im2col_fp8_to_bf16(const Tensor& x, const ConvGeom& g);
// The same matrix transposed, BF16 (C kH kW, N OH OW) contiguous, written by the BF16 conv2d's
// AVX-512 im2col (ops/cpu/im2col_avx512.h) from the image widened to BF16: a copy of the same
// values, 32 a load. Undefined where that kernel does not apply (no AVX-512, or a geometry that
// is not "plane shift": unit strides, unit column dilation, OW == W); then use the one above.
Tensor im2col_fp8_to_bf16_transposed(const Tensor& x, const ConvGeom& g);
// x (N, C, H, W) f32 or BF16 contiguous -> the transposed im2col matrix (C kH kW, N OH OW), its
// dtype, written by the BF16/f32 conv2d's AVX-512 im2col (plane shift, or the row kernel for
// column strides 1 and 2 with unit column dilation): the values of im2col_f32 / im2col_bf16,
// transposed (MXFP8's wgrad: blocks along N OH OW are then contiguous). Undefined where neither
// kernel applies (no AVX-512, another geometry, another dtype); then use the row matrix.
Tensor im2col_transposed(const Tensor& x, const ConvGeom& g);
// y (N, O, OH, OW) contiguous, any dtype -> (O, N OH OW), its dtype: the output gradient as the
// transposed wgrad reads it (one copy of OH OW values per (n, o); a permute's element-wise copy
// cost more).
Tensor channels_major(const Tensor& y);
// cols f32 (N OH OW, C kH kW) summed back into an f32 (N, C, H, W) image.
Tensor col2im(const Tensor& cols, const ConvGeom& g);

}  // namespace mixtape::amp
