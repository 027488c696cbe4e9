// ops/cpu/batch_norm_avx512.cpp — see batch_norm_avx512.h. Only the MT_TARGET_AVX512 functions hold
// AVX-512 instructions; they run only after batch_norm_avx512_available(). CMakeLists.txt compiles
// this file with -ffp-contract=off: each product and sum rounds on its own, as in the generic
// loops (GCC would otherwise fuse a multiply and an add into an FMA here).
#include "ops/cpu/batch_norm_avx512.h"

#include <algorithm>

#include "core/macros.h"
#include "ops/cpu/cpu_features.h"

#include "ops/cpu/bf16_round_avx512.h"
#include "ops/cpu/isa.h"
MT_KERNELS_BEGIN

namespace mixtape::cpu {

bool batch_norm_avx512_available() { return isa_avx512(); }

#if MIXTAPE_X86_KERNELS
namespace {

constexpr int64_t kLanes = 32;  // RowLaneSum's
constexpr int kChunksPerFlush = 32;

inline uint32_t first_bits(int64_t n) { return n >= 32 ? 0xFFFFFFFFu : (uint32_t(1) << n) - 1u; }

// Up to 32 values of a row as two vectors of 16 floats (values [0, 16) and [16, 32)), zero past n.
struct Pair {
  __m512 lo, hi;
};
MT_TARGET_AVX512 inline Pair load32(const float* p, int64_t n) {
  const uint32_t m = first_bits(n);
  return {_mm512_maskz_loadu_ps(static_cast<__mmask16>(m), p),
          n > 16 ? _mm512_maskz_loadu_ps(static_cast<__mmask16>(m >> 16), p + 16) : _mm512_setzero_ps()};
}
MT_TARGET_AVX512 inline Pair load32(const BFloat16* p, int64_t n) {
  const __m512i v = _mm512_maskz_loadu_epi16(static_cast<__mmask32>(first_bits(n)), p);
  return {widen_bf16(_mm512_castsi512_si256(v)), widen_bf16(_mm512_extracti64x4_epi64(v, 1))};
}

// RowLaneSum's state: the 32 float partials (part[0] lanes 0-15, part[1] lanes 16-31) and the 32
// f64 lanes they flush into (acc[q] lanes 8q .. 8q + 7).
struct Lanes {
  __m512 part[2];
  __m512d acc[4];
  int chunks;
};
MT_TARGET_AVX512 inline void zero(Lanes& l) {
  l.part[0] = l.part[1] = _mm512_setzero_ps();
#pragma GCC unroll 4
  for (auto& a : l.acc) a = _mm512_setzero_pd();
  l.chunks = 0;
}
MT_TARGET_AVX512 inline void flush(Lanes& l) {
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m512 p = l.part[h];
    l.acc[2 * h] = _mm512_add_pd(l.acc[2 * h], _mm512_cvtps_pd(_mm512_castps512_ps256(p)));
    l.acc[2 * h + 1] = _mm512_add_pd(
        l.acc[2 * h + 1], _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(p), 1))));
    l.part[h] = _mm512_setzero_ps();
  }
  l.chunks = 0;
}
// Adds the chunk's terms (lanes 0-15 in lo, 16-31 in hi) to the lanes that hold one of its n
// values; a lane past n keeps its partial untouched, as in the generic loop.
MT_TARGET_AVX512 inline void add_chunk(Lanes& l, int64_t n, __m512 lo, __m512 hi) {
  if (n >= kLanes) {
    l.part[0] = _mm512_add_ps(l.part[0], lo);
    l.part[1] = _mm512_add_ps(l.part[1], hi);
  } else {
    const uint32_t m = first_bits(n);
    l.part[0] = _mm512_mask_add_ps(l.part[0], static_cast<__mmask16>(m), l.part[0], lo);
    l.part[1] = _mm512_mask_add_ps(l.part[1], static_cast<__mmask16>(m >> 16), l.part[1], hi);
  }
  if (++l.chunks == kChunksPerFlush) flush(l);
}
// RowLaneSum::total: the pending partials flushed, then the halving tree (lane i += lane i + w for
// w = 16, 8, 4, 2, 1).
MT_TARGET_AVX512 inline double total(Lanes& l) {
  flush(l);
  const __m512d v = _mm512_add_pd(_mm512_add_pd(l.acc[0], l.acc[2]), _mm512_add_pd(l.acc[1], l.acc[3]));
  const __m256d a = _mm256_add_pd(_mm512_castpd512_pd256(v), _mm512_extractf64x4_pd(v, 1));
  const __m128d b = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
  return _mm_cvtsd_f64(_mm_add_sd(b, _mm_unpackhi_pd(b, b)));
}

