// ops/cpu/transpose_avx512.h — the 16 x 16 FP32 transpose in AVX-512 registers, shared by the
// SGEMM's transposed B packing and the direct conv kernels (the weight gradient's staging of gy,
// the forward's and the input gradient's stores into NCHW).
// Defined where MIXTAPE_X86_KERNELS (ops/cpu/isa.h); it carries its target (MT_TARGET_AVX512) and
// may be called only from AVX-512 code that runs after isa_avx512().
#pragma once
#include "ops/cpu/isa.h"

#if MIXTAPE_X86_KERNELS
namespace mixtape::cpu {

// Transposes the 16 x 16 block r[row][col] in registers: afterwards r[col] holds column col of
// the old block, rows 0..15 in its lanes. Four rounds: 32-bit interleave (unpack), 64-bit
// (shuffle_ps), then 128-bit lanes twice (shuffle_f32x4); the lane algebra is in the comments.
MT_TARGET_AVX512 inline void transpose16x16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {  // lane L of t[2i]: r2i[4L] r2i+1[4L] r2i[4L+1] r2i+1[4L+1]
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // lane L of r[4i + e]: rows 4i..4i+3 at column 4L + e
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int e = 0; e < 4; ++e) {  // t[e]: (rows 0-3, col e), (0-3, 8+e), (4-7, e), (4-7, 8+e); and so on
    t[e] = _mm512_shuffle_f32x4(r[e], r[4 + e], 0x88);
    t[4 + e] = _mm512_shuffle_f32x4(r[e], r[4 + e], 0xDD);
    t[8 + e] = _mm512_shuffle_f32x4(r[8 + e], r[12 + e], 0x88);
    t[12 + e] = _mm512_shuffle_f32x4(r[8 + e], r[12 + e], 0xDD);
  }
  for (int e = 0; e < 4; ++e) {  // r[c]: rows 0-3, 4-7, 8-11, 12-15 of column c
    r[e] = _mm512_shuffle_f32x4(t[e], t[8 + e], 0x88);
    r[8 + e] = _mm512_shuffle_f32x4(t[e], t[8 + e], 0xDD);
    r[4 + e] = _mm512_shuffle_f32x4(t[4 + e], t[12 + e], 0x88);
    r[12 + e] = _mm512_shuffle_f32x4(t[4 + e], t[12 + e], 0xDD);
  }
}

}  // namespace mixtape::cpu
#endif  // MIXTAPE_X86_KERNELS
