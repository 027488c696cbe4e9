// tests/ops/test_bgemm.cpp — the native BF16 GEMMs (ops/cpu/bgemm_avx512bf16.h on vdpbf16ps,
// ops/cpu/bgemm_amx.h on AMX tiles) and the switch that chooses one (ops/cpu/cpu_features.h,
// MIXTAPE_CPU_BF16). Every kernel test runs on both kernels: bit for bit against an executable
// model of the determinism rule, against a float64 reference within a derived bound, exact on
// small integers, on every blocking edge, identical at every thread count, and the numerics the
// SDM gives vdpbf16ps and tdpbf16ps (subnormal inputs as zero, subnormal results flushed, RNE
// whatever MXCSR says, odd depth first) next to what the emulated path (widen + FP32 GEMM) gives.
// A kernel's tests skip only on a CPU that cannot run it (AMX: Sapphire Rapids and later).
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cfenv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "core/bfloat16.h"
#include "core/error.h"
#include "ops/cpu/bgemm_amx.h"
#include "ops/cpu/bgemm_avx512bf16.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/isa.h"
#include "ops/cpu/sgemm_avx512.h"
#include "ops/cpu/steering.h"

namespace mixtape::testing {
namespace {

// A native kernel under test: how to call it, and whether this CPU can.
struct Kernel {
  const char* name;
  bool (*available)();
  std::string (*missing)();
  void (*run)(bool, bool, int64_t, int64_t, int64_t, const BFloat16*, int64_t, const BFloat16*, int64_t, float,
              float*, int64_t);
};
const Kernel kAvx512Bf16{"avx512bf16", cpu::bgemm_avx512bf16_available,
                         [] { return cpu::bf16_native_missing(cpu::cpu_features()); }, cpu::bgemm_avx512bf16};
const Kernel kAmx{"amx", cpu::bgemm_amx_available, [] { return cpu::bf16_amx_missing(cpu::cpu_features_with_amx()); },
                  cpu::bgemm_amx};

const Kernel* g_kernel = &kAvx512Bf16;  // the kernel of the running test (set by the fixture)
bool amx() { return g_kernel == &kAmx; }

class BgemmKernel : public ::testing::TestWithParam<const Kernel*> {
 protected:
  void SetUp() override { g_kernel = GetParam(); }
};

#define SKIP_WITHOUT_BF16()                                                                        \
  if (!g_kernel->available())                                                                      \
  GTEST_SKIP() << "this CPU cannot run the " << g_kernel->name << " BF16 GEMM: it lacks " << g_kernel->missing()

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
BFloat16 bf(float x) { return BFloat16(x); }  // rounds to nearest even; the tests use exact values

// A GEMM problem as stored: op(A) (m, k) is A (m, k) or, when ta, A (k, m); likewise B; C (m, n)
// with row stride ldc. Leading dimensions are wider than the rows (padding that must not be read
// as data nor written).
struct Problem {
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  float beta = 0;
  std::vector<BFloat16> a, b;
  std::vector<float> c0;  // C before the call
  float A(int64_t i, int64_t p) const { return float(ta ? a[size_t(p * lda + i)] : a[size_t(i * lda + p)]); }
  float B(int64_t p, int64_t j) const { return float(tb ? b[size_t(j * ldb + p)] : b[size_t(p * ldb + j)]); }
};

// Random BF16 operands from `draw`; C holds NaN when beta == 0 (it must not leak) and random
// values otherwise; the padding of every row holds NaN too.
template <typename Draw>
Problem make_problem(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float beta, uint64_t seed, Draw&& draw) {
  Problem p;
  p.ta = ta, p.tb = tb, p.m = m, p.n = n, p.k = k, p.beta = beta;
  p.lda = (ta ? m : k) + 3, p.ldb = (tb ? k : n) + 5, p.ldc = n + 2;
  std::mt19937_64 gen(seed);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  p.a.assign(size_t((ta ? k : m) * p.lda), bf(nan));
  p.b.assign(size_t((tb ? n : k) * p.ldb), bf(nan));
  for (int64_t r = 0; r < (ta ? k : m); ++r)
    for (int64_t q = 0; q < (ta ? m : k); ++q) p.a[size_t(r * p.lda + q)] = bf(draw(gen));
  for (int64_t r = 0; r < (tb ? n : k); ++r)
    for (int64_t q = 0; q < (tb ? k : n); ++q) p.b[size_t(r * p.ldb + q)] = bf(draw(gen));
  std::uniform_real_distribution<float> u(-1, 1);
  p.c0.assign(size_t(m * p.ldc), nan);
  if (beta != 0)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) p.c0[size_t(i * p.ldc + j)] = u(gen);
  return p;
}
float uniform_pm1(std::mt19937_64& g) { return std::uniform_real_distribution<float>(-1, 1)(g); }

std::vector<float> run_native(const Problem& p) {
  std::vector<float> c = p.c0;
  g_kernel->run(p.ta, p.tb, p.m, p.n, p.k, p.a.data(), p.lda, p.b.data(), p.ldb, p.beta, c.data(), p.ldc);
  return c;
}

// The emulated path: the operands widened exactly to FP32, then mixtape's FP32 GEMM
// (sgemm_avx512 directly: every CPU with AVX512_BF16 has AVX-512F, and its summation order is
// documented; cpu::gemm would send thin matrices to OpenBLAS).
std::vector<float> run_emulated(const Problem& p) {
  std::vector<float> a(p.a.size()), b(p.b.size()), c = p.c0;
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(p.a[i]);
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(p.b[i]);
  cpu::sgemm_avx512(p.ta, p.tb, p.m, p.n, p.k, a.data(), p.lda, b.data(), p.ldb, p.beta, c.data(), p.ldc);
  return c;
}

// One vdpbf16ps step as the SDM describes it: inputs that are subnormal count as zero (the
// accumulator too), t + a b with one rounding to nearest even (the product is exact), a subnormal
// result becomes a zero of its sign. The test runs in the default rounding mode, so fmaf is RNE.
float flush(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }
float dp_step(float t, float a, float b) { return flush(std::fmaf(flush(a), flush(b), flush(t))); }
float add_step(float x, float y) { return flush(flush(x) + flush(y)); }

// The headers' determinism rules, executed: the bits the kernel under test must produce. Depths
// past k are +0 x +0 products.
//   avx512bf16: per slice from +0, pairs in order, the odd depth first, one dp_step each;
//   amx: per slice from +0, per step of 32 depths (zero-padded): the even depths chained from +0,
//        the odd depths chained from +0, then t + (even + odd).
float model_element(const Problem& p, int64_t i, int64_t j) {
  float c = p.c0[size_t(i * p.ldc + j)];
  const auto A = [&](int64_t q) { return q < p.k ? p.A(i, q) : 0.0f; };
  const auto B = [&](int64_t q) { return q < p.k ? p.B(q, j) : 0.0f; };
  for (int64_t s = 0; s < p.k; s += cpu::kBgemmKc) {
    float t = 0.0f;
    const int64_t end = std::min(p.k, s + cpu::kBgemmKc);
    if (amx()) {
      for (int64_t q0 = s; q0 < end; q0 += 32) {
        float even = 0.0f, odd = 0.0f;
        for (int64_t q = q0; q < q0 + 32; q += 2) {
          even = dp_step(even, A(q), B(q));
          odd = dp_step(odd, A(q + 1), B(q + 1));
        }
        t = add_step(t, add_step(even, odd));
      }
    } else {
      for (int64_t q = s; q < end; q += 2) {
        t = dp_step(t, A(q + 1), B(q + 1));  // odd depth first
        t = dp_step(t, A(q), B(q));
      }
    }
    c = s == 0 && p.beta == 0 ? t : std::fmaf(s == 0 ? p.beta : 1.0f, c, t);
  }
  return c;
}

std::string describe(const Problem& p) {
  return "ta=" + std::to_string(p.ta) + " tb=" + std::to_string(p.tb) + " m=" + std::to_string(p.m) +
         " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) + " beta=" + std::to_string(p.beta);
}

// C's padding columns (j >= n) are never written.
void expect_padding_untouched(const Problem& p, const std::vector<float>& c) {
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = p.n; j < p.ldc; ++j)
      ASSERT_EQ(bits(c[size_t(i * p.ldc + j)]), bits(p.c0[size_t(i * p.ldc + j)])) << describe(p) << " padding";
}

