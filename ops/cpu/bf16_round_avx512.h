// ops/cpu/bf16_round_avx512.h — BF16 and FP32 in AVX-512 registers, bit for bit core/bfloat16.h:
// FP32 -> BF16 on 16 lanes as float_to_bfloat16_bits (round to nearest even: add 0x7FFF plus the
// kept lsb, drop the low half; a NaN keeps its upper half with the quiet bit set; subnormals round
// like any other value, no flush, unlike vcvtneps2bf16's treatment of subnormal inputs); BF16 ->
// FP32 (exact: the bits in the upper half). Shared by the kernels that read and write BF16
// (convolutions' staging and epilogues, batch norm, the elementwise lanes).
// Defined where MIXTAPE_X86_KERNELS (ops/cpu/isa.h); the functions carry their target
// (MT_TARGET_AVX512) and may be called only from AVX-512 code that runs after isa_avx512().
#pragma once
#include "ops/cpu/isa.h"

#if MIXTAPE_X86_KERNELS
namespace mixtape::cpu {

// The BF16 bits of each lane's value, in the low half of its 32 bits (the high half zero).
MT_TARGET_AVX512 inline __m512i round_to_bf16_lanes(__m512 v) {
  const __m512i x = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb)), 16);
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
  const __m512i q = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
  return _mm512_mask_mov_epi32(r, nan, q);
}
MT_TARGET_AVX512 inline __m256i round_to_bf16(__m512 v) {
  return _mm512_cvtepi32_epi16(round_to_bf16_lanes(v));
}
// 32 values, lo's 16 then hi's, in one register: a pack (within 128-bit lanes) and a qword
// permute put them in order. Cheaper than two narrowing vpmovdw, which perf found to be half of
// batch norm's row passes when fused with their masked store on this AMD CPU.
MT_TARGET_AVX512 inline __m512i round_to_bf16_x2(__m512 lo, __m512 hi) {
  const __m512i p = _mm512_packus_epi32(round_to_bf16_lanes(lo), round_to_bf16_lanes(hi));
  return _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), p);
}

// 16 BF16 -> 16 floats, exactly.
MT_TARGET_AVX512 inline __m512 widen_bf16(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

}  // namespace mixtape::cpu
#endif  // MIXTAPE_X86_KERNELS
