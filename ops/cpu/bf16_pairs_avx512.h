// ops/cpu/bf16_pairs_avx512.h — the BF16 "pair" (VNNI) layout shared by the BF16 GEMM kernels:
// the two BF16 of depths p and p + 1 (p even) side by side in one 32-bit word, which is what both
// vdpbf16ps (ops/cpu/bgemm_avx512bf16.h) and the AMX tile instruction tdpbf16ps
// (ops/cpu/bgemm_amx.h) multiply. Owns: the 16 x 16 32-bit transpose, the masked pair loads, and
// the packing of op(B) into 32-column panels of pairs.
// Invariant: everything here is AVX-512 (F, BW, VL) code, inline, compiled with MT_TARGET_AVX512BF16;
// call it only from functions whose target includes those features, after the CPU check.
#pragma once
#include <algorithm>
#include <cstdint>

#include "ops/cpu/isa.h"
MT_KERNELS_BEGIN

namespace mixtape::cpu::bf16_pairs {

// Columns of a packed op(B) panel: two zmm of 16 pairs per depth pair.
constexpr int64_t kPairPanel = 32;

#if MIXTAPE_X86_KERNELS

// The low `n` of 32 16-bit lanes (n <= 32): masked loads touch no memory past them.
MT_TARGET_AVX512BF16 inline __mmask32 low_lanes(int64_t n) {
  return n >= 32 ? ~__mmask32(0) : (__mmask32(1) << n) - 1;
}

// Transposes the 16 x 16 block of 32-bit words r[row][col] in registers: afterwards r[col] holds
// column col, rows 0..15 in its lanes. Rounds: 32-bit interleave of row pairs, 64-bit interleave
// (lane L of u[4g + e] then holds rows 4g..4g+3 of column 4L + e), then two rounds of 128-bit
// lane selection gathering the four row groups of each column.
MT_TARGET_AVX512BF16 inline void transpose16x16_epi32(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {
    r[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    r[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  for (int e = 0; e < 4; ++e) {  // t[e]: lanes 0, 2 of r[e], r[4+e]; t[4+e]: lanes 1, 3; same for rows 8-15
    t[e] = _mm512_shuffle_i32x4(r[e], r[4 + e], 0x88);
    t[4 + e] = _mm512_shuffle_i32x4(r[e], r[4 + e], 0xDD);
    t[8 + e] = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], 0x88);
    t[12 + e] = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], 0xDD);
  }
  for (int e = 0; e < 4; ++e) {
    r[e] = _mm512_shuffle_i32x4(t[e], t[8 + e], 0x88);
    r[8 + e] = _mm512_shuffle_i32x4(t[e], t[8 + e], 0xDD);
    r[4 + e] = _mm512_shuffle_i32x4(t[4 + e], t[12 + e], 0x88);
    r[12 + e] = _mm512_shuffle_i32x4(t[4 + e], t[12 + e], 0xDD);
  }
}

// Loads the depth run [p, p + 32) of `rows` (<= 16) rows base + q stride (each a row whose depth
// pairs are contiguous), zero past depth kc and for q >= rows, and transposes the 32-bit pairs:
// r[q] = pair p / 2 + q of the 16 rows, one per lane. Returns how many of the 16 pairs are in the
// slice. (A function, not a lambda taking a store: lambdas do not inherit MT_TARGET_AVX512BF16.)
MT_TARGET_AVX512BF16 inline int64_t load_pairs_transposed(const uint16_t* base, int64_t stride, int64_t rows, int64_t p,
                                             int64_t kc, __m512i r[16]) {
  const __mmask32 mask = low_lanes(kc - p);
  for (int q = 0; q < 16; ++q)
    r[q] = q < rows ? _mm512_maskz_loadu_epi16(mask, base + q * stride + p) : _mm512_setzero_si512();
  transpose16x16_epi32(r);
  return std::min<int64_t>(16, (kc - p + 1) / 2);
}

// One pair row of a 32-column panel: r0, r1 hold depths p and p + 1 of the 32 columns; dst (64-byte
// aligned) gets (r0[j], r1[j]) for j = 0..31 as 32-bit words, 128 bytes.
MT_TARGET_AVX512BF16 inline void store_pair_row(__m512i r0, __m512i r1, uint16_t* dst) {
  alignas(64) static constexpr uint16_t kLo[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                   8,  40, 9,  41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __m512i lo_idx = _mm512_load_si512(kLo);
  const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
  _mm512_store_si512(dst, _mm512_permutex2var_epi16(r0, lo_idx, r1));
  _mm512_store_si512(dst + 32, _mm512_permutex2var_epi16(r0, hi_idx, r1));
}

// Packs the op(B) panel of kPairPanel columns [j0, j0 + cols), depth [p0, p0 + kc): pair p2, column jj holds
// (op(B)[p0 + 2 p2, j0 + jj], op(B)[p0 + 2 p2 + 1, ..]) at dst + (p2 kPairPanel + jj) 2, zero past cols
// and past depth kc. dst is 64-byte aligned.
MT_TARGET_AVX512BF16 inline void pack_b_pairs(bool tb, const uint16_t* b, int64_t ldb, int64_t j0, int64_t cols, int64_t p0,
                                       int64_t kc,
                          uint16_t* dst) {
  const int64_t kc2 = (kc + 1) / 2;
  if (!tb) {
    // Depths p and p + 1 are two rows of B: interleave their 32 columns word by word.
    const __mmask32 mask = low_lanes(cols);
    for (int64_t p2 = 0; p2 < kc2; ++p2) {
      const uint16_t* src = b + (p0 + 2 * p2) * ldb + j0;
      const __m512i r0 = _mm512_maskz_loadu_epi16(mask, src);
      const __m512i r1 = 2 * p2 + 1 < kc ? _mm512_maskz_loadu_epi16(mask, src + ldb) : _mm512_setzero_si512();
      store_pair_row(r0, r1, dst + p2 * kPairPanel * 2);
    }
    return;
  }
  // op(B)[p, j] = B[j, p]: a pair is one 32-bit word of row j of B; 16 columns x 16 pairs at a
  // time are one 32-bit transpose.
  for (int64_t j16 = 0; j16 < kPairPanel; j16 += 16) {
    const int64_t rows = std::max<int64_t>(0, std::min<int64_t>(16, cols - j16));
    const uint16_t* base = rows > 0 ? b + (j0 + j16) * ldb + p0 : b;  // no rows: zeros, nothing read
    __m512i v[16];
    for (int64_t p = 0; p < kc; p += 32) {
      const int64_t pairs = load_pairs_transposed(base, ldb, rows, p, kc, v);
      for (int64_t q = 0; q < pairs; ++q) _mm512_store_si512(dst + ((p / 2 + q) * kPairPanel + j16) * 2, v[q]);
    }
  }
}

#endif  // MIXTAPE_X86_KERNELS

}  // namespace mixtape::cpu::bf16_pairs

MT_KERNELS_END