void expect_matches_model(const Problem& p) {
  const std::vector<float> c = run_native(p);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      const float got = c[size_t(i * p.ldc + j)], want = model_element(p, i, j);
      ASSERT_EQ(bits(got), bits(want)) << describe(p) << " at (" << i << ", " << j << "): " << got << " vs " << want;
    }
  expect_padding_untouched(p, c);
}

// ---- the kernel ----

// Shapes on every edge of the blocking (8 x 32 tiles, depth slices of kBgemmKc = 512 elements,
// 128-row A blocks, 512-column B blocks, 16-pair transposes in the packers): exact multiples,
// one past, partial tiles, odd K, K = 1 and 2, K over two and three slices, thin and single
// rows/columns, C thin enough to be computed transposed; every transpose; beta 0 (C is NaN,
// padding NaN), 1 and 0.5. Bit for bit against the executable determinism rule, so the packing,
// the pair order and the slice merging are all checked, not just closeness.
TEST_P(BgemmKernel, EqualsTheDeterminismRuleOnEveryBlockingEdge) {
  SKIP_WITHOUT_BF16();
  uint64_t seed = 1;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [m, n, k] : {std::array<int64_t, 3>{8, 32, 512}, {9, 33, 513}, {1, 1, 1}, {7, 31, 2}, {16, 64, 3},
                             {130, 40, 33}, {17, 530, 31}, {3, 65, 1025}, {24, 17, 64}, {40, 96, 1100}, {1, 200, 35},
                             // thin C, computed as C^T: conv1's weight gradient, n = 16, a classifier's 10
                             {32, 9, 784}, {64, 16, 50}, {130, 10, 129}, {45, 3, 7}})
        for (float beta : {0.0f, 1.0f, 0.5f})
          expect_matches_model(make_problem(ta, tb, m, n, k, beta, seed++, uniform_pm1));
}

