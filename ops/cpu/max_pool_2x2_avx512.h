// ops/cpu/max_pool_2x2_avx512.h — max_pool2d's 2x2, stride-2 window (every small CNN's) on f32
// rows, 16 windows at a time in AVX-512. The same scan order and comparison as ops/pooling.cpp's
// SSE2 and scalar loops (taps in row-major order; take a tap when it is greater than the best so
// far, or NaN), so values and indices are bit-identical to theirs. Measured: the SSE2 loops were
// 13% of a SmallCNN fp32 training step (forward, and the backward's recomputed argmax).
#pragma once
#include <cstdint>

namespace mixtape::cpu {

// True when this CPU has AVX-512F.
bool max_pool_2x2_avx512_available();

// One output row: windows ow < OW over input rows r0, r1 (each at least 2 OW long). out[ow] gets
// the max (when out is given), idx[ow] its flat index in the plane, row0_index + (tap row) W +
// 2 ow + (tap column) (when idx is given). The plane must have fewer than 2^31 elements.
void max_pool_row_2x2_avx512(const float* r0, const float* r1, int64_t OW, float* out, int64_t* idx,
                             int64_t row0_index, int64_t W);

// The gradient of one output row's windows, written in one pass (no zero fill, no scatter): the
// argmax tap of window ow (found as above on input rows x0, x1) gets 0 + g[ow], the value the
// generic loop's scatter into zeros gives (-0 becomes +0), the other three taps get +0. Writes
// columns [0, 2 OW) of gradient rows gx0 and gx1.
void max_pool_row_2x2_grad_avx512(const float* x0, const float* x1, int64_t OW, const float* g, float* gx0,
                                  float* gx1);

}  // namespace mixtape::cpu
