// ops/cpu/im2col_avx512.h — conv2d's im2col for f32 and BF16 images with "plane-shift" geometry
// (unit strides, unit column dilation, OW == W: every 3x3 "same" conv) in AVX-512, one masked load
// per 16 (f32) or 32 (BF16) output columns: row (c, ki, kj) of col is channel c's plane shifted by
// s = offh W + offw, zero where the shifted pixel falls outside the image or into the neighbouring
// row. The same bits as ops/conv.cpp's generic im2col (a copy: no arithmetic), without its per-row
// fill/memcpy/border calls (13-18% of a ResNet-8 BF16 step's profile). ResNet-8's convs, batch
// 128, 2 threads, at 16/28x28, 32/14x14, 64/7x7 (the smaller the plane, the more the per-row calls
// cost): BF16 forward 1.11x, 1.22x, 1.42x, weight gradient 1.10x, 1.29x, 1.51x; f32 forward
// 1.03x, 1.09x, 1.14x, weight gradient 0.95-0.97x, 1.13x, 1.18x. The masks are built once per
// call (they depend on the tap, not the channel), which about halved its cycles again on 7x7.
// Internal: called by ops/conv.cpp only.
#pragma once
#include <cstdint>

#include "core/bfloat16.h"

namespace mixtape::cpu {

// isa_avx512() (ops/cpu/isa.h).
bool im2col_avx512_available();

// x (C, H, W) -> col (C kH kW, OH W), row r = (c kH + ki) kW + kj, OH = H + 2 pH - dH (kH - 1):
//   col[r ld + i W + j] = x[c, i + ki dH - pH, j + kj - pW], 0 outside the image.
// ld >= OH W is col's row stride (the elements between rows are left alone). Requires pH, pW >= 0
// and a kernel that fits (the caller's geometry checks).
void im2col_plane_shift_avx512(const float* x, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t kH, int64_t kW,
                               int64_t pH, int64_t pW, int64_t dH, float* col, int64_t ld);
void im2col_plane_shift_avx512(const BFloat16* x, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t kH,
                               int64_t kW, int64_t pH, int64_t pW, int64_t dH, BFloat16* col, int64_t ld);

// Any geometry whose column stride is 1 or 2 and column dilation 1 (strided "same" convs, the
// 1x1 stride-2 shortcuts, "valid" padding), one output row at a time: a masked load of the input
// row's span, and for stride 2 a permute that keeps every other element (16 f32 or 32 BF16
// outputs a vector; two output rows per permute where a row is at most half a vector). Rows r = (c kH + ki) kW + kj as above, ld >= OH OW apart:
//   col[r ld + i OW + j] = x[c, i sH + ki dH - pH, j sW + kj - pW], 0 outside the image.
// col2im_rows_avx512 is its adjoint (f32, col's rows OH OW apart): x[c, ih, iw] += col[r, l] for
// every in-image pixel a column reads, each pixel's contributions in the generic loop's order
// (c, ki, kj), so the same sums bit for bit; pixels nothing reads keep their bits.
struct Im2colRows {
  int64_t C, H, W, OH, OW, kH, kW, sH, sW, pH, pW, dH;
};
// True for the geometries im2col_rows_avx512 takes: sW 1 or 2, dW 1.
bool im2col_rows_applies(int64_t sW, int64_t dW);
void im2col_rows_avx512(const float* x, const Im2colRows& g, float* col, int64_t ld);
void im2col_rows_avx512(const BFloat16* x, const Im2colRows& g, BFloat16* col, int64_t ld);
void col2im_rows_avx512(const float* col, const Im2colRows& g, float* x);

}  // namespace mixtape::cpu