// Against the exact (float64) sum of the same BF16 values. Bound, derived: every product
// a b of two BF16 (8 significant bits each) is exact in FP32, so the only errors are the
// roundings of the sums. Each product enters the FP32 accumulation once and then passes through
// at most k - 1 further additions within its slice (pairs included: a vdpbf16ps step is one
// rounded FMA per product), one per later slice merge (at most k / 512), and the final
// fma(beta, c, t); each rounding to nearest multiplies by (1 + d), |d| <= u = 2^-24. So
// (Higham, Accuracy and Stability, 3.1) |c - exact| <= gamma_{k+2} (sum_p |a_p b_p| + |beta c0|)
// with gamma_n = n u / (1 - n u) < 2 n u = n eps for n u < 1/2, eps = 2^-23. With values in
// [-1, 1] no sum gets near 2^-126, so flushing never contributes. Tolerance: (k + 2) eps (sum |a
// b| + |beta c0|).
TEST_P(BgemmKernel, IsWithinTheFp32SummationBoundOfAFloat64Reference) {
  SKIP_WITHOUT_BF16();
  const double eps = std::numeric_limits<float>::epsilon();
  uint64_t seed = 500;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [m, n, k] : {std::array<int64_t, 3>{33, 70, 700}, {64, 64, 2048}, {5, 3, 9}})
        for (float beta : {0.0f, 1.0f}) {
          const Problem p = make_problem(ta, tb, m, n, k, beta, seed++, uniform_pm1);
          const std::vector<float> c = run_native(p);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              const double c0 = beta == 0 ? 0.0 : double(p.c0[size_t(i * p.ldc + j)]);
              double exact = double(beta) * c0, mag = std::fabs(double(beta) * c0);
              for (int64_t q = 0; q < k; ++q) {
                const double prod = double(p.A(i, q)) * double(p.B(q, j));
                exact += prod, mag += std::fabs(prod);
              }
              const double bound = double(k + 2) * eps * mag;
              ASSERT_NEAR(double(c[size_t(i * p.ldc + j)]), exact, bound)
                  << describe(p) << " at (" << i << ", " << j << ")";
            }
        }
}

// Small integers: products (|a b| <= 64) and every partial sum (|sum| <= 64 k + |c0| < 2^24) are
// integers below 2^24, so no rounding happens at all: native, emulated and the exact integer sum
// agree exactly, whatever the order.
TEST_P(BgemmKernel, IsExactOnSmallIntegersAndEqualsTheEmulatedPathThere) {
  SKIP_WITHOUT_BF16();
  const auto small_int = [](std::mt19937_64& g) { return float(int(g() % 17) - 8); };
  uint64_t seed = 900;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [m, n, k] : {std::array<int64_t, 3>{19, 45, 1100}, {8, 32, 1}, {64, 40, 513}})
        for (float beta : {0.0f, 1.0f}) {
          Problem p = make_problem(ta, tb, m, n, k, beta, seed++, small_int);
          if (beta != 0)
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = 0; j < n; ++j) p.c0[size_t(i * p.ldc + j)] = float(int64_t(i * 7 + j) % 100 - 50);
          const std::vector<float> native = run_native(p), emulated = run_emulated(p);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              int64_t exact = beta == 0 ? 0 : int64_t(p.c0[size_t(i * p.ldc + j)]);
              for (int64_t q = 0; q < k; ++q) exact += int64_t(p.A(i, q)) * int64_t(p.B(q, j));
              const size_t at = size_t(i * p.ldc + j);
              ASSERT_EQ(native[at], float(exact)) << describe(p) << " at (" << i << ", " << j << ")";
              ASSERT_EQ(bits(native[at]), bits(emulated[at])) << describe(p) << " at (" << i << ", " << j << ")";
            }
        }
}

// beta == 0 never reads C: C full of NaN (and infinities) gives the product alone.
TEST_P(BgemmKernel, BetaZeroNeverReadsC) {
  SKIP_WITHOUT_BF16();
  for (auto [m, n, k] : {std::array<int64_t, 3>{8, 32, 16}, {13, 45, 600}}) {
    Problem p = make_problem(false, false, m, n, k, 0.0f, 77, uniform_pm1);
    for (size_t i = 0; i < p.c0.size(); ++i)
      p.c0[i] = i % 2 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
    const std::vector<float> c = run_native(p);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) ASSERT_TRUE(std::isfinite(c[size_t(i * p.ldc + j)])) << i << ", " << j;
  }
}

