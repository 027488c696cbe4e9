// tests/common/on_thread_counts.h — runs a computation at several OpenMP thread counts, for the
// tests of "the same bits at every thread count". The caller's thread count is restored after.
#pragma once
#include <omp.h>

#include <initializer_list>
#include <vector>

#include "core/tensor.h"

namespace mixtape::testing {

template <typename F>
std::vector<Tensor> on_thread_counts(std::initializer_list<int> counts, F&& f) {
  struct Restore {
    int saved = omp_get_max_threads();
    ~Restore() { omp_set_num_threads(saved); }  // also when f throws
  } restore;
  std::vector<Tensor> out;
  for (int t : counts) {
    omp_set_num_threads(t);
    out.push_back(f());
  }
  return out;
}

}  // namespace mixtape::testing
