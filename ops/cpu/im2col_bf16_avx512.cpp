// ops/cpu/im2col_bf16_avx512.cpp — see im2col_bf16_avx512.h. Only the MT_AVX512_BW function holds
// AVX-512 instructions; it runs only after im2col_bf16_avx512_available().
#include "ops/cpu/im2col_bf16_avx512.h"

#include <algorithm>
#include <vector>

#include "ops/cpu/cpu_features.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MIXTAPE_HAVE_AVX512_IM2COL 1
#define MT_AVX512_BW __attribute__((target("avx512f,avx512bw")))
#else
#define MIXTAPE_HAVE_AVX512_IM2COL 0
#endif

namespace mixtape::cpu {

bool im2col_bf16_avx512_available() {
  const CpuFeatures& f = cpu_features();
  return MIXTAPE_HAVE_AVX512_IM2COL && f.avx512f && f.avx512bw && f.os_zmm_state;
}

#if MIXTAPE_HAVE_AVX512_IM2COL
namespace {
// Bits lo..hi-1 of a 32-bit chunk (0 <= lo <= hi <= 32).
inline uint32_t bit_range(int64_t lo, int64_t hi) {
  if (hi <= lo) return 0;
  const uint64_t ones = (uint64_t(1) << (hi - lo)) - 1;
  return static_cast<uint32_t>(ones << lo);
}
}  // namespace

MT_AVX512_BW void im2col_plane_shift_bf16_avx512(const BFloat16* x, int64_t C, int64_t H, int64_t W, int64_t OH,
                                                 int64_t kH, int64_t kW, int64_t pH, int64_t pW, int64_t dH,
                                                 BFloat16* col) {
  const int64_t L = OH * W, chunks = (L + 31) / 32;
  // For column offset kj: bit l of chunk l / 32 is set when output column l % W reads inside the
  // image, i.e. 0 <= l % W + kj - pW < W.
  std::vector<uint32_t> cols(static_cast<size_t>(kW * chunks), 0);
  for (int64_t kj = 0; kj < kW; ++kj)
    for (int64_t l = 0; l < L; ++l) {
      const int64_t j = l % W + kj - pW;
      if (j >= 0 && j < W) cols[static_cast<size_t>(kj * chunks + l / 32)] |= uint32_t(1) << (l % 32);
    }
  const __mmask32 tail = static_cast<__mmask32>(bit_range(0, L - (chunks - 1) * 32));
  for (int64_t c = 0; c < C; ++c) {
    const uint16_t* plane = &x[c * H * W].bits;
    for (int64_t ki = 0; ki < kH; ++ki) {
      const int64_t offh = ki * dH - pH;
      // Output rows [i0, i1) read inside the image (0 <= i + offh < H): l in [i0 W, i1 W).
      const int64_t i0 = std::clamp<int64_t>(-offh, 0, OH), i1 = std::clamp<int64_t>(H - offh, i0, OH);
      for (int64_t kj = 0; kj < kW; ++kj) {
        const int64_t s = offh * W + kj - pW;  // col[r, l] = plane[l + s]
        uint16_t* row = &col[((c * kH + ki) * kW + kj) * L].bits;
        const uint32_t* cm = cols.data() + kj * chunks;
        for (int64_t q = 0; q < chunks; ++q) {
          const int64_t l0 = q * 32;
          // Lanes whose output row reads inside the image and whose column does too; masked-off
          // lanes are neither read (no fault, whatever their address) nor nonzero.
          const __mmask32 m = static_cast<__mmask32>(
              cm[q] & bit_range(std::clamp<int64_t>(i0 * W - l0, 0, 32), std::clamp<int64_t>(i1 * W - l0, 0, 32)));
          const __m512i v = _mm512_maskz_loadu_epi16(m, plane + l0 + s);
          if (q + 1 < chunks)
            _mm512_storeu_si512(row + l0, v);
          else
            _mm512_mask_storeu_epi16(row + l0, tail, v);
        }
      }
    }
  }
}
#else
void im2col_plane_shift_bf16_avx512(const BFloat16*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                                    int64_t, int64_t, BFloat16*) {}
#endif

}  // namespace mixtape::cpu