// k == 0: C = beta C (beta == 0 writes zeros without reading); empty m or n touch nothing.
TEST_P(BgemmKernel, DegenerateShapes) {
  SKIP_WITHOUT_BF16();
  std::vector<float> c = {std::numeric_limits<float>::quiet_NaN(), 2.0f};
  g_kernel->run(false, false, 1, 2, 0, nullptr, 1, nullptr, 2, 0.0f, c.data(), 2);
  EXPECT_EQ(c[0], 0.0f);
  EXPECT_EQ(c[1], 0.0f);
  c = {3.0f, 2.0f};
  g_kernel->run(false, false, 1, 2, 0, nullptr, 1, nullptr, 2, 0.5f, c.data(), 2);
  EXPECT_EQ(c[0], 1.5f);
  EXPECT_EQ(c[1], 1.0f);
  g_kernel->run(false, false, 0, 2, 5, nullptr, 5, nullptr, 2, 0.0f, c.data(), 2);
  g_kernel->run(false, false, 1, 0, 5, nullptr, 5, nullptr, 2, 0.0f, c.data(), 2);
  EXPECT_EQ(c[0], 1.5f);
}

// The same bits on 1, 2 and 3 OpenMP threads, for a C wider than tall (threads split columns),
// taller than wide (rows) and thin (computed as C^T), big enough to run threaded (>= 2^21
// multiply-adds).
TEST_P(BgemmKernel, GivesTheSameBitsAtEveryThreadCount) {
  SKIP_WITHOUT_BF16();
  const int saved = omp_get_max_threads();
  for (auto [m, n, k] : {std::array<int64_t, 3>{70, 333, 700}, {333, 70, 700}, {2000, 10, 200}})
    for (bool ta : {false, true}) {
      const Problem p = make_problem(ta, !ta, m, n, k, 1.0f, 4242, uniform_pm1);
      omp_set_num_threads(1);
      const std::vector<float> one = run_native(p);
      for (int t : {2, 3}) {
        omp_set_num_threads(t);
        const std::vector<float> many = run_native(p);
        for (size_t i = 0; i < one.size(); ++i)
          ASSERT_EQ(bits(many[i]), bits(one[i])) << describe(p) << ", " << t << " threads, element " << i;
      }
    }
  omp_set_num_threads(saved);
}

// ---- the numerics of vdpbf16ps, pinned; and what the emulated path gives instead ----

// One dot product: C (1, 1) = a (1, k) . b (k, 1), beta 0, on both paths.
struct Dot {
  float native, emulated;
};
Dot dot(const std::vector<float>& a, const std::vector<float>& b) {
  Problem p;
  p.m = p.n = 1, p.k = int64_t(a.size()), p.lda = p.k, p.ldb = 1, p.ldc = 1;
  for (const auto* v : {&a, &b})
    for (float x : *v) EXPECT_EQ(bits(float(bf(x))), bits(x)) << x << " is not a BF16 value";
  for (float x : a) p.a.push_back(bf(x));
  for (float x : b) p.b.push_back(bf(x));
  p.c0 = {std::numeric_limits<float>::quiet_NaN()};
  return {run_native(p)[0], run_emulated(p)[0]};
}

// A subnormal BF16 input (|x| < 2^-126) counts as zero natively, even where the product would be
// a normal FP32 number; the emulated path widens it exactly and keeps it.
TEST_P(BgemmKernel, SubnormalInputsCountAsZeroNatively) {
  SKIP_WITHOUT_BF16();
  const float denorm_min = float(BFloat16::denorm_min());  // 2^-133
  const float big = std::ldexp(1.0f, 100);
  for (float sub : {denorm_min, -denorm_min, float(BFloat16::from_bits(0x007F)) /* largest, 127 x 2^-133 */}) {
    const Dot d = dot({sub}, {big});
    EXPECT_EQ(d.native, 0.0f) << sub;
    EXPECT_EQ(d.emulated, sub * big) << sub;  // 2^-33 (x127): a normal FP32 result
    const Dot d2 = dot({big}, {sub});          // either operand
    EXPECT_EQ(d2.native, 0.0f) << sub;
  }
  // The smallest normal BF16 (2^-126) is not subnormal: it counts.
  EXPECT_EQ(dot({float(BFloat16::min_normal())}, {big}).native, std::ldexp(1.0f, -26));
}

