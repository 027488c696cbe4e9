// ops/cpu/padded_planes_avx512.h — the direct (no im2col) convolution kernels' staging of an image
// into zero-padded planes (ops/cpu/conv_shape.h's PaddedPlanes) on AVX-512: FP32 (a copy, BF16 /
// FP16 widened exactly), or pairs of BF16 planes in 32-bit words (what vdpbf16ps multiplies); and
// the prefetch that brings the next image in while one is computed.
// Invariant: padded row r, column q of channel c holds x[c, r - pH, q - pW], or +0 where that is
// outside the image.
// Defined where MIXTAPE_X86_KERNELS (ops/cpu/isa.h); the functions carry their target
// (MT_TARGET_AVX512_FMA) and run only after isa_avx512() (conv_kernels_enabled()).
// Internal: ops/cpu/conv_direct_avx512.cpp and ops/cpu/conv_weight_grad_avx512.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/bfloat16.h"
#include "core/half.h"
#include "ops/cpu/bf16_round_avx512.h"
#include "ops/cpu/conv_shape.h"

#include "ops/cpu/isa.h"

#if MIXTAPE_X86_KERNELS
MT_KERNELS_BEGIN

namespace mixtape::cpu {

// 16 elements of E at src (lanes in mask m; zero elsewhere) as FP32, exactly.
template <typename E>
MT_TARGET_AVX512_FMA inline __m512 load16_as_f32(__mmask16 m, const E* src) {
  if constexpr (std::is_same_v<E, float>) {
    return _mm512_maskz_loadu_ps(m, src);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(m, src);
    if constexpr (std::is_same_v<E, Half>)
      return _mm512_cvtph_ps(h);
    else
      return widen_bf16(h);
  }
}

// Each padded row is whole 16-column chunks: a load masked to the columns inside the image (`in`:
// lanes before the row start are masked off, so nothing outside it is read) and a store masked to
// the row's Wp columns (`out`); the masks depend on the chunk only and are built once per image.
struct ChunkMasks {
  int64_t chunks;
  __mmask16 in[kMaxPaddedWidth / 16], out[kMaxPaddedWidth / 16];
  explicit ChunkMasks(const PaddedPlanes& p) : chunks((p.Wp + 15) / 16) {
    for (int64_t j = 0; j < chunks; ++j) {
      uint32_t mi = 0, mo = 0;
      for (int q = 0; q < 16; ++q) {
        const int64_t col = j * 16 + q;
        if (col < p.Wp) mo |= 1u << q;
        if (col < p.Wp && col >= p.pW && col < p.pW + p.W) mi |= 1u << q;
      }
      in[j] = static_cast<__mmask16>(mi), out[j] = static_cast<__mmask16>(mo);
    }
  }
};
// Element q of chunk j of padded row `ih` of channel c is x's column 16 j + q - pW: the address is
// formed as an integer, as it may precede the row (those lanes are masked off). Rows outside the
// image give row 0's address (every lane is masked off there).
template <typename E>
inline uintptr_t chunk_source(const PaddedPlanes& p, const E* x, int64_t c, int64_t ih, int64_t j) {
  const int64_t row = ih < 0 || ih >= p.H ? 0 : ih;
  return reinterpret_cast<uintptr_t>(x + (c * p.H + row) * p.W) +
         static_cast<uintptr_t>((16 * j - p.pW) * int64_t(sizeof(E)));
}

// One image x (C, H, W) -> xp (C, Hp, Wp) FP32, 16-bit storage widened exactly.
template <typename E>
MT_TARGET_AVX512_FMA void stage_padded(const PaddedPlanes& p, const E* x, float* xp) {
  const ChunkMasks mk(p);
  for (int64_t c = 0; c < p.C; ++c)
    for (int64_t r = 0; r < p.Hp; ++r) {
      float* d = xp + c * p.plane() + r * p.Wp;
      const int64_t ih = r - p.pH;
      const bool inside = ih >= 0 && ih < p.H;
      for (int64_t j = 0; j < mk.chunks; ++j) {
        const E* src = reinterpret_cast<const E*>(chunk_source(p, x, c, ih, j));
        _mm512_mask_storeu_ps(d + 16 * j, mk.out[j], inside ? load16_as_f32(mk.in[j], src) : _mm512_setzero_ps());
      }
    }
}

// BF16 planes (H, W) in pairs -> xp (p.C, Hp, Wp) of 32-bit words: word (q, r, c) holds plane
// lo(q)'s value at (r - pH, c - pW) in its low half and plane hi(q)'s in its high half (+0 outside
// the image, and the high half +0 where hi(q) is null). lo and hi map a plane index to a plane's
// first element: the direct BF16 forward pairs an image's channels 2q and 2q + 1, the BF16 weight
// gradient the same channel of two images.
template <typename Lo, typename Hi>
MT_TARGET_AVX512_FMA void stage_pairs(const PaddedPlanes& p, Lo&& lo, Hi&& hi, uint32_t* xp) {
  const ChunkMasks mk(p);
  for (int64_t q = 0; q < p.C; ++q) {
    const BFloat16 *a = lo(q), *b = hi(q);
    for (int64_t r = 0; r < p.Hp; ++r) {
      uint32_t* d = xp + q * p.plane() + r * p.Wp;
      const int64_t ih = r - p.pH;
      const bool inside = ih >= 0 && ih < p.H;
      for (int64_t j = 0; j < mk.chunks; ++j) {
        const __mmask16 m = inside ? mk.in[j] : 0;
        __m512i v = _mm512_cvtepu16_epi32(
            _mm256_maskz_loadu_epi16(m, reinterpret_cast<const void*>(chunk_source(p, a, 0, ih, j))));
        if (b) {
          const __m256i h = _mm256_maskz_loadu_epi16(m, reinterpret_cast<const void*>(chunk_source(p, b, 0, ih, j)));
          v = _mm512_or_si512(v, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        }
        _mm512_mask_storeu_epi32(d + 16 * j, mk.out[j], v);
      }
    }
  }
}

// Prefetches the bytes [base, base + bytes) into L2 a share per step(), spread over `steps` calls:
// the kernels interleave it with their arithmetic on one image to bring in the next one they will
// stage, which measured ~40% off the staging's cycles (it otherwise waits on memory).
struct SpreadPrefetch {
  const char* base = nullptr;
  int64_t lines = 0, per_step = 0, done = 0;
  SpreadPrefetch() = default;
  SpreadPrefetch(const void* p, int64_t bytes, int64_t steps)
      : base(static_cast<const char*>(p)),
        lines(p && bytes > 0 ? (bytes + 63) / 64 : 0),
        per_step(steps > 0 ? (lines + steps - 1) / steps : lines) {}
  void step() {
    for (const int64_t end = std::min(lines, done + per_step); done < end; ++done)
      _mm_prefetch(base + done * 64, _MM_HINT_T1);
  }
};

}  // namespace mixtape::cpu

MT_KERNELS_END
#endif  // MIXTAPE_X86_KERNELS
