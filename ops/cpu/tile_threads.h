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

}  // namespace mixtape::cpu