// A result below 2^-126 becomes zero natively (no gradual underflow), whether a single product
// is that small or a sum of normal numbers cancels down to it; the emulated path keeps the
// subnormal value.
TEST_P(BgemmKernel, SubnormalResultsFlushToZeroNatively) {
  SKIP_WITHOUT_BF16();
  const float p70 = std::ldexp(1.0f, -70);  // normal BF16; p70 * p70 = 2^-140, a subnormal FP32
  Dot d = dot({p70}, {p70});
  EXPECT_EQ(bits(d.native), bits(0.0f));
  EXPECT_EQ(d.emulated, std::ldexp(1.0f, -140));
  d = dot({-p70}, {p70});  // flushed to a zero of the result's sign...
  // ...which AMX then adds to the odd depths' chain (+0, the padding): -0 + +0 = +0.
  EXPECT_EQ(bits(d.native), bits(amx() ? 0.0f : -0.0f));
  EXPECT_EQ(d.emulated, -std::ldexp(1.0f, -140));
  // Products p0 = -(1 - 2^-8) 2^-126 (itself subnormal: flushed as the result of the step it is
  // added in) and p1 = 2^-126 (normal). vdpbf16ps, odd depth first: t = 2^-126, then t + p0 =
  // 2^-134 -> 0. AMX: even chain 0 + p0 -> -0, odd chain 2^-126, sum 2^-126 (the flush happened
  // before the cancellation could).
  const float p63 = std::ldexp(1.0f, -63), almost_one = 1.0f - std::ldexp(1.0f, -8);
  d = dot({-almost_one, p63}, {float(BFloat16::min_normal()), p63});
  EXPECT_EQ(d.native, amx() ? std::ldexp(1.0f, -126) : 0.0f);
  EXPECT_EQ(d.emulated, std::ldexp(1.0f, -134));
  // Sums that stay normal are untouched: 2^-126 exactly.
  EXPECT_EQ(dot({p63}, {p63}).native, std::ldexp(1.0f, -126));
}

// Infinities and NaNs propagate as in IEEE arithmetic on both paths (GradScaler's overflow check
// depends on it): inf x finite = inf, inf x 0 = NaN, NaN anywhere = NaN, inf - inf = NaN; also at
// an odd k, whose zero padding must not turn into inf x 0.
TEST_P(BgemmKernel, InfinitiesAndNansPropagate) {
  SKIP_WITHOUT_BF16();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const auto& [a, b, want] : std::vector<std::tuple<std::vector<float>, std::vector<float>, float>>{
           {{inf, 1.0f, 2.0f}, {2.0f, 3.0f, 4.0f}, inf},
           {{1.0f, 2.0f, -inf}, {3.0f, 4.0f, 0.5f}, -inf},  // inf at the odd k's unpadded end
           {{inf, 1.0f}, {0.0f, 1.0f}, nan},
           {{1.0f, nan, 1.0f}, {1.0f, 1.0f, 1.0f}, nan},
           {{inf, inf}, {1.0f, -1.0f}, nan}}) {
    const Dot d = dot(a, b);
    for (float got : {d.native, d.emulated}) {
      if (std::isnan(want))
        EXPECT_TRUE(std::isnan(got)) << got;
      else
        EXPECT_EQ(got, want);
    }
  }
}

// The order of the sum, pinned. vdpbf16ps accumulates the odd depth of a pair first (the SDM's
// operation order): a (1, 4) . b (4, 1) runs p = 1, 0, 3, 2. AMX's tdpbf16ps (measured: the SDM
// does not say) keeps two chains per instruction, even depths 0, 2, ... and odd depths 1, 3, ...,
// each from +0, and adds their sum to the accumulator. The emulated FP32 GEMM runs p = 0, 1, 2, 3.
//   products 1, 0, -u, u (u = 2^-24): vdpbf16ps (0 + 0 + 1) + u ties back to 1, then 1 - u;
//     AMX even 1 - u, odd u, sum 1; emulated 1 - u then + u = 1 (the exact sum).
//   products 1, u, u, u: vdpbf16ps u + 1 -> 1, + u -> 1, + u -> 1; AMX even 1 + u -> 1, odd 2u,
//     sum 1 + 2u (the exact sum); emulated 1 + u -> 1, then 1, 1.
TEST_P(BgemmKernel, TheOrderOfTheSumIsTheDocumentedOne) {
  SKIP_WITHOUT_BF16();
  const float u = std::ldexp(1.0f, -24);
  Dot d = dot({1.0f, 0.0f, -u, u}, {1.0f, 1.0f, 1.0f, 1.0f});
  EXPECT_EQ(bits(d.native), bits(amx() ? 1.0f : 1.0f - u));
  EXPECT_EQ(d.emulated, 1.0f);
  d = dot({1.0f, u, u, u}, {1.0f, 1.0f, 1.0f, 1.0f});
  EXPECT_EQ(bits(d.native), bits(amx() ? 1.0f + 2 * u : 1.0f));
  EXPECT_EQ(d.emulated, 1.0f);
  // AMX across instructions: each step of 32 depths is summed apart and then added, so a 1 in the
  // first step and 32 products u in the second give 1 + 32 u exactly (16 u per chain, exact),
  // where one sequential chain would lose every u to rounding.
  std::vector<float> a(64, u), b(64, 1.0f);
  a[0] = 1.0f;
  for (int q = 1; q < 32; ++q) a[size_t(q)] = 0.0f;
  d = dot(a, b);
  EXPECT_EQ(bits(d.native), bits(amx() ? 1.0f + 32 * u : 1.0f));
  EXPECT_EQ(d.emulated, 1.0f);
}

