// tests/ops/test_blas.cpp — the CPU GEMMs: the BLAS door (ops/cpu/blas.h: the library it loads,
// GEMM against a float64 reference in every transpose/beta/leading-dimension combination, GEMMs
// called from inside an OpenMP parallel region as conv2d does, a library that cannot be loaded)
// and mixtape's AVX-512 SGEMM (ops/cpu/sgemm_avx512.h) on every blocking edge.
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/cpu/blas.h"
#include "ops/conv.h"
#include "ops/cpu/sgemm_avx512.h"
#include "ops/creation.h"

namespace mixtape::testing {
namespace {

// Row-major op(A) (m, k) as stored: A is (m, k) with leading dimension lda, or (k, m) when ta.
template <typename T>
T at(const std::vector<T>& a, bool t, int64_t ld, int64_t r, int64_t c) {
  return t ? a[static_cast<size_t>(c * ld + r)] : a[static_cast<size_t>(r * ld + c)];
}

template <typename T>
std::vector<T> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(u(gen));
  return v;
}

// C = op(A) op(B) + beta C for one shape, checked element by element against a float64 sum.
// Bound: a length-k dot product in precision eps with any summation order errs by at most
// k eps sum_p |a_p b_p| (Higham, Accuracy and Stability, 3.1) plus beta C's one rounding; x2 margin.
template <typename T, typename Gemm>
void check_gemm_with(Gemm&& gemm, bool ta, bool tb, int64_t m, int64_t n, int64_t k, T beta, uint64_t seed) {
  const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 1;  // padded: ld > cols
  const auto a = random_values<T>(static_cast<size_t>((ta ? k : m) * lda), seed);
  const auto b = random_values<T>(static_cast<size_t>((tb ? n : k) * ldb), seed + 1);
  const auto c0 = random_values<T>(static_cast<size_t>(m * ldc), seed + 2);
  std::vector<T> c = c0;
  gemm(ta, tb, m, n, k, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
  const double eps = std::numeric_limits<T>::epsilon();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = static_cast<double>(beta) * static_cast<double>(c0[static_cast<size_t>(i * ldc + j)]), mag = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double prod = static_cast<double>(at(a, ta, lda, i, p)) * static_cast<double>(at(b, tb, ldb, p, j));
        ref += prod;
        mag += std::fabs(prod);
      }
      const double bound = 2 * (static_cast<double>(k) * eps * mag + eps * std::fabs(ref)) + 1e-300;
      ASSERT_NEAR(static_cast<double>(c[static_cast<size_t>(i * ldc + j)]), ref, bound)
          << "gemm ta=" << ta << " tb=" << tb << " m=" << m << " n=" << n << " k=" << k << " at (" << i << ", " << j
          << ")";
    }
  // Padding columns of C (j >= n) are never written.
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = n; j < ldc; ++j)
      ASSERT_EQ(c[static_cast<size_t>(i * ldc + j)], c0[static_cast<size_t>(i * ldc + j)]);
}

template <typename T>
void check_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T beta, uint64_t seed) {
  check_gemm_with<T>([](auto... args) { cpu::gemm(args...); }, ta, tb, m, n, k, beta, seed);
}

TEST(Blas, GemmMatchesAFloat64ReferenceForEveryTransposeAndBeta) {
  uint64_t seed = 1;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [m, n, k] : {std::array<int64_t, 3>{1, 1, 1}, {7, 5, 3}, {64, 33, 129}, {3, 200, 17}})
        for (double beta : {0.0, 1.0}) {
          check_gemm<float>(ta, tb, m, n, k, static_cast<float>(beta), seed++);
          check_gemm<double>(ta, tb, m, n, k, beta, seed++);
        }
}

