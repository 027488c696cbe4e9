// ops/cpu/max_pool_2x2_avx512.h — max_pool2d's 2x2, stride-2 window (every small CNN's) on f32
// and BF16 planes, 16 windows at a time in AVX-512 (BF16 widened exactly in registers, compared
// in f32 and stored exactly: no widened plane, no rounding pass; the bits of the f32 kernel on
// the widened plane, rounded). The same scan order and comparison as ops/max_pool.cpp's
// SSE2 and scalar loops (taps in row-major order; take a tap when it is greater than the best so
// far, or NaN), so values, indices and tap codes are bit-identical to theirs. Measured: the SSE2 loops were
// 13% of a SmallCNN fp32 training step (forward, and the backward's recomputed argmax).
#pragma once
#include <cstdint>

#include "core/bfloat16.h"

namespace mixtape::cpu {

// isa_avx512() (ops/cpu/isa.h: AVX-512 F, BW, VL, every AVX-512 CPU since Skylake-X).
bool max_pool_2x2_avx512_available();

// One plane: in (H, W) with 2 OH <= H, 2 OW <= W and H W < 2^31 -> out (OH, OW) the maxima (when
// out is given), idx (OH, OW) their flat indices in the plane (when idx is given) and taps the
// winning tap codes of ops/max_pool_taps.h, 0..3 = 2 row + column in the window, packed 2 bits a
// code (OH rows of packed_tap_bytes(OW) bytes, pad bits 0; when taps is given): all from the one
// pass over the input.
void max_pool_plane_2x2_avx512(const float* in, int64_t OH, int64_t OW, int64_t W, float* out, int64_t* idx,
                               uint8_t* taps);

// The gradient plane from the packed tap codes in one pass (no zero fill, no scatter): tap
// taps[oh, ow] of window (oh, ow) gets 0 + g[oh, ow], the value the generic loop's scatter into
// zeros gives (-0 becomes +0), the window's other taps +0. Writes rows [0, 2 OH), columns
// [0, 2 OW) of gx (H, W); the rest is the caller's. Every 2-bit code is a tap of a 2x2 window.
void max_pool_plane_2x2_tap_grad_avx512(const uint8_t* taps, int64_t OH, int64_t OW, int64_t W, const float* g,
                                        float* gx);

// The same on BF16 planes; the gradient plane's taps are BF16(0 + g) (exactly g, -0 as +0) and +0.
void max_pool_plane_2x2_avx512(const BFloat16* in, int64_t OH, int64_t OW, int64_t W, BFloat16* out, int64_t* idx,
                               uint8_t* taps);
void max_pool_plane_2x2_tap_grad_avx512(const uint8_t* taps, int64_t OH, int64_t OW, int64_t W, const BFloat16* g,
                                        BFloat16* gx);

}  // namespace mixtape::cpu
