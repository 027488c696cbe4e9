// ops/cpu/batch_norm_avx512.cpp — see batch_norm_avx512.h. Only the MT_AVX512 functions hold
// AVX-512 instructions; they run only after batch_norm_avx512_available(). CMakeLists.txt compiles
// this file with -ffp-contract=off: each product and sum rounds on its own, as in the generic
// loops (GCC would otherwise fuse a multiply and an add into an FMA here).
#include "ops/cpu/batch_norm_avx512.h"

#include <algorithm>

#include "core/macros.h"
#include "ops/cpu/cpu_features.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "ops/cpu/bf16_round_avx512.h"
#define MIXTAPE_HAVE_AVX512_BN 1
#define MT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
// GCC 12's extract/convert intrinsics start from _mm*_undefined_*(); see ops/cpu/sgemm_avx512.cpp.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#else
#define MIXTAPE_HAVE_AVX512_BN 0
#endif

namespace mixtape::cpu {

bool batch_norm_avx512_available() {
  const CpuFeatures& f = cpu_features();
  return MIXTAPE_HAVE_AVX512_BN && f.avx512f && f.avx512bw && f.avx512vl && f.os_zmm_state;
}

#if MIXTAPE_HAVE_AVX512_BN
namespace {

constexpr int64_t kLanes = 32;  // RowLaneSum's

inline uint32_t first_bits(int64_t n) { return n >= 32 ? 0xFFFFFFFFu : (uint32_t(1) << n) - 1u; }

// Up to 32 values of a row as two vectors of 16 floats (values [0, 16) and [16, 32)), zero past n.
struct Pair {
  __m512 lo, hi;
};
MT_AVX512 inline Pair load32(const float* p, int64_t n) {
  const uint32_t m = first_bits(n);
  return {_mm512_maskz_loadu_ps(static_cast<__mmask16>(m), p),
          n > 16 ? _mm512_maskz_loadu_ps(static_cast<__mmask16>(m >> 16), p + 16) : _mm512_setzero_ps()};
}
MT_AVX512 inline Pair load32(const BFloat16* p, int64_t n) {
  const __m512i v = _mm512_maskz_loadu_epi16(static_cast<__mmask32>(first_bits(n)), p);
  return {widen_bf16(_mm512_castsi512_si256(v)), widen_bf16(_mm512_extracti64x4_epi64(v, 1))};
}

// Values 8q .. 8q + 7 of a Pair as doubles (exact).
MT_AVX512 inline __m512d eighth(const Pair& p, int q) {
  const __m512 f = q < 2 ? p.lo : p.hi;
  const __m256 h = (q & 1) == 0 ? _mm512_castps512_ps256(f)
                                : _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1));
  return _mm512_cvtps_pd(h);
}

// The 32 lanes: acc[q] holds lanes 8q .. 8q + 7.
struct Lanes {
  __m512d acc[4];
};
MT_AVX512 inline void zero(Lanes& l) {
#pragma GCC unroll 4
  for (auto& a : l.acc) a = _mm512_setzero_pd();
}
// Adds term(q) to lanes 8q .. 8q + 7 where those lanes hold one of the chunk's n values.
template <typename Term>
MT_AVX512 inline void add_chunk(Lanes& l, int64_t n, Term&& term) {
  const uint32_t m = first_bits(n);
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    const auto mq = static_cast<__mmask8>(m >> (8 * q));
    if (mq == 0xFF)
      l.acc[q] = _mm512_add_pd(l.acc[q], term(q));
    else if (mq != 0)
      l.acc[q] = _mm512_mask_add_pd(l.acc[q], mq, l.acc[q], term(q));
  }
}
// RowLaneSum::total's halving tree: lane i += lane i + w for w = 16, 8, 4, 2, 1.
MT_AVX512 inline double total(const Lanes& l) {
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
MT_AVX512 inline void prefetch_row(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t b = 0; b < bytes; b += 64) _mm_prefetch(c + b, _MM_HINT_T0);
  if (bytes > 0) _mm_prefetch(c + bytes - 1, _MM_HINT_T0);
}

