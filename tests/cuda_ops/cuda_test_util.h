// tests/cuda_ops/cuda_test_util.h — what every CPU<->CUDA parity test shares: the skip when no GPU
// is usable (with cuda::unavailable_reason()), fresh random inputs (a new seed each run, printed,
// never zeros), and the comparison of a CUDA result with the CPU op's result under a stated
// tolerance. The CPU kernel is the reference, never the CUDA kernel itself.
//
// Tolerances (the derivations the tests cite):
//   u(dt)   unit roundoff: 2^-11 f16, 2^-8 bf16, 2^-24 f32, 2^-53 f64 (half an ulp of 1).
//   Exact ops (+ - * / of one operation, comparisons, casts, relu/abs/neg/sign/clamp/where,
//   copies, max/argmax, fills): both backends compute the same IEEE operations in acc_t<T> and
//   round once on store, so the results are bit-identical (tolerance 0).
//   Functors with several roundings (a*b+c, gelu_grad...): nvcc contracts a*b+c into one FMA, g++
//   on x86-64 without -mfma does not, so each contraction may move the acc_t result by 1 ulp;
//   with c contractions and transcendental calls (libdevice and glibc each within 2 ulp of the
//   exact value, so within 4 ulp of each other), the acc_t results differ by at most
//   k = 4 * (#transcendentals) + #contractions ulp relative, amplified by at most the
//   condition number of the formula; then rounding to a 16-bit storage type can flip one more
//   storage ulp. Bound used: |cuda - cpu| <= 2 u(storage) |cpu| + 16 k u(acc) (|cpu| + 1),
//   the (|cpu| + 1) term covering results near zero (1 - tanh^2, 1 + erf near -1) where the
//   absolute error of an O(1) intermediate dominates.
//   Sums of n terms in different orders: each order's error is <= (n - 1) u(acc) sum|x_i|
//   (Higham, Accuracy and Stability, eq. 4.4), so two orders differ by <= 2 (n - 1) u(acc)
//   sum|x_i|, plus one storage rounding: 2 u(storage) |cpu|. GEMM: the same with n = k and
//   sum|a_il b_lj| (products of 16-bit values are exact in f32).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <sstream>
#include <string>

#include "core/cuda_api.h"
#if defined(MIXTAPE_CUDA_EMULATOR)
#include "tests/cuda_emulator/emulator.h"
#endif
#include "core/tensor.h"
#include "mixtape/mixtape.h"

namespace mixtape::cuda_test {

// MIXTAPE_CUDA_TEST_SELFCHECK=1 runs every parity test with the "device" side on the CPU too
// (CPU vs CPU): it proves the tests themselves (shapes, tolerances, API use) on a machine with
// no GPU. The comparisons are then trivially exact; the GPU run is what checks the kernels.
inline bool selfcheck() {
  const char* e = std::getenv("MIXTAPE_CUDA_TEST_SELFCHECK");
  return e && e[0] == '1';
}
// The device the "CUDA side" of a test runs on.
inline Device gpu() { return selfcheck() ? Device::CPU() : Device::CUDA(); }

// The first line of every GPU test: skipped, with the reason, when no GPU is usable.
#define MT_REQUIRE_CUDA()                                                          \
  do {                                                                             \
    if (!::mixtape::cuda::is_available() && !::mixtape::cuda_test::selfcheck())    \
      GTEST_SKIP() << "no usable GPU: " << ::mixtape::cuda::unavailable_reason(); \
  } while (0)

// The first line of a test that observes the device's stream order (where the host waits): only
// the CUDA emulator can (a GPU may finish queued work at any time), with its streams deferred,
// and not in the self-check run (the CPU standing in has no streams). The test's body, which uses
// tests/cuda_emulator/emulator.h, goes inside #if defined(MIXTAPE_CUDA_EMULATOR).
#if defined(MIXTAPE_CUDA_EMULATOR)
#define MT_REQUIRE_EMULATED_STREAM_ORDER()                                                                    \
  do {                                                                                                        \
    MT_REQUIRE_CUDA();                                                                                        \
    if (::mixtape::cuda_test::selfcheck()) GTEST_SKIP() << "the CPU standing in for the device has no streams"; \
    if (!::mixtape::cuda_emulator::streams_deferred())                                                       \
      GTEST_SKIP() << "MIXTAPE_CUDA_EMULATOR_STREAMS=immediate: no stream order to observe";                 \
  } while (0)
#else
#define MT_REQUIRE_EMULATED_STREAM_ORDER() \
  GTEST_SKIP() << "a GPU may finish queued work at any time: only the CUDA emulator can observe stream order"
#endif

inline double unit_roundoff(DType dt) {
  switch (dt) {
    case DType::Float16: return std::ldexp(1.0, -11);
    case DType::BFloat16: return std::ldexp(1.0, -8);
    case DType::Float32: return std::ldexp(1.0, -24);
    case DType::Float64: return std::ldexp(1.0, -53);
    default: return 0.0;  // integers and bool: exact
  }
}
// The compute type's unit roundoff (acc_t: f32 for 16-bit storage).
inline double acc_roundoff(DType dt) { return dt == DType::Float64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24); }

