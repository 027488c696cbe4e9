// ops/threads.cpp — one setting for both thread pools.
#include "ops/threads.h"

#include <omp.h>

#include "core/error.h"
#include "ops/cpu/blas.h"

namespace mixtape {

void set_num_threads(int n) {
  MT_CHECK(n >= 1, "set_num_threads: need at least 1 thread, got ", n);
  omp_set_num_threads(n);
  cpu::blas_set_num_threads(n);
}

int get_num_threads() { return omp_get_max_threads(); }

}  // namespace mixtape
