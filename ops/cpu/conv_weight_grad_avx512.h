// ops/cpu/conv_weight_grad_avx512.h — conv2d's weight gradient in FP32 on AVX-512 without an
// im2col matrix or a packed GEMM: gw (O, K) = sum over images n and output pixels p of
// gy[n, o, p] col_n[k, p], for kernels 3 columns wide with unit column dilation (every 3x3 conv of
// the zoo, any stride, padding, kernel height and row dilation), one group. FP32 operands, or BF16 /
// FP16 storage widened exactly while staged (the emulated BF16 path and FP16 on the CPU).
//
// Algorithm (docs/CPU.md, "Weight gradient without im2col"): a chunk of images is staged once per call step —
// each image zero-padded (so every tap reads inside a plane) and its gy transposed to pixel-major
// (L, O rounded up to 16) rows. Register blocks then compute outer products: per output pixel, V
// vectors of 16 output channels (gy's row for that pixel) times P (channel, kernel row) pairs x 3
// kernel columns broadcast from the padded planes, P 3 V = 24 zmm accumulators, no reduction across
// lanes. Each block's accumulators run over the whole chunk and are then added into an FP32
// (K, O) buffer, transposed into gw at the end.
// Invariant (determinism): element (o, k) is one thread's sum — per chunk, images in order, pixels
// in row-major order, one FMA each from +0 — and the chunks' partial sums added in chunk order.
// The chunk size depends on the geometry only, and threads split whole blocks (or, where that keeps
// more threads busy, whole chunks, each into its own partial: the same operations), so the bits
// are the same at every thread count (im2col + GEMM's weight gradient sums per thread and is not).
// Internal: called by ops/conv.cpp only.
#pragma once
#include <cstdint>

#include "core/bfloat16.h"
#include "core/half.h"
#include "ops/cpu/conv_shape.h"

namespace mixtape::cpu {

// True when the CPU can run the kernel (conv_kernels_enabled(): AVX-512 F/BW/VL and no
// MIXTAPE_CPU_CONV=im2col) and the geometry is one it takes: kW == 3, dW == 1 (padded_geometry_ok).
// Depends on the shape, never on the thread count.
bool conv_weight_grad_direct_applies(const ConvShape& s);

// Overwrites gw with the FP32 weight gradient. Requires conv_weight_grad_direct_applies(s).
void conv_weight_grad_direct(const ConvShape& s, const float* x, const float* gy, float* gw);
void conv_weight_grad_direct(const ConvShape& s, const BFloat16* x, const BFloat16* gy, float* gw);
void conv_weight_grad_direct(const ConvShape& s, const Half* x, const Half* gy, float* gw);

// The BF16 twin for native BF16 on vdpbf16ps (cpu::bf16_gemm_kernel() is Avx512Bf16): the same
// blocks with the images taken in pairs — x staged as words (x[n], x[n + 1]) at every padded
// position, gy as words (gy[n, o, l], gy[n + 1, o, l]), a last odd image paired with zeros — so one
// vdpbf16ps per pixel, tap and vector adds both images' exact products to the FP32 sum (subnormal
// inputs read as zero and subnormal results flushed, as everywhere vdpbf16ps runs). Any geometry
// conv_weight_grad_direct_applies takes. Another order than the FP32 kernel's (image pairs), so
// within FP32 summation error of it; the same bits at every thread count.
bool conv_weight_grad_pairs_applies(const ConvShape& s);
void conv_weight_grad_pairs(const ConvShape& s, const BFloat16* x, const BFloat16* gy, float* gw);

}  // namespace mixtape::cpu
