// ops/cpu/im2col_avx512.cpp — see im2col_avx512.h. Only the MT_AVX512_BW functions hold AVX-512
// instructions; they run only after im2col_avx512_available().
#include "ops/cpu/im2col_avx512.h"

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

bool im2col_avx512_available() {
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

// One zmm of elements: 16 floats or 32 BF16 (as their 16-bit patterns), masked load and store.
struct F32Lanes {
  using E = float;
  static constexpr int64_t kLanes = 16;
  MT_AVX512_BW static __m512i load(uint32_t m, const E* p) {
    return _mm512_castps_si512(_mm512_maskz_loadu_ps(static_cast<__mmask16>(m), p));
  }
  MT_AVX512_BW static void store(uint32_t m, E* p, __m512i v) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>(m), _mm512_castsi512_ps(v));
  }
};
struct Bf16Lanes {
  using E = uint16_t;
  static constexpr int64_t kLanes = 32;
  MT_AVX512_BW static __m512i load(uint32_t m, const E* p) { return _mm512_maskz_loadu_epi16(m, p); }
  MT_AVX512_BW static void store(uint32_t m, E* p, __m512i v) { _mm512_mask_storeu_epi16(p, m, v); }
};

template <typename V>
MT_AVX512_BW void im2col_plane_shift(const typename V::E* x, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t kH,
                                     int64_t kW, int64_t pH, int64_t pW, int64_t dH, typename V::E* col,
                                     int64_t ld) {
  constexpr int64_t N = V::kLanes;
  const int64_t L = OH * W, chunks = (L + N - 1) / N;
  if (chunks == 0) return;
  // The lanes a load may read depend on the kernel tap (ki, kj) and the chunk, not on the channel:
  // bit l % N of masks[(ki kW + kj) chunks + l / N] is set when output pixel l = i W + j reads
  // inside the image, 0 <= i + ki dH - pH < H and 0 <= j + kj - pW < W. Masked-off lanes are
  // neither read (no fault, whatever their address) nor nonzero. Built once per call (per image
  // and thread: the buffer is the thread's own), so the loop over channels is loads and stores
  // only — on 7x7 planes (4 chunks a row) the per-row mask arithmetic cost as much as the copies.
  thread_local std::vector<uint32_t> masks;
  masks.assign(static_cast<size_t>(kH * kW * chunks), 0);
  for (int64_t ki = 0; ki < kH; ++ki) {
    const int64_t offh = ki * dH - pH;
    // Output rows [i0, i1) read inside the image: l in [i0 W, i1 W).
    const int64_t i0 = std::clamp<int64_t>(-offh, 0, OH), i1 = std::clamp<int64_t>(H - offh, i0, OH);
    for (int64_t kj = 0; kj < kW; ++kj) {
      uint32_t* bits = masks.data() + (ki * kW + kj) * chunks;
      for (int64_t l = i0 * W, j = 0; l < i1 * W; ++l, j = j + 1 == W ? 0 : j + 1)  // j = l % W
        if (j + kj - pW >= 0 && j + kj - pW < W) bits[l / N] |= uint32_t(1) << (l & (N - 1));
    }
  }
  const int64_t taps = kH * kW;
  thread_local std::vector<int64_t> shift;
  shift.resize(static_cast<size_t>(taps));
  for (int64_t ki = 0; ki < kH; ++ki)
    for (int64_t kj = 0; kj < kW; ++kj) shift[ki * kW + kj] = (ki * dH - pH) * W + kj - pW;  // col[r, l] = plane[l + s]
  const uint32_t all = bit_range(0, N), tail = bit_range(0, L - (chunks - 1) * N);
  for (int64_t c = 0; c < C; ++c) {
    const typename V::E* plane = x + c * H * W;
    for (int64_t tap = 0; tap < taps; ++tap) {
      typename V::E* row = col + (c * taps + tap) * ld;
      const uint32_t* m = masks.data() + tap * chunks;
      const typename V::E* src = plane + shift[tap];
      for (int64_t q = 0; q + 1 < chunks; ++q) V::store(all, row + q * N, V::load(m[q], src + q * N));
      const int64_t q = chunks - 1;
      V::store(tail, row + q * N, V::load(m[q], src + q * N));
    }
  }
}
}  // namespace

void im2col_plane_shift_avx512(const float* x, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t kH, int64_t kW,
                               int64_t pH, int64_t pW, int64_t dH, float* col, int64_t ld) {
  im2col_plane_shift<F32Lanes>(x, C, H, W, OH, kH, kW, pH, pW, dH, col, ld);
}
void im2col_plane_shift_avx512(const BFloat16* x, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t kH,
                               int64_t kW, int64_t pH, int64_t pW, int64_t dH, BFloat16* col, int64_t ld) {
  // BFloat16 is a standard-layout wrapper of its uint16_t bits (core/bfloat16.h asserts it).
  im2col_plane_shift<Bf16Lanes>(&x->bits, C, H, W, OH, kH, kW, pH, pW, dH, &col->bits, ld);
}
#else
void im2col_plane_shift_avx512(const float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                               int64_t, float*, int64_t) {}
void im2col_plane_shift_avx512(const BFloat16*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                               int64_t, int64_t, BFloat16*, int64_t) {}
#endif

}  // namespace mixtape::cpu