template <typename T, typename Chunk>
MT_AVX512 void for_each_chunk(const T* x, int64_t rows, int64_t stride, int64_t S, Chunk&& chunk) {
  const int64_t ahead = rows_ahead(S, sizeof(T));
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * stride;
    if (stride != S && r + ahead < rows) prefetch_row(row + ahead * stride, S * int64_t(sizeof(T)));
    for (int64_t s = 0; s < S; s += kLanes) chunk(row + s, S - s < kLanes ? S - s : kLanes);
  }
}

template <typename T>
MT_AVX512 double sum_impl(const T* x, int64_t rows, int64_t stride, int64_t S) {
  Lanes l;
  zero(l);
  for_each_chunk(x, rows, stride, S, [&](const T* p, int64_t n) MT_AVX512 {
    const Pair v = load32(p, n);
    add_chunk(l, n, [&](int q) MT_AVX512 { return eighth(v, q); });
  });
  return total(l);
}

template <typename T>
MT_AVX512 double sum_sq_dev_impl(const T* x, int64_t rows, int64_t stride, int64_t S, double mu) {
  const __m512d m = _mm512_set1_pd(mu);
  Lanes l;
  zero(l);
  for_each_chunk(x, rows, stride, S, [&](const T* p, int64_t n) MT_AVX512 {
    const Pair v = load32(p, n);
    add_chunk(l, n, [&](int q) MT_AVX512 {
      const __m512d d = _mm512_sub_pd(eighth(v, q), m);
      return _mm512_mul_pd(d, d);
    });
  });
  return total(l);
}

template <typename T>
MT_AVX512 void grad_sums_impl(const T* g, const T* x, int64_t rows, int64_t stride, int64_t S, double mu,
                              double* sum_g, double* sum_gxc) {
  const __m512d m = _mm512_set1_pd(mu);
  Lanes lg, lgx;
  zero(lg);
  zero(lgx);
  const int64_t ahead = rows_ahead(S, sizeof(T));
  for (int64_t r = 0; r < rows; ++r) {
    const T* grow = g + r * stride;
    const T* xrow = x + r * stride;
    if (stride != S && r + ahead < rows) {
      prefetch_row(grow + ahead * stride, S * int64_t(sizeof(T)));
      prefetch_row(xrow + ahead * stride, S * int64_t(sizeof(T)));
    }
    for (int64_t s = 0; s < S; s += kLanes) {
      const int64_t n = S - s < kLanes ? S - s : kLanes;
      const Pair gv = load32(grow + s, n), xv = load32(xrow + s, n);
      add_chunk(lg, n, [&](int q) MT_AVX512 { return eighth(gv, q); });
      add_chunk(lgx, n, [&](int q) MT_AVX512 { return _mm512_mul_pd(eighth(gv, q), _mm512_sub_pd(eighth(xv, q), m)); });
    }
  }
  *sum_g = total(lg);
  *sum_gxc = total(lgx);
}

// 16 values at a time for the row maps.
MT_AVX512 inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
MT_AVX512 inline __m512 load16(const BFloat16* p, __mmask16 m) { return widen_bf16(_mm256_maskz_loadu_epi16(m, p)); }
MT_AVX512 inline void store16(float* p, __mmask16 m, __m512 v) { _mm512_mask_storeu_ps(p, m, v); }
// float -> BF16 as float_to_bfloat16_bits (ops/cpu/bf16_round_avx512.h).
MT_AVX512 inline void store16(BFloat16* p, __mmask16 m, __m512 v) { _mm256_mask_storeu_epi16(p, m, round_to_bf16(v)); }
inline __mmask16 first16(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u); }

template <typename T>
MT_AVX512 void affine_row_impl(const T* x, int64_t n, float a, float b, T* out) {
  const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first16(n - i);
    store16(out + i, m, _mm512_add_ps(_mm512_mul_ps(load16(x + i, m), va), vb));
  }
}