// A channel's rows are S values each, `stride` apart (the other channels in between): the hardware
// prefetcher restarts at every row, so each row's loads would wait on memory (perf put two thirds
// of grad_sums' time on its first use of the loaded values). The row `ahead` rows on is prefetched
// instead: about 2 KB of cache lines ahead (a row costs at least one line), or the next row where
// a row is longer. Contiguous rows (stride == S, one channel) are left to the hardware.
inline int64_t rows_ahead(int64_t S, int64_t elem) { return std::max<int64_t>(1, 2048 / std::max<int64_t>(64, S * elem)); }
MT_TARGET_AVX512 inline void prefetch_row(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t b = 0; b < bytes; b += 64) _mm_prefetch(c + b, _MM_HINT_T0);
  if (bytes > 0) _mm_prefetch(c + bytes - 1, _MM_HINT_T0);
}

// chunk(n, a's chunk, b's chunk) for each chunk of n values of the rows of a and of b (b may be
// null: then b's chunk is empty), in RowLaneSum's order.
template <typename T, typename Chunk>
MT_TARGET_AVX512 void for_each_chunk(const T* a, const T* b, int64_t rows, int64_t stride, int64_t S, Chunk&& chunk) {
  const int64_t ahead = rows_ahead(S, sizeof(T));
  for (int64_t r = 0; r < rows; ++r) {
    const T* ra = a + r * stride;
    const T* rb = b ? b + r * stride : ra;
    if (stride != S && r + ahead < rows) {
      prefetch_row(ra + ahead * stride, S * int64_t(sizeof(T)));
      if (b) prefetch_row(rb + ahead * stride, S * int64_t(sizeof(T)));
    }
    for (int64_t s = 0; s < S; s += kLanes) {
      const int64_t n = S - s < kLanes ? S - s : kLanes;
      chunk(n, load32(ra + s, n), b ? load32(rb + s, n) : Pair{});
    }
  }
}

template <typename T>
MT_TARGET_AVX512 double sum_impl(const T* x, int64_t rows, int64_t stride, int64_t S) {
  Lanes l;
  zero(l);
  for_each_chunk(x, static_cast<const T*>(nullptr), rows, stride, S, [&](int64_t n, const Pair& v, const Pair&) MT_TARGET_AVX512 {
    add_chunk(l, n, v.lo, v.hi);
  });
  return total(l);
}

template <typename T>
MT_TARGET_AVX512 void dev_sums_impl(const T* x, int64_t rows, int64_t stride, int64_t S, float shift, double* sum_d,
                             double* sum_d2) {
  const __m512 k = _mm512_set1_ps(shift);
  Lanes ld, ld2;
  zero(ld);
  zero(ld2);
  for_each_chunk(x, static_cast<const T*>(nullptr), rows, stride, S, [&](int64_t n, const Pair& v, const Pair&) MT_TARGET_AVX512 {
    const __m512 lo = _mm512_sub_ps(v.lo, k), hi = _mm512_sub_ps(v.hi, k);
    add_chunk(ld, n, lo, hi);
    add_chunk(ld2, n, _mm512_mul_ps(lo, lo), _mm512_mul_ps(hi, hi));
  });
  *sum_d = total(ld);
  *sum_d2 = total(ld2);
}

template <typename T>
MT_TARGET_AVX512 void grad_sums_impl(const T* g, const T* x, int64_t rows, int64_t stride, int64_t S, float shift,
                              double* sum_g, double* sum_gd) {
  const __m512 k = _mm512_set1_ps(shift);
  Lanes lg, lgd;
  zero(lg);
  zero(lgd);
  for_each_chunk(g, x, rows, stride, S, [&](int64_t n, const Pair& gv, const Pair& xv) MT_TARGET_AVX512 {
    add_chunk(lg, n, gv.lo, gv.hi);
    add_chunk(lgd, n, _mm512_mul_ps(gv.lo, _mm512_sub_ps(xv.lo, k)), _mm512_mul_ps(gv.hi, _mm512_sub_ps(xv.hi, k)));
  });
  *sum_g = total(lg);
  *sum_gd = total(lgd);
}

