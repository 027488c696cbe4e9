// ops/cpu/im2col_avx512.cpp — see im2col_avx512.h. Only the MT_TARGET_AVX512 functions hold AVX-512
// instructions; they run only after im2col_avx512_available().
#include "ops/cpu/im2col_avx512.h"

#include <algorithm>
#include <cassert>
#include <vector>

#include "ops/cpu/cpu_features.h"

#include "ops/cpu/isa.h"
MT_KERNELS_BEGIN

namespace mixtape::cpu {

bool im2col_avx512_available() { return isa_avx512(); }

#if MIXTAPE_X86_KERNELS
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
  MT_TARGET_AVX512 static __m512i load(uint32_t m, const E* p) {
    return _mm512_castps_si512(_mm512_maskz_loadu_ps(static_cast<__mmask16>(m), p));
  }
  MT_TARGET_AVX512 static void store(uint32_t m, E* p, __m512i v) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>(m), _mm512_castsi512_ps(v));
  }
  // Lane u <- element 2u of a for u < n, element 2 (u - n) of b for n <= u < 2n (n <= 8; with
  // n = 8, the even elements of the 32 in a:b).
  MT_TARGET_AVX512 static __m512i two_rows_index(int64_t n) {
    alignas(64) int32_t idx[16] = {};
    for (int64_t u = 0; u < 2 * n; ++u) idx[u] = static_cast<int32_t>(u < n ? 2 * u : 16 + 2 * (u - n));
    return _mm512_load_si512(idx);
  }
  MT_TARGET_AVX512 static __m512i permute2(__m512i a, __m512i idx, __m512i b) { return _mm512_permutex2var_epi32(a, idx, b); }
};
struct Bf16Lanes {
  using E = uint16_t;
  static constexpr int64_t kLanes = 32;
  MT_TARGET_AVX512 static __m512i load(uint32_t m, const E* p) { return _mm512_maskz_loadu_epi16(m, p); }
  MT_TARGET_AVX512 static void store(uint32_t m, E* p, __m512i v) { _mm512_mask_storeu_epi16(p, m, v); }
  // Lane u <- element 2u of a for u < n, element 2 (u - n) of b for n <= u < 2n (n <= 16; with
  // n = 16, the even elements of the 64 in a:b).
  MT_TARGET_AVX512 static __m512i two_rows_index(int64_t n) {
    alignas(64) uint16_t idx[32] = {};
    for (int64_t u = 0; u < 2 * n; ++u) idx[u] = static_cast<uint16_t>(u < n ? 2 * u : 32 + 2 * (u - n));
    return _mm512_load_si512(idx);
  }
  MT_TARGET_AVX512 static __m512i permute2(__m512i a, __m512i idx, __m512i b) { return _mm512_permutex2var_epi16(a, idx, b); }
};

