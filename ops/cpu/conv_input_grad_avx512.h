// ops/cpu/conv_input_grad_avx512.h — conv2d's input gradient in FP32 on AVX-512 without the
// col = w^T gy matrix and col2im, for kernels 3 columns wide with unit column dilation and column
// stride 1 or 2 (any row stride, padding, kernel height, row dilation), one group: the strided
// convs' input gradient (unit-stride ones mostly run as a forward conv: ops/conv.cpp). FP32 arithmetic on
// FP32, BF16 or FP16 storage.
//
// Algorithm (docs/CPU.md, "Input gradient of strided convolutions"): the weights are packed once
// per call as (o, ki, kj) rows of C rounded up to 16. Per image, a zero-filled channel-minor
// padded gradient gxt (Hp, Wp, C rounded up to 16) receives, for every output pixel and tap, the
// vector sum over o of w[o, c, ki, kj] gy[o, pixel]: a register block is P consecutive output
// pixels of one row x the 3 kernel columns x V vectors of 16 input channels (3 P V = 24
// accumulators), gy broadcast per pixel and depth step, then added into gxt once per block. gxt is
// then cropped to the image and transposed (16 x 16 in registers) into gx.
// Invariant (determinism): each gx element is one thread's sum in a fixed order (kernel row,
// output row, pixel block, pixel, kernel column; within a block over o in order from +0), so the
// bits are the same at every thread count.
// Internal: called by ops/conv.cpp only.
#pragma once
#include <cstdint>

#include "core/bfloat16.h"
#include "core/half.h"
#include "ops/cpu/conv_shape.h"

namespace mixtape::cpu {

// True when the CPU can run the kernel (conv_kernels_enabled()) and the geometry is one it
// takes (padded_geometry_ok, column stride 1 or 2). Depends on the shape only.
bool conv_input_grad_direct_applies(const ConvShape& s);

// gx (N, C, H, W) = the input gradient of conv2d(x, w) for the output gradient gy (N, O, OH, OW);
// w (O, C, kH, 3) contiguous. Requires conv_input_grad_direct_applies(s). 16-bit gy and w are
// widened exactly (per image, and once per call) and gx rounded once per element: BF16 products
// are exact in FP32, so this is the BF16 GEMM contract (FP32 accumulation) on every BF16 path.
void conv_input_grad_direct(const ConvShape& s, const float* gy, const float* w, float* gx);
// BF16: alpha multiplies each FP32 sum before the rounding (Fp8Autocast's dequantising scales),
// skipped at 1.
void conv_input_grad_direct(const ConvShape& s, const BFloat16* gy, const BFloat16* w, BFloat16* gx,
                            float alpha = 1.0f);
void conv_input_grad_direct(const ConvShape& s, const BFloat16* gy, const float* w, BFloat16* gx, float alpha = 1.0f);
void conv_input_grad_direct(const ConvShape& s, const Half* gy, const float* w, Half* gx);

// The BF16 twin on vdpbf16ps (native BF16): output channels in pairs, gy staged per image as words
// (gy[2 o2], gy[2 o2 + 1]) and the weights packed as the matching pairs, so one vdpbf16ps adds both
// channels' products (exact in FP32) to each FP32 sum: half the depth steps. The same products as
// conv_input_grad_direct, summed pair by pair (the order of a pair's two adds is the instruction's;
// its subnormal treatment too), gx rounded once; the same bits at every thread count. Applies where
// conv_input_grad_direct_applies and BF16 GEMMs run on vdpbf16ps (bf16_on_vdpbf16ps: AVX512-BF16,
// no AMX or MIXTAPE_CPU_BF16=avx512bf16, not emulated): depends on the shape and on that choice.
bool conv_input_grad_pairs_applies(const ConvShape& s);
void conv_input_grad_pairs(const ConvShape& s, const BFloat16* gy, const BFloat16* w, BFloat16* gx, float alpha = 1.0f);

}  // namespace mixtape::cpu
