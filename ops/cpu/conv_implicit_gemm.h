// ops/cpu/conv_implicit_gemm.h — conv2d's forward as an implicit GEMM: y = W (O, K) @ col (K, N L)
// without an im2col matrix. Owns: the "plane-shift" forward kernel (unit strides, unit column
// dilation, output width = input width, one group: every 3x3 "same" conv of the zoo, and the input
// gradient of such a conv, which ops/conv.cpp runs as one) in FP32 and BF16, and the switch that
// turns it off (cpu::Override(ConvAlgo::Im2col), MIXTAPE_CPU_CONV) for comparisons.
//
// Algorithm: the weights are packed once per call into 8-row panels (A). The batch's output pixels
// are one column space of N L columns, cut into panels of 32 that may straddle images (no ragged
// edge tile per image: SmallCNN's 14x14 = 196 columns filled its seventh tile to 12%). For each
// column panel the B operand (a depth slice of K = C kH kW rows by 32 columns) is packed straight
// from the input images with one masked load per row and 16 (FP32) or 32 (BF16) columns: the lanes
// whose window tap falls in the padding or in a neighbouring row are masked off (zero); then an 8 x
// 32 register tile per A panel accumulates the slice, and after the last slice the tile gets the
// bias added and is stored (rounded to BF16 once where the output is BF16) into each image the
// panel covers.
// Four variants, by operand type and, for BF16 weights, the caller's `gemm` (the kernel list entry's
// name says which: implicit_gemm_amx or implicit_gemm_avx512bf16, whatever bf16_gemm_kernel() is):
//   float x, float w                      FP32 FMA
//   BFloat16 x, float w (BF16 emulated)   x widened exactly to FP32 while packing, FP32 FMA: the
//                                         FP32 variant's sums on the widened input, rounded once,
//                                         bit for bit (the contract of MIXTAPE_CPU_BF16=emulated)
//   BFloat16 x, BFloat16 w (avx512bf16)   vdpbf16ps on depth pairs (p, p + 1), FP32 accumulation
//   BFloat16 x, BFloat16 w (amx)          AMX tiles: weights packed once per call as 32-row A
//                                         tiles, each column panel's B packed for the whole depth
//                                         in the same pair layout, one 32 x 32 tile block product
//                                         per 32 output channels (ops/cpu/amx_tiles.h)
// Invariant (determinism): output element (n, o, l) is one thread's sum over the depth in a fixed
// order — FP32: p = 0, 1, ..., K - 1, one FMA each from +0; avx512bf16: pairs in order, each one
// vdpbf16ps step (ops/cpu/bgemm_avx512bf16.h's R, odd depth first); amx: ops/cpu/bgemm_amx.h's
// rule over the whole depth as one slice (so, for K <= 512, the bits of im2col + the AMX GEMM) —
// then * alpha (the BF16 variants' epilogue factor: Fp8Autocast's dequantising scales; skipped
// where it is 1, so the bits without it are untouched), then + bias[o] (one FP32 add), then the
// store's rounding. Threads split the column panels, so the bits are the same at
// every thread count and in every run. They differ from im2col + GEMM's in the last bits (that
// sums in slices and adds onto a bias-filled output).
// Internal: called by ops/conv.cpp only, after conv_kernels_enabled().
#pragma once
#include <cstdint>

#include "core/bfloat16.h"
#include "ops/cpu/steering.h"

namespace mixtape::cpu {

// x (N, C, H, W) -> y (N, O, OH, W) with OH = H + 2 pH - dH (kH - 1) >= 1 and kW = 2 pW + 1
// (plane-shift geometry); w (O, C, kH, kW) contiguous; bias (O) in FP32 or null.
struct ImplicitConvShape {
  int64_t N, C, H, W, O, kH, kW, pH, pW, dH, OH;
};

// The switch of every AVX-512 conv kernel (the implicit GEMM and the six direct kernels of
// ops/cpu/conv_*_avx512.h): true when this CPU (and OS) can run them (AVX-512 F, BW and VL; the
// native BF16 variants also need bf16_native_gemm()) and neither an Override(ConvAlgo)
// (ops/cpu/steering.h) nor MIXTAPE_CPU_CONV=im2col says no.
// MIXTAPE_CPU_CONV: auto (default, or unset/empty) | im2col; anything else throws an Error naming
// the variable, at every call.
bool conv_kernels_enabled();

void conv_implicit_gemm(const ImplicitConvShape& s, const float* x, const float* w, const float* bias, float* y);
void conv_implicit_gemm(const ImplicitConvShape& s, const BFloat16* x, const float* w, const float* bias,
                        BFloat16* y, float alpha = 1.0f);
// `gemm`: Bf16Kernel::Avx512Bf16 (needs bgemm_avx512bf16_available()) or Amx (needs
// bgemm_amx_available()); an Error names what the CPU lacks otherwise, or a `gemm` of Emulated.
void conv_implicit_gemm(const ImplicitConvShape& s, const BFloat16* x, const BFloat16* w, const float* bias,
                        BFloat16* y, Bf16Kernel gemm, float alpha = 1.0f);

}  // namespace mixtape::cpu