// conv2d runs one GEMM per image on every thread of an OpenMP loop; each must run on its own
// thread (no nested team, no shared buffer between concurrent calls), so it equals the same GEMM
// run single-threaded, bit for bit. (A multi-threaded GEMM may block differently: other bits.)
TEST(Blas, GemmsOnEveryThreadOfAParallelRegionEqualTheSerialResult) {
  const int64_t m = 64, n = 196, k = 288;  // SmallCNN's second conv, one image
  const auto a = random_values<float>(static_cast<size_t>(m * k), 11);
  const auto b = random_values<float>(static_cast<size_t>(k * n), 12);
  std::vector<float> serial(static_cast<size_t>(m * n));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  cpu::blas_set_num_threads(1);
  cpu::gemm(false, false, m, n, k, a.data(), k, b.data(), n, 0.0f, serial.data(), n);
  omp_set_num_threads(saved);
  cpu::blas_set_num_threads(saved);
  const int nt = 4;  // more threads than this machine's cores: calls overlap
  std::vector<std::vector<float>> out(nt, std::vector<float>(static_cast<size_t>(m * n)));
  {
    cpu::BlasSingleThreaded one(true);
#pragma omp parallel for num_threads(nt) schedule(static, 1)
    for (int t = 0; t < nt; ++t)
      for (int rep = 0; rep < 8; ++rep)
        cpu::gemm(false, false, m, n, k, a.data(), k, b.data(), n, 0.0f, out[static_cast<size_t>(t)].data(), n);
  }
  for (int t = 0; t < nt; ++t)
    for (size_t i = 0; i < serial.size(); ++i)
      ASSERT_EQ(out[static_cast<size_t>(t)][i], serial[i]) << "thread " << t << ", element " << i;
}

// ---- mixtape's AVX-512 SGEMM ----
#define SKIP_WITHOUT_AVX512() \
  if (!cpu::sgemm_avx512_available()) GTEST_SKIP() << "this CPU has no AVX-512F: cpu::gemm uses BLAS here"

// Shapes on every edge of the blocking (8 x 32 tiles, depth slices of 256, 128-row A blocks,
// 512-column B blocks): exact multiples, one past, partial tiles, and thin ones.
TEST(SgemmAvx512, MatchesAFloat64ReferenceOnEveryBlockingEdge) {
  SKIP_WITHOUT_AVX512();
  const auto gemm = [](auto... args) { cpu::sgemm_avx512(args...); };
  uint64_t seed = 100;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [m, n, k] : {std::array<int64_t, 3>{8, 32, 256}, {9, 33, 257}, {1, 1, 1}, {7, 31, 5}, {130, 40, 300},
                             {16, 530, 20}, {64, 196, 288}, {3, 600, 520}})
        for (float beta : {0.0f, 1.0f, 0.5f}) check_gemm_with<float>(gemm, ta, tb, m, n, k, beta, seed++);
}