// Each accumulation rounds to nearest, ties to even, whatever MXCSR's rounding mode (the SDM:
// MXCSR is not consulted). 1 + 2^-24 is a tie (-> 1 under RNE, 1 + 2^-23 upward) and
// 1 + 1.0078125 x 2^-24 is above it (-> 1 + 2^-23 under RNE, 1 toward zero). beta == 0 and one
// slice, so no FP32 FMA (which does obey MXCSR) touches the result.
TEST_P(BgemmKernel, AccumulationIsRoundToNearestEvenWhateverMxcsr) {
  SKIP_WITHOUT_BF16();
  const float u = std::ldexp(1.0f, -24), above = u * (1.0f + std::ldexp(1.0f, -7));
  const int saved = std::fegetround();
  for (int mode : {FE_TONEAREST, FE_UPWARD, FE_TOWARDZERO, FE_DOWNWARD}) {
    ASSERT_EQ(std::fesetround(mode), 0);
    const float tie = dot({1.0f, u}, {1.0f, 1.0f}).native;
    const float over = dot({1.0f, above}, {1.0f, 1.0f}).native;
    std::fesetround(saved);
    EXPECT_EQ(tie, 1.0f) << "rounding mode " << mode;
    EXPECT_EQ(over, 1.0f + 2 * u) << "rounding mode " << mode;
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, BgemmKernel, ::testing::Values(&kAvx512Bf16, &kAmx),
                         [](const ::testing::TestParamInfo<const Kernel*>& i) { return std::string(i.param->name); });

// ---- the switch: MIXTAPE_CPU_BF16 and the in-process override ----

cpu::CpuFeatures avx512_features() { return {true, true, true, true, true, false, false, false, false}; }
cpu::CpuFeatures all_features() { return {true, true, true, true, true, true, true, true, true}; }

TEST(CpuBf16Switch, ParsesTheVariable) {
  cpu::CpuFeatures none;
  cpu::CpuFeatures no_bf16 = avx512_features();
  no_bf16.avx512_bf16 = false;
  using K = cpu::Bf16Kernel;
  for (const char* v : {static_cast<const char*>(nullptr), "", "auto"}) {
    EXPECT_EQ(cpu::parse_cpu_bf16(v, all_features()), K::Amx);
    EXPECT_EQ(cpu::parse_cpu_bf16(v, avx512_features()), K::Avx512Bf16);
    EXPECT_EQ(cpu::parse_cpu_bf16(v, no_bf16), K::Emulated);
    EXPECT_EQ(cpu::parse_cpu_bf16(v, none), K::Emulated);
  }
  EXPECT_EQ(cpu::parse_cpu_bf16("emulated", all_features()), K::Emulated);
  EXPECT_EQ(cpu::parse_cpu_bf16("emulated", none), K::Emulated);
  EXPECT_EQ(cpu::parse_cpu_bf16("native", all_features()), K::Amx);
  EXPECT_EQ(cpu::parse_cpu_bf16("native", avx512_features()), K::Avx512Bf16);
  EXPECT_EQ(cpu::parse_cpu_bf16("avx512bf16", all_features()), K::Avx512Bf16);
  EXPECT_EQ(cpu::parse_cpu_bf16("amx", all_features()), K::Amx);
  // AMX without the kernel's permission (or XCR0's tile bits) is not AMX: auto falls back.
  cpu::CpuFeatures refused = all_features();
  refused.amx_permitted = false;
  EXPECT_EQ(cpu::parse_cpu_bf16("auto", refused), K::Avx512Bf16);
  EXPECT_EQ(cpu::parse_cpu_bf16("native", refused), K::Avx512Bf16);
}

std::string error_of(const char* value, const cpu::CpuFeatures& f) {
  try {
    cpu::parse_cpu_bf16(value, f);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CpuBf16Switch, NativeWithoutTheInstructionIsAnErrorNamingTheVariableAndTheFeature) {
  cpu::CpuFeatures f = avx512_features();
  f.avx512_bf16 = false;
  EXPECT_EQ(error_of("native", f),
            "MIXTAPE_CPU_BF16=native: this CPU cannot run a native BF16 GEMM, it lacks AVX512_BF16 (the vdpbf16ps "
            "instruction); unset MIXTAPE_CPU_BF16 or set it to 'emulated'");
  EXPECT_EQ(error_of("avx512bf16", f),
            "MIXTAPE_CPU_BF16=avx512bf16: this CPU cannot run the AVX512_BF16 GEMM, it lacks AVX512_BF16 (the "
            "vdpbf16ps instruction); unset MIXTAPE_CPU_BF16 or set it to 'emulated'");
  EXPECT_EQ(error_of("amx", avx512_features()),
            "MIXTAPE_CPU_BF16=amx: this CPU cannot run the AMX BF16 GEMM, it lacks AMX-TILE (the tile registers), "
            "AMX-BF16 (the tdpbf16ps instruction), OS support for AMX tile state (XCR0 XTILECFG/XTILEDATA bits); "
            "unset MIXTAPE_CPU_BF16 or set it to 'avx512bf16' or 'emulated'");
  cpu::CpuFeatures refused = all_features();
  refused.amx_permitted = false;
  const std::string r = error_of("amx", refused);
  EXPECT_NE(r.find("arch_prctl ARCH_REQ_XCOMP_PERM was refused"), std::string::npos) << r;
  f = all_features();
  f.os_zmm_state = false;  // the CPU has it, the OS does not save ZMM registers
  const std::string e = error_of("native", f);
  EXPECT_NE(e.find("MIXTAPE_CPU_BF16=native"), std::string::npos) << e;
  EXPECT_NE(e.find("XCR0"), std::string::npos) << e;
  const std::string all = error_of("native", {});  // lacks everything: all of it is listed
  EXPECT_NE(all.find("AVX512F, AVX512BW, AVX512VL, AVX512_BF16 (the vdpbf16ps instruction), OS support"),
            std::string::npos)
      << all;
}

TEST(CpuBf16Switch, AnUnknownValueIsAnError) {
  EXPECT_EQ(error_of("fast", all_features()),
            "MIXTAPE_CPU_BF16: expected 'auto', 'native', 'amx', 'avx512bf16' or 'emulated', got 'fast'");
  EXPECT_EQ(error_of("Native", all_features()),
            "MIXTAPE_CPU_BF16: expected 'auto', 'native', 'amx', 'avx512bf16' or 'emulated', got 'Native'");
}

// The probe agrees with the compiler's own CPU check (which also reads XCR0); cpu_features(), the
// probe capped at MIXTAPE_CPU_ISA (ops/cpu/isa.h), agrees with the kernels' own answers.
TEST(CpuBf16Switch, TheProbeAgreesWithTheCompilersCheck) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  const cpu::CpuFeatures& probed = cpu::probed_cpu_features();
  EXPECT_EQ(probed.avx512f && probed.os_zmm_state, bool(__builtin_cpu_supports("avx512f")));
  EXPECT_EQ(probed.avx512_bf16 && probed.os_zmm_state, bool(__builtin_cpu_supports("avx512bf16")));
#if !defined(__clang__)  // clang 14 does not know these feature names
  // GCC's check reads XCR0's tile bits for AMX too (not Linux's permission, which is ours to ask).
  EXPECT_EQ(probed.amx_tile && probed.os_amx_state, bool(__builtin_cpu_supports("amx-tile")));
  EXPECT_EQ(probed.amx_bf16 && probed.os_amx_state, bool(__builtin_cpu_supports("amx-bf16")));
#endif
  const cpu::CpuFeatures& f = cpu::cpu_features();
  if (cpu::isa_cap() == cpu::IsaLevel::Amx) {  // no cap: the probe itself
    EXPECT_EQ(f.avx512f, probed.avx512f);
    EXPECT_EQ(f.avx512_bf16, probed.avx512_bf16);
    EXPECT_EQ(f.amx_tile, probed.amx_tile);
  }
  EXPECT_EQ(cpu::bgemm_avx512bf16_available(), cpu::can_run_bf16_native(f));
  EXPECT_FALSE(f.amx_permitted);  // cpu_features() asks the OS nothing
  EXPECT_EQ(cpu::bgemm_amx_available(), cpu::can_run_bf16_amx(cpu::cpu_features_with_amx()));
#else
  GTEST_SKIP() << "not x86-64";
#endif
}

TEST(CpuBf16Switch, TheOverrideForcesEachPathAndNests) {
  {
    cpu::Override emulated(cpu::Bf16GemmPath::Emulated);
    EXPECT_FALSE(cpu::bf16_native_gemm());
    EXPECT_NE(cpu::bf16_gemm_description().find("emulated"), std::string::npos);
    if (cpu::bgemm_avx512bf16_available()) {
      cpu::Override native(cpu::Bf16GemmPath::Native);
      EXPECT_TRUE(cpu::bf16_native_gemm());
      EXPECT_EQ(cpu::bf16_gemm_kernel(),
                cpu::bgemm_amx_available() ? cpu::Bf16Kernel::Amx : cpu::Bf16Kernel::Avx512Bf16);
      {
        cpu::Override avx(cpu::Bf16GemmPath::Avx512Bf16);
        EXPECT_EQ(cpu::bf16_gemm_kernel(), cpu::Bf16Kernel::Avx512Bf16);
        EXPECT_NE(cpu::bf16_gemm_description().find("vdpbf16ps"), std::string::npos);
      }
      if (cpu::bgemm_amx_available()) {
        cpu::Override amx(cpu::Bf16GemmPath::Amx);
        EXPECT_EQ(cpu::bf16_gemm_kernel(), cpu::Bf16Kernel::Amx);
        EXPECT_NE(cpu::bf16_gemm_description().find("AMX"), std::string::npos);
      } else {
        EXPECT_THROW({ cpu::Override amx(cpu::Bf16GemmPath::Amx); }, Error);
      }
    } else {
      EXPECT_THROW({ cpu::Override native(cpu::Bf16GemmPath::Native); }, Error);
    }
    EXPECT_FALSE(cpu::bf16_native_gemm());  // the inner override restored the outer one
  }
}

// In the death test's child (a fresh process: the variable is read once per process): sets
// MIXTAPE_CPU_BF16 and asks which kernel runs; exits 10 + Bf16Kernel (10 emulated, 11
// avx512bf16, 12 amx), or 3 with the error on stderr.
[[noreturn]] void ask_with(const char* value) {
  setenv("MIXTAPE_CPU_BF16", value, 1);
  try {
    std::exit(10 + int(cpu::bf16_gemm_kernel()));
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::exit(3);
  }
}

#if defined(__linux__) && defined(__x86_64__) && defined(SYS_arch_prctl)
// In a fresh child: sets MIXTAPE_CPU_BF16, runs `query` (0: bf16_native_gemm(), 1: also
// bf16_gemm_kernel()), then asks Linux whether this process holds the AMX tile-data grant
// (ARCH_GET_XCOMP_PERM): exits 20 without it, 21 with it, 22 when the query is unsupported.
[[noreturn]] void grant_after(const char* value, int query) {
  setenv("MIXTAPE_CPU_BF16", value, 1);
  (void)cpu::bf16_native_gemm();
  if (query >= 1) (void)cpu::bf16_gemm_kernel();
  unsigned long features = 0;
  if (syscall(SYS_arch_prctl, 0x1022 /* ARCH_GET_XCOMP_PERM */, &features) != 0) std::exit(22);
  std::exit(features & (1ul << 18) ? 21 : 20);
}

// Linux's AMX grant constrains the whole process (sigaltstack sizes), so it is asked only where
// AMX may run: never for emulated or avx512bf16, not for bf16_native_gemm() (which FP32 code
// asks) under auto, and at the first kernel resolution under auto where the CPU has AMX.
TEST(CpuBf16Switch, LinuxIsAskedForAmxOnlyWhereAmxMayRun) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  unsigned long features = 0;
  if (syscall(SYS_arch_prctl, 0x1022, &features) != 0) GTEST_SKIP() << "no ARCH_GET_XCOMP_PERM here";
  const cpu::CpuFeatures& f = cpu::cpu_features();
  EXPECT_EXIT(grant_after("emulated", 1), ::testing::ExitedWithCode(20), "");
  if (cpu::bgemm_avx512bf16_available()) {
    EXPECT_EXIT(grant_after("avx512bf16", 1), ::testing::ExitedWithCode(20), "");
  }
  EXPECT_EXIT(grant_after("auto", 0), ::testing::ExitedWithCode(20), "");
  if (f.amx_tile && f.amx_bf16 && f.os_amx_state && cpu::bgemm_amx_available()) {
    EXPECT_EXIT(grant_after("auto", 1), ::testing::ExitedWithCode(21), "");
  }
}
#endif