template <typename V>
MT_TARGET_AVX512 void im2col_plane_shift(const typename V::E* x, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t kH,
                                     int64_t kW, int64_t pH, int64_t pW, int64_t dH, typename V::E* col,
                                     int64_t ld) {
  constexpr int64_t N = V::kLanes;
  const int64_t L = OH * W, chunks = (L + N - 1) / N;
  if (chunks == 0) return;
  // The lanes a load may read depend on the kernel tap (ki, kj) and the chunk, not on the channel:
  // bit l % N of masks[(ki kW + kj) chunks + l / N] is set when output pixel l = i W + j reads
  // inside the image, 0 <= i + ki dH - pH < H and 0 <= j + kj - pW < W. Masked-off lanes are
  // neither read (no fault, whatever their address) nor nonzero. Built once per call (per image
  // and thread: the buffers are the thread's own) from a per-kj column bitmap (one pass over the
  // plane per kernel column) and each kernel row's range of valid output rows (a few bit
  // operations per chunk), so the loop over channels is loads and stores only.
  thread_local std::vector<uint32_t> masks, cols;
  masks.resize(static_cast<size_t>(kH * kW * chunks));
  cols.assign(static_cast<size_t>(kW * chunks), 0);
  for (int64_t kj = 0; kj < kW; ++kj) {
    uint32_t* bits = cols.data() + kj * chunks;
    for (int64_t l = 0, j = 0; l < L; ++l, j = j + 1 == W ? 0 : j + 1)  // j = l % W
      if (j + kj - pW >= 0 && j + kj - pW < W) bits[l / N] |= uint32_t(1) << (l & (N - 1));
  }
  for (int64_t ki = 0; ki < kH; ++ki) {
    const int64_t offh = ki * dH - pH;
    // Output rows [i0, i1) read inside the image: l in [i0 W, i1 W).
    const int64_t i0 = std::clamp<int64_t>(-offh, 0, OH), i1 = std::clamp<int64_t>(H - offh, i0, OH);
    for (int64_t q = 0; q < chunks; ++q) {
      const uint32_t rows =
          bit_range(std::clamp<int64_t>(i0 * W - q * N, 0, N), std::clamp<int64_t>(i1 * W - q * N, 0, N));
      for (int64_t kj = 0; kj < kW; ++kj)
        masks[static_cast<size_t>((ki * kW + kj) * chunks + q)] = cols[static_cast<size_t>(kj * chunks + q)] & rows;
    }
  }
  const int64_t taps = kH * kW;
  thread_local std::vector<int64_t> shift;
  shift.resize(static_cast<size_t>(taps));
  for (int64_t ki = 0; ki < kH; ++ki)
    for (int64_t kj = 0; kj < kW; ++kj) shift[ki * kW + kj] = (ki * dH - pH) * W + kj - pW;  // col[r, l] = plane[l + s]
  const uint32_t all = bit_range(0, N), tail = bit_range(0, L - (chunks - 1) * N);
  // Plain pointers into the thread_local tables: in a shared library every thread_local access
  // may call __tls_get_addr.
  const uint32_t* mask = masks.data();
  const int64_t* shifts = shift.data();
  for (int64_t c = 0; c < C; ++c) {
    const typename V::E* plane = x + c * H * W;
    for (int64_t tap = 0; tap < taps; ++tap) {
      typename V::E* row = col + (c * taps + tap) * ld;
      const uint32_t* m = mask + tap * chunks;
      const typename V::E* src = plane + shifts[tap];
      for (int64_t q = 0; q + 1 < chunks; ++q) V::store(all, row + q * N, V::load(m[q], src + q * N));
      const int64_t q = chunks - 1;
      V::store(tail, row + q * N, V::load(m[q], src + q * N));
    }
  }
}
// Lanes t of an N-lane load at input column b whose column b + t lies in [0, W).
inline uint32_t inside(int64_t b, int64_t W, int64_t N) {
  return bit_range(std::clamp<int64_t>(-b, 0, N), std::clamp<int64_t>(W - b, 0, N));
}

