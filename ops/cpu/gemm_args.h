// ops/cpu/gemm_args.h — the argument contract every BF16 GEMM entry point shares (the AVX512_BF16
// and AMX kernels, the emulated path in ops/cpu/blas.cpp): cblas's leading-dimension rule, and
// the products with nothing to multiply.
// Invariant: after gemm_args_trivial() returns false, m, n, k > 0 and the leading dimensions cover
// their rows; when it returns true, C already holds the answer (beta == 0 never read C).
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/error.h"

namespace mixtape::cpu {

inline bool gemm_args_trivial(const char* op, bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda,
                              int64_t ldb, float beta, float* c, int64_t ldc) {
  // cblas's rule: each leading dimension at least its stored row's length (else rows overlap).
  MT_CHECK(ldc >= std::max<int64_t>(n, 1) && lda >= std::max<int64_t>(ta ? m : k, 1) &&
               ldb >= std::max<int64_t>(tb ? k : n, 1),
           op, ": leading dimensions too small for m=", m, " n=", n, " k=", k, " (ta=", ta, ", tb=", tb, "): lda ",
           lda, ", ldb ", ldb, ", ldc ", ldc);
  if (m <= 0 || n <= 0) return true;
  if (k <= 0) {  // C = beta C; the operands may have no storage
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return true;
  }
  return false;
}

}  // namespace mixtape::cpu