// The seed of a test: MIXTAPE_CUDA_TEST_SEED when set, else `fallback`; printed (and recorded in
// the XML) so a failure can be replayed with MIXTAPE_CUDA_TEST_SEED=<seed>.
inline uint64_t seed_or(uint64_t fallback) {
  uint64_t seed = fallback;
  if (const char* env = std::getenv("MIXTAPE_CUDA_TEST_SEED")) seed = std::strtoull(env, nullptr, 10);
  std::cout << "[ seed     ] " << ::testing::UnitTest::GetInstance()->current_test_info()->name() << " seed=" << seed
            << "\n";
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  return seed;
}
// A fresh seed per run, for checks that hold for every input (exact, or within a derived bound).
inline uint64_t fresh_seed() {
  std::random_device rd;
  return seed_or((uint64_t(rd()) << 32) ^ rd());
}

// Random CPU values in +-[lo, hi] (random sign unless positive), never 0, stored as dt (the
// values are rounded to dt first, so CPU and CUDA see the same inputs).
inline Tensor random_input(std::mt19937_64& rng, const IntList& shape, DType dt, double lo = 0.25, double hi = 2.0,
                           bool positive = false) {
  Tensor t = Tensor::empty(shape, TensorOptions(dt));
  std::uniform_real_distribution<double> mag(lo, hi);
  std::bernoulli_distribution neg(0.5);
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    double v = mag(rng);
    if (!positive && neg(rng)) v = -v;
    if (is_integral(dt)) v = std::round(v) == 0 ? (v < 0 ? -1 : 1) : std::round(v);
    if (dt == DType::UInt8) v = std::fabs(v);
    if (dt == DType::Bool) v = neg(rng) ? 1 : 0;
    set_element(t, i, v);
  }
  return t;
}

inline Tensor on_cuda(const Tensor& t) { return t.to(gpu()); }
inline Tensor on_cpu(const Tensor& t) { return t.to(Device::CPU()); }

// |cuda - cpu| <= atol + rtol |cpu| elementwise (NaN matches NaN, inf matches the same inf);
// same dtype and shape required. The failure names the first mismatches.
inline ::testing::AssertionResult close(const Tensor& cpu, const Tensor& cuda_result, double atol, double rtol,
                                        const std::string& what = "") {
  Tensor got = on_cpu(cuda_result);
  if (got.dtype() != cpu.dtype() || got.sizes() != cpu.sizes())
    return ::testing::AssertionFailure() << what << ": CUDA gave " << got.describe() << ", CPU " << cpu.describe();
  Tensor a = cpu.contiguous(), b = got.contiguous();
  const int64_t n = a.numel();
  std::ostringstream os;
  int bad = 0;
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = get_element(a, i), y = get_element(b, i);
    if (std::isnan(x) && std::isnan(y)) continue;
    if (x == y) continue;
    const double err = std::fabs(x - y), tol = atol + rtol * std::fabs(x);
    if (!(err <= tol)) {
      if (bad < 5) os << "\n  [" << i << "] cpu " << x << " cuda " << y << " |diff| " << err << " > tol " << tol;
      ++bad;
      worst = std::max(worst, err);
    }
  }
  if (bad)
    return ::testing::AssertionFailure() << what << ": " << bad << " of " << n << " elements differ (worst " << worst
                                         << ", atol " << atol << ", rtol " << rtol << ")" << os.str();
  return ::testing::AssertionSuccess();
}

// The floating dtypes every parity test sweeps.
inline constexpr DType kFloatTypes[] = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64};

// The bound for a functor with k roundings beyond the final store (see the header comment):
// |cuda - cpu| <= 16 k u(acc) + (2 u(storage) + 16 k u(acc)) |cpu|.
inline ::testing::AssertionResult approx_k(const Tensor& cpu, const Tensor& cuda_result, double k,
                                           const std::string& what) {
  const DType dt = cpu.dtype();
  return close(cpu, cuda_result, 16 * k * acc_roundoff(dt), 2 * unit_roundoff(dt) + 16 * k * acc_roundoff(dt), what);
}

// Bit-identical (tolerance 0, -0 vs +0 and NaN payloads aside: values compare as doubles).
inline ::testing::AssertionResult exact(const Tensor& cpu, const Tensor& cuda_result, const std::string& what = "") {
  return close(cpu, cuda_result, 0.0, 0.0, what);
}

// Elementwise bound: |cuda - cpu| <= bound[i] (bound a CPU f64 tensor of the same shape).
inline ::testing::AssertionResult within(const Tensor& cpu, const Tensor& cuda_result, const Tensor& bound,
                                         const std::string& what = "") {
  Tensor got = on_cpu(cuda_result);
  if (got.dtype() != cpu.dtype() || got.sizes() != cpu.sizes())
    return ::testing::AssertionFailure() << what << ": CUDA gave " << got.describe() << ", CPU " << cpu.describe();
  Tensor a = cpu.contiguous(), b = got.contiguous(), c = bound.contiguous();
  std::ostringstream os;
  int bad = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = get_element(a, i), y = get_element(b, i), tol = get_element(c, i);
    if ((std::isnan(x) && std::isnan(y)) || x == y) continue;
    if (!(std::fabs(x - y) <= tol)) {
      if (bad < 5) os << "\n  [" << i << "] cpu " << x << " cuda " << y << " |diff| " << std::fabs(x - y) << " > " << tol;
      ++bad;
    }
  }
  if (bad) return ::testing::AssertionFailure() << what << ": " << bad << " of " << a.numel() << " elements" << os.str();
  return ::testing::AssertionSuccess();
}

inline const char* short_name(DType dt) {
  static std::string s[kNumDTypes];
  std::string& r = s[static_cast<int>(dt)];
  if (r.empty()) r = std::string(dtype_short(dt));
  return r.c_str();
}

}  // namespace mixtape::cuda_test