template <typename T>
MT_AVX512 void grad_row_impl(const T* g, const T* x, int64_t n, float a, float bx, float d, T* out) {
  const __m512 va = _mm512_set1_ps(a), vbx = _mm512_set1_ps(bx), vd = _mm512_set1_ps(d);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first16(n - i);
    const __m512 t = _mm512_add_ps(_mm512_mul_ps(va, load16(g + i, m)), _mm512_mul_ps(vbx, load16(x + i, m)));
    store16(out + i, m, _mm512_add_ps(t, vd));
  }
}

}  // namespace

double bn_sum_avx512(const float* x, int64_t rows, int64_t stride, int64_t S) { return sum_impl(x, rows, stride, S); }
double bn_sum_avx512(const BFloat16* x, int64_t rows, int64_t stride, int64_t S) {
  return sum_impl(x, rows, stride, S);
}
double bn_sum_sq_dev_avx512(const float* x, int64_t rows, int64_t stride, int64_t S, double mu) {
  return sum_sq_dev_impl(x, rows, stride, S, mu);
}
double bn_sum_sq_dev_avx512(const BFloat16* x, int64_t rows, int64_t stride, int64_t S, double mu) {
  return sum_sq_dev_impl(x, rows, stride, S, mu);
}
void bn_grad_sums_avx512(const float* g, const float* x, int64_t rows, int64_t stride, int64_t S, double mu,
                         double* sum_g, double* sum_gxc) {
  grad_sums_impl(g, x, rows, stride, S, mu, sum_g, sum_gxc);
}
void bn_grad_sums_avx512(const BFloat16* g, const BFloat16* x, int64_t rows, int64_t stride, int64_t S, double mu,
                         double* sum_g, double* sum_gxc) {
  grad_sums_impl(g, x, rows, stride, S, mu, sum_g, sum_gxc);
}
void bn_affine_row_avx512(const float* x, int64_t n, float a, float b, float* out) { affine_row_impl(x, n, a, b, out); }
void bn_affine_row_avx512(const BFloat16* x, int64_t n, float a, float b, BFloat16* out) {
  affine_row_impl(x, n, a, b, out);
}
void bn_grad_row_avx512(const float* g, const float* x, int64_t n, float a, float bx, float d, float* out) {
  grad_row_impl(g, x, n, a, bx, d, out);
}
void bn_grad_row_avx512(const BFloat16* g, const BFloat16* x, int64_t n, float a, float bx, float d,
                        BFloat16* out) {
  grad_row_impl(g, x, n, a, bx, d, out);
}
#else
// Not x86-64 with GCC/Clang: batch_norm_avx512_available() is false, so these are never called.
double bn_sum_avx512(const float*, int64_t, int64_t, int64_t) { return 0; }
double bn_sum_avx512(const BFloat16*, int64_t, int64_t, int64_t) { return 0; }
double bn_sum_sq_dev_avx512(const float*, int64_t, int64_t, int64_t, double) { return 0; }
double bn_sum_sq_dev_avx512(const BFloat16*, int64_t, int64_t, int64_t, double) { return 0; }
void bn_grad_sums_avx512(const float*, const float*, int64_t, int64_t, int64_t, double, double*, double*) {}
void bn_grad_sums_avx512(const BFloat16*, const BFloat16*, int64_t, int64_t, int64_t, double, double*, double*) {}
void bn_affine_row_avx512(const float*, int64_t, float, float, float*) {}
void bn_affine_row_avx512(const BFloat16*, int64_t, float, float, BFloat16*) {}
void bn_grad_row_avx512(const float*, const float*, int64_t, float, float, float, float*) {}
void bn_grad_row_avx512(const BFloat16*, const BFloat16*, int64_t, float, float, float, BFloat16*) {}
#endif

}  // namespace mixtape::cpu