// The row maps: out[i] = f(a[i], b[i]) in float for i < n (b may be a: one input), 16 values at a
// time for f32 and 32 for BF16 (one register of results: round_to_bf16_x2).
inline __mmask16 first16(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u); }
template <typename F>
MT_TARGET_AVX512 void map_row(const float* a, const float* b, int64_t n, float* out, F&& f) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first16(n - i);
    _mm512_mask_storeu_ps(out + i, m, f(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
}
template <typename F>
MT_TARGET_AVX512 void map_row(const BFloat16* a, const BFloat16* b, int64_t n, BFloat16* out, F&& f) {
  for (int64_t i = 0; i < n; i += kLanes) {
    const int64_t k = n - i < kLanes ? n - i : kLanes;
    const Pair va = load32(a + i, k), vb = load32(b + i, k);
    _mm512_mask_storeu_epi16(out + i, static_cast<__mmask32>(first_bits(k)),
                             round_to_bf16_x2(f(va.lo, vb.lo), f(va.hi, vb.hi)));
  }
}

template <typename T>
MT_TARGET_AVX512 void affine_row_impl(const T* x, int64_t n, float a, float b, T* out) {
  const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
  map_row(x, x, n, out, [&](__m512 xv, __m512) MT_TARGET_AVX512 { return _mm512_add_ps(_mm512_mul_ps(xv, va), vb); });
}

template <typename T>
MT_TARGET_AVX512 void grad_row_impl(const T* g, const T* x, int64_t n, float a, float bx, float d, T* out) {
  const __m512 va = _mm512_set1_ps(a), vbx = _mm512_set1_ps(bx), vd = _mm512_set1_ps(d);
  map_row(g, x, n, out, [&](__m512 gv, __m512 xv) MT_TARGET_AVX512 {
    return _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(va, gv), _mm512_mul_ps(vbx, xv)), vd);
  });
}

}  // namespace
#endif  // MIXTAPE_X86_KERNELS

double bn_sum_avx512(const float* x, int64_t rows, int64_t stride, int64_t S) {
  return MT_X86_ONLY(sum_impl(x, rows, stride, S));
}
double bn_sum_avx512(const BFloat16* x, int64_t rows, int64_t stride, int64_t S) {
  return MT_X86_ONLY(sum_impl(x, rows, stride, S));
}
void bn_dev_sums_avx512(const float* x, int64_t rows, int64_t stride, int64_t S, float shift, double* sum_d,
                        double* sum_d2) {
  MT_X86_ONLY(dev_sums_impl(x, rows, stride, S, shift, sum_d, sum_d2));
}
void bn_dev_sums_avx512(const BFloat16* x, int64_t rows, int64_t stride, int64_t S, float shift, double* sum_d,
                        double* sum_d2) {
  MT_X86_ONLY(dev_sums_impl(x, rows, stride, S, shift, sum_d, sum_d2));
}
void bn_grad_sums_avx512(const float* g, const float* x, int64_t rows, int64_t stride, int64_t S, float shift,
                         double* sum_g, double* sum_gd) {
  MT_X86_ONLY(grad_sums_impl(g, x, rows, stride, S, shift, sum_g, sum_gd));
}
void bn_grad_sums_avx512(const BFloat16* g, const BFloat16* x, int64_t rows, int64_t stride, int64_t S, float shift,
                         double* sum_g, double* sum_gd) {
  MT_X86_ONLY(grad_sums_impl(g, x, rows, stride, S, shift, sum_g, sum_gd));
}
void bn_affine_row_avx512(const float* x, int64_t n, float a, float b, float* out) {
  MT_X86_ONLY(affine_row_impl(x, n, a, b, out));
}
void bn_affine_row_avx512(const BFloat16* x, int64_t n, float a, float b, BFloat16* out) {
  MT_X86_ONLY(affine_row_impl(x, n, a, b, out));
}
void bn_grad_row_avx512(const float* g, const float* x, int64_t n, float a, float bx, float d, float* out) {
  MT_X86_ONLY(grad_row_impl(g, x, n, a, bx, d, out));
}
void bn_grad_row_avx512(const BFloat16* g, const BFloat16* x, int64_t n, float a, float bx, float d,
                        BFloat16* out) {
  MT_X86_ONLY(grad_row_impl(g, x, n, a, bx, d, out));
}

}  // namespace mixtape::cpu

MT_KERNELS_END
