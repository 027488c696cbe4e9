// ops/cpu/tile_threads.h — how mixtape's GEMM kernels share one product between threads: each
// thread takes a disjoint range of C's columns (or rows) in whole tiles and runs the serial loops
// on it, so every element is summed exactly as on one thread (the bits do not depend on the
// thread count) and no barrier is needed.
// Invariant: an exception in any thread (a scratch allocation failing) is rethrown on the calling
// thread after the parallel region; one leaving the region would terminate the process.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <exception>

namespace mixtape::cpu {

// Calls fn(lo, hi) on `nt` threads for disjoint ranges covering [0, extent), each a whole number
// of `unit`s but the last.
template <typename F>
void for_tile_ranges(int nt, int64_t extent, int64_t unit, F&& fn) {
  const int64_t units = (extent + unit - 1) / unit;
  std::exception_ptr failure;
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    const int64_t lo = std::min(extent, units * t / T * unit), hi = std::min(extent, units * (t + 1) / T * unit);
    try {
      if (hi > lo) fn(lo, hi);
    } catch (...) {
#pragma omp critical(mixtape_tile_threads_failure)
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

// One GEMM C (m, n) = op(A) op(B) (+ beta C) shared between `nt` threads: each takes C's columns
// (or rows, when C is taller than wide) in whole tiles of nr columns (mr rows), and
// fn(m', n', a', b', c') runs the serial loops on its part, with a', b' and c' advanced to it;
// element (i, j) of C is c[i rs + j cs]. With nt == 1, fn runs the whole product.
template <typename E, typename F>
void for_gemm_ranges(int nt, bool ta, bool tb, int64_t m, int64_t n, const E* a, int64_t lda, const E* b,
                     int64_t ldb, float* c, int64_t rs, int64_t cs, int64_t mr, int64_t nr, F&& fn) {
  if (nt <= 1) return fn(m, n, a, b, c);
  const bool by_cols = n >= m;
  for_tile_ranges(nt, by_cols ? n : m, by_cols ? nr : mr, [&](int64_t lo, int64_t hi) {
    if (by_cols)
      fn(m, hi - lo, a, tb ? b + lo * ldb : b + lo, c + lo * cs);
    else
      fn(hi - lo, n, ta ? a + lo : a + lo * lda, b, c + lo * rs);
  });
}

}  // namespace mixtape::cpu