TEST(CpuBf16Switch, TheVariableIsReadOnceFromTheEnvironment) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // re-executes the binary: nothing read yet
  EXPECT_EXIT(ask_with("emulated"), ::testing::ExitedWithCode(10), "");
  EXPECT_EXIT(ask_with("bogus"), ::testing::ExitedWithCode(3),
              "MIXTAPE_CPU_BF16: expected 'auto', 'native', 'amx', 'avx512bf16' or 'emulated', got 'bogus'");
  if (cpu::bgemm_avx512bf16_available()) {
    const int best = cpu::bgemm_amx_available() ? 12 : 11;
    EXPECT_EXIT(ask_with("native"), ::testing::ExitedWithCode(best), "");
    EXPECT_EXIT(ask_with("auto"), ::testing::ExitedWithCode(best), "");
    EXPECT_EXIT(ask_with("avx512bf16"), ::testing::ExitedWithCode(11), "");
    if (cpu::bgemm_amx_available())
      EXPECT_EXIT(ask_with("amx"), ::testing::ExitedWithCode(12), "");
    else
      EXPECT_EXIT(ask_with("amx"), ::testing::ExitedWithCode(3), "MIXTAPE_CPU_BF16=amx: .* it lacks");
  } else {
    EXPECT_EXIT(ask_with("native"), ::testing::ExitedWithCode(3), "MIXTAPE_CPU_BF16=native: .* it lacks");
    EXPECT_EXIT(ask_with("auto"), ::testing::ExitedWithCode(10), "");
  }
}

}  // namespace
}  // namespace mixtape::testing
