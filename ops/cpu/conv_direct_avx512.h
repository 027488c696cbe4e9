// ops/cpu/conv_direct_avx512.h — conv2d's forward in FP32 on AVX-512 as a direct convolution: no
// im2col matrix and no packed B operand, for kernels 3 columns wide with unit column dilation and
// column stride 1 or 2 (any row stride, padding, kernel height, row dilation), one group. FP32
// operands.
//
// Algorithm (docs/CPU.md, "Direct convolution"): the weights are packed once per call as (K, O
// rounded up to 16) rows, depth k = (c kH + ki) 3 + kj. Each image is staged once, zero-padded
// (ops/cpu/padded_planes_avx512.h). A register block is P consecutive output pixels of one output
// row x V vectors of 16 output channels (P V <= 24 accumulators): per depth step it loads the V
// weight vectors and multiplies each by the P input values the pixels' tap reads, broadcast
// straight from the padded plane at constant offsets, over depth slices whose weights fit in L1
// (the sums carried between slices in the output buffer). The block's sums go to a pixel-major copy of
// the image's output, transposed (16 x 16 in registers) into y with the bias added.
// Invariant (determinism): y[n, o, l] is one FMA chain over the depth in order k = 0, 1, ..., K - 1
// from +0, then + bias[o] (one FP32 add) — the implicit-GEMM kernel's order, so on its geometry
// the two agree bit for bit. Each output is one thread's, so the bits are the same at every
// thread count.
// Internal: called by ops/conv.cpp only.
#pragma once
#include <cstdint>

#include "core/bfloat16.h"
#include "ops/cpu/conv_shape.h"

namespace mixtape::cpu {

// True when the CPU can run the kernel (conv_kernels_enabled(): AVX-512 F/BW/VL and no
// MIXTAPE_CPU_CONV=im2col) and the geometry is one it takes (padded_geometry_ok, column stride 1
// or 2). Depends on the shape, never on the thread count.
bool conv_direct_applies(const ConvShape& s);

// y (N, O, OH, OW) = conv2d(x, w) + bias (bias null: none); w (O, C, kH, 3) contiguous. Requires
// conv_direct_applies(s).
void conv_direct_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y);

// The BF16 kernel: conv_direct_applies(s) and BF16 GEMMs run on vdpbf16ps (cpu::bf16_gemm_kernel()
// is Avx512Bf16: AVX512-BF16 without AMX, or MIXTAPE_CPU_BF16=avx512bf16; AMX CPUs keep their
// AMX paths, emulated BF16 the FP32 kernel's).
bool conv_pairs_applies(const ConvShape& s);

// BF16 x, w and y, FP32 bias: the same blocks on channel pairs — each depth step one vdpbf16ps
// adds w[o, c] x[c] + w[o, c + 1] x[c + 1] (products exact in FP32; subnormal inputs read as zero
// and subnormal results flushed, as everywhere vdpbf16ps runs) to the FP32 sum, in order
// (c/2, ki, kj); then + bias and one rounding to BF16. Another order than the implicit GEMM's
// (which pairs consecutive taps), so the two agree within FP32 summation error, not bit for bit;
// the same bits at every thread count. Requires conv_pairs_applies(s).
// alpha: a factor on each FP32 sum before the bias (Fp8Autocast's dequantising scales), skipped at 1.
void conv_pairs_forward(const ConvShape& s, const BFloat16* x, const BFloat16* w, const float* bias, BFloat16* y,
                        float alpha = 1.0f);

}  // namespace mixtape::cpu