// The lanes an output chunk reads depend on the kernel column kj and the chunk only, so they are
// tabulated once per call; the loops over channels, kernel rows and output rows are then loads,
// a permute (stride 2) and a store per chunk.
struct RowChunk {
  int64_t b;            // the input column of the chunk's first output column
  uint32_t lo, hi, st;  // lanes read from input columns [b, b + N) and [b + N, b + 2N); stored
};
template <typename V, int64_t kStride>
MT_TARGET_AVX512 void im2col_rows_strided(const typename V::E* x, const Im2colRows& g, typename V::E* col, int64_t ld) {
  using E = typename V::E;
  constexpr int64_t N = V::kLanes;
  const int64_t chunks = (g.OW + N - 1) / N;
  thread_local std::vector<RowChunk> tab;
  tab.resize(static_cast<size_t>(g.kW * chunks));
  for (int64_t kj = 0; kj < g.kW; ++kj)
    for (int64_t q = 0; q < chunks; ++q) {
      RowChunk& t = tab[static_cast<size_t>(kj * chunks + q)];
      t.b = q * N * kStride + kj - g.pW;
      t.st = bit_range(0, std::min(N, g.OW - q * N));
      t.lo = inside(t.b, g.W, N) & (kStride == 1 ? t.st : ~0u);
      t.hi = inside(t.b + N, g.W, N);
    }
  const __m512i zero = _mm512_setzero_si512(), evens = V::two_rows_index(N / 2);
  const RowChunk* chunk = tab.data();  // (see im2col_plane_shift)
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t ki = 0; ki < g.kH; ++ki) {
      E* rows = col + (c * g.kH + ki) * g.kW * ld;
      for (int64_t i = 0; i < g.OH; ++i) {
        const int64_t ih = i * g.sH + ki * g.dH - g.pH;
        if (ih < 0 || ih >= g.H) {
          for (int64_t kj = 0; kj < g.kW; ++kj)
            for (int64_t q = 0; q < chunks; ++q)
              V::store(chunk[kj * chunks + q].st, rows + kj * ld + i * g.OW + q * N, zero);
          continue;
        }
        const E* src = x + (c * g.H + ih) * g.W;
        for (int64_t kj = 0; kj < g.kW; ++kj) {
          const RowChunk* t = chunk + kj * chunks;
          E* out = rows + kj * ld + i * g.OW;
          for (int64_t q = 0; q < chunks; ++q) {
            __m512i v = V::load(t[q].lo, src + t[q].b);
            if constexpr (kStride == 2) v = V::permute2(v, evens, V::load(t[q].hi, src + t[q].b + N));
            V::store(t[q].st, out + q * N, v);
          }
        }
      }
    }
}
// Stride 2 with output rows of at most half a vector (ResNet's downsampling convs at 14x14 and
// 7x7 outputs in BF16, at 7x7 in f32): one masked load per input row holds every element a row
// of outputs reads, and one permute takes the even ones of two rows at once, so each store
// writes two output rows (a lone last row pairs with zeros).
// Input row ih of a plane (already offset by the kernel column), lanes `in`; zero outside the image.
template <typename V>
MT_TARGET_AVX512 inline __m512i input_row(const typename V::E* plane, const Im2colRows& g, int64_t ih, uint32_t in) {
  return ih >= 0 && ih < g.H ? V::load(in, plane + ih * g.W) : _mm512_setzero_si512();
}
template <typename V>
MT_TARGET_AVX512 void im2col_rows_paired(const typename V::E* x, const Im2colRows& g, typename V::E* col, int64_t ld) {
  using E = typename V::E;
  constexpr int64_t N = V::kLanes;
  const __m512i idx = V::two_rows_index(g.OW), zero = _mm512_setzero_si512();
  const uint32_t one = bit_range(0, g.OW), two = bit_range(0, 2 * g.OW);
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t ki = 0; ki < g.kH; ++ki)
      for (int64_t kj = 0; kj < g.kW; ++kj) {
        const int64_t b = kj - g.pW;  // the input column of output column 0
        const uint32_t in = inside(b, g.W, N);
        const E* plane = x + c * g.H * g.W + b;
        E* out = col + ((c * g.kH + ki) * g.kW + kj) * ld;
        const int64_t off = ki * g.dH - g.pH;  // output row i reads input row i sH + off
        int64_t i = 0;
        for (; i + 1 < g.OH; i += 2)
          V::store(two, out + i * g.OW,
                   V::permute2(input_row<V>(plane, g, i * g.sH + off, in), idx,
                               input_row<V>(plane, g, (i + 1) * g.sH + off, in)));
        if (i < g.OH) V::store(one, out + i * g.OW, V::permute2(input_row<V>(plane, g, i * g.sH + off, in), idx, zero));
      }
}

template <typename V>
void im2col_rows(const typename V::E* x, const Im2colRows& g, typename V::E* col, int64_t ld) {
  assert(im2col_rows_applies(g.sW, 1));
  if (g.sW == 1)
    im2col_rows_strided<V, 1>(x, g, col, ld);
  else if (2 * g.OW <= V::kLanes)
    im2col_rows_paired<V>(x, g, col, ld);
  else
    im2col_rows_strided<V, 2>(x, g, col, ld);
}