TEST(SgemmAvx512, BetaZeroNeverReadsCAndEmptyDepthScalesC) {
  SKIP_WITHOUT_AVX512();
  const int64_t m = 9, n = 40, k = 3;
  std::vector<float> a(static_cast<size_t>(m * k), 1.0f), b(static_cast<size_t>(k * n), 2.0f);
  std::vector<float> c(static_cast<size_t>(m * n), std::numeric_limits<float>::quiet_NaN());
  cpu::sgemm_avx512(false, false, m, n, k, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  for (float v : c) ASSERT_EQ(v, 6.0f);  // NaN * 0 would be NaN: C was not read
  cpu::sgemm_avx512(false, false, m, n, 0, a.data(), k, b.data(), n, 0.5f, c.data(), n);
  for (float v : c) ASSERT_EQ(v, 3.0f);
  std::fill(c.begin(), c.end(), std::numeric_limits<float>::quiet_NaN());
  cpu::sgemm_avx512(false, false, m, n, 0, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  for (float v : c) ASSERT_EQ(v, 0.0f);
}

// Threads split C into whole tiles and sum every element as one thread does: same bits at every
// thread count (a property OpenBLAS does not promise).
TEST(SgemmAvx512, ThreadCountDoesNotChangeTheBits) {
  SKIP_WITHOUT_AVX512();
  for (auto [m, n, k] : {std::array<int64_t, 3>{128, 3136, 128}, {300, 70, 600}}) {
    const auto a = random_values<float>(static_cast<size_t>(m * k), 21);
    const auto b = random_values<float>(static_cast<size_t>(k * n), 22);
    std::vector<std::vector<float>> out;
    const int saved = omp_get_max_threads();
    for (int t : {1, 2, 3}) {
      omp_set_num_threads(t);
      out.emplace_back(static_cast<size_t>(m * n));
      cpu::sgemm_avx512(false, false, m, n, k, a.data(), k, b.data(), n, 0.0f, out.back().data(), n);
    }
    omp_set_num_threads(saved);
    EXPECT_EQ(out[0], out[1]) << m << "x" << n << "x" << k;
    EXPECT_EQ(out[0], out[2]) << m << "x" << n << "x" << k;
  }
}

TEST(Blas, InfoNamesTheLoadedLibraryAndItsThreading) {
  const cpu::BlasInfo info = cpu::blas_info();
  EXPECT_FALSE(info.library.empty());
  const std::string line = cpu::blas_info_line();
  EXPECT_NE(line.find(info.library), std::string::npos) << line;
#ifdef MIXTAPE_TEST_OPENBLAS_OPENMP_LIBRARY
  // The build found OpenBLAS's OpenMP build: that is the one loaded (unless the user chose).
  if (std::getenv("MIXTAPE_BLAS_LIBRARY") == nullptr && MIXTAPE_TEST_OPENBLAS_OPENMP_LIBRARY[0] != '\0') {
    EXPECT_EQ(info.library, MIXTAPE_TEST_OPENBLAS_OPENMP_LIBRARY);
    EXPECT_EQ(info.threading, "openmp");
    EXPECT_NE(info.core, "?");
  }
#endif
}

// Runs in the death test's child: the first GEMM with MIXTAPE_BLAS_LIBRARY naming a missing
// file; exits 3 with the error's text on stderr when it throws mixtape's Error.
[[noreturn]] void first_gemm_with_a_missing_library() {
  setenv("MIXTAPE_BLAS_LIBRARY", "/nonexistent/libno-such-blas.so.0", 1);
  float a = 1, b = 1, c = 0;
  try {
    cpu::gemm(false, false, 1, 1, 1, &a, 1, &b, 1, 0.0f, &c, 1);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::exit(3);
  }
  std::exit(0);
}

// In a fresh process (the library is loaded once per process): the error names the library it
// could not load and says what to do.
TEST(Blas, AnUnloadableLibraryIsNamedInTheError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // re-executes the binary: nothing loaded yet
  EXPECT_EXIT(first_gemm_with_a_missing_library(), ::testing::ExitedWithCode(3),
              "cannot load a CBLAS library.*/nonexistent/libno-such-blas.so.0.*MIXTAPE_BLAS_LIBRARY");
}

// In the death test's child: a conv2d big enough to run its OpenMP loop over the batch, with
// MIXTAPE_GEMM set to nonsense. Exits 3 with the error's text when it throws mixtape's Error; an
// exception escaping the parallel region would abort instead.
[[noreturn]] void parallel_conv_with_a_bad_gemm_choice() {
  setenv("MIXTAPE_GEMM", "fastest", 1);
  omp_set_num_threads(2);
  try {
    conv2d(ones({8, 4, 16, 16}), ones({8, 4, 3, 3}), Tensor(), {1, 1}, {1, 1});
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::exit(3);
  }
  std::exit(0);
}

// The configuration is read on the calling thread before conv2d's parallel loop
// (cpu::BlasSingleThreaded), so a bad value is a clear error, not a terminated process.
TEST(Blas, ABadGemmChoiceIsAnErrorEvenFromAParallelConv) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(parallel_conv_with_a_bad_gemm_choice(), ::testing::ExitedWithCode(3),
              "MIXTAPE_GEMM: expected 'blas' or 'auto', got 'fastest'");
}

}  // namespace
}  // namespace mixtape::testing
