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

}  // namespace mixtape::cpu