// col2im for the row kernel's geometries (f32): the kernel columns' contributions to one input row
// are gathered in registers, 16 input columns at a time — per chunk, per kernel column kj, one
// masked load of the col row's outputs that land there, a permute putting each on its input
// column, one masked add — and stored once per chunk. (One masked read-modify-write per kj
// stalled on the previous kj's masked store: 0.88-0.92x the scalar loop.) A pixel receives its
// contributions in the order (ki, kj), the generic loop's order (for a given ki at most one
// output row reads it), so the sums are the same bit for bit; lanes nothing reads are stored
// back as loaded.
struct Col2imChunk {
  int64_t j0;                 // the first output column whose input column is in the chunk
  uint32_t load, add;         // output columns j0 + u loaded; input lanes added to
  alignas(64) int32_t idx[16];  // input lane t takes loaded lane idx[t]
};
MT_TARGET_AVX512 void col2im_rows_f32(const float* col, const Im2colRows& g, float* x) {
  constexpr int64_t N = 16;
  const int64_t L = g.OH * g.OW, chunks = (g.W + N - 1) / N;
  thread_local std::vector<Col2imChunk> tab;
  tab.resize(static_cast<size_t>(g.kW * chunks));
  for (int64_t kj = 0; kj < g.kW; ++kj)
    for (int64_t q = 0; q < chunks; ++q) {
      Col2imChunk& t = tab[static_cast<size_t>(kj * chunks + q)];
      t = Col2imChunk{};
      t.j0 = -1;
      int64_t count = 0;
      for (int64_t lane = 0; lane < N && q * N + lane < g.W; ++lane) {
        const int64_t d = q * N + lane - (kj - g.pW);  // = j sW for the output column j reading it
        if (d < 0 || d % g.sW != 0 || d / g.sW >= g.OW) continue;
        if (t.j0 < 0) t.j0 = d / g.sW;
        const int64_t u = d / g.sW - t.j0;
        t.idx[lane] = static_cast<int32_t>(u);
        t.add |= uint32_t(1) << lane;
        count = u + 1;
      }
      if (t.j0 < 0) t.j0 = 0;
      t.load = bit_range(0, count);
    }
  const Col2imChunk* chunk = tab.data();  // (see im2col_plane_shift)
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t ki = 0; ki < g.kH; ++ki)
      for (int64_t i = 0; i < g.OH; ++i) {
        const int64_t ih = i * g.sH + ki * g.dH - g.pH;
        if (ih < 0 || ih >= g.H) continue;
        float* dst = x + (c * g.H + ih) * g.W;
        const float* src = col + (c * g.kH + ki) * g.kW * L + i * g.OW;  // kernel column 0's outputs
        for (int64_t q = 0; q < chunks; ++q) {
          const __mmask16 m = static_cast<__mmask16>(bit_range(0, std::min(N, g.W - q * N)));
          __m512 d = _mm512_maskz_loadu_ps(m, dst + q * N);
          for (int64_t kj = 0; kj < g.kW; ++kj) {
            const Col2imChunk& t = chunk[kj * chunks + q];
            if (!t.add) continue;
            const __m512 v = _mm512_maskz_loadu_ps(static_cast<__mmask16>(t.load), src + kj * L + t.j0);
            d = _mm512_mask_add_ps(d, static_cast<__mmask16>(t.add), d,
                                   _mm512_permutexvar_ps(_mm512_load_si512(t.idx), v));
          }
          _mm512_mask_storeu_ps(dst + q * N, m, d);
        }
      }
}

}  // namespace
#endif  // MIXTAPE_X86_KERNELS

bool im2col_rows_applies(int64_t sW, int64_t dW) { return dW == 1 && (sW == 1 || sW == 2); }

void im2col_rows_avx512(const float* x, const Im2colRows& g, float* col, int64_t ld) {
  MT_X86_ONLY(im2col_rows<F32Lanes>(x, g, col, ld));
}
void im2col_rows_avx512(const BFloat16* x, const Im2colRows& g, BFloat16* col, int64_t ld) {
  MT_X86_ONLY(im2col_rows<Bf16Lanes>(&x->bits, g, &col->bits, ld));
}
void col2im_rows_avx512(const float* col, const Im2colRows& g, float* x) {
  MT_X86_ONLY(col2im_rows_f32(col, g, x));
}

void im2col_plane_shift_avx512(const float* x, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t kH, int64_t kW,
                               int64_t pH, int64_t pW, int64_t dH, float* col, int64_t ld) {
  MT_X86_ONLY(im2col_plane_shift<F32Lanes>(x, C, H, W, OH, kH, kW, pH, pW, dH, col, ld));
}
void im2col_plane_shift_avx512(const BFloat16* x, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t kH,
                               int64_t kW, int64_t pH, int64_t pW, int64_t dH, BFloat16* col, int64_t ld) {
  // BFloat16 is a standard-layout wrapper of its uint16_t bits (core/bfloat16.h asserts it).
  MT_X86_ONLY(im2col_plane_shift<Bf16Lanes>(&x->bits, C, H, W, OH, kH, kW, pH, pW, dH, &col->bits, ld));
}

}  // namespace mixtape::cpu

MT_KERNELS_END
