// bench/bgemm.cpp — the BF16 GEMM's speed: AMX (ops/cpu/bgemm_amx.h, tdpbf16ps) and AVX512_BF16
// (ops/cpu/bgemm_avx512bf16.h, vdpbf16ps) vs emulated (both BF16 operands widened to FP32, then
// cpu::gemm) vs the FP32 GEMM (cpu::gemm on FP32 operands), on 1 and N threads, as GFLOP/s
// (2 m n k flops) and as % of each instruction's peak measured in the same rounds.
//
//   build/bench/bgemm [--threads N] [--rounds 15] [--m 512] [--n 512] [--k 512] [--ta] [--tb]
//
// Method: every round runs, one after the other and in a rotating order, the peak probes (16
// independent vdpbf16ps chains per thread, 64 flops each: the figure bench/fma_peak prints; 6
// independent tdpbf16ps accumulator tiles per thread, 16,384 flops each, where the CPU has AMX)
// and the GEMMs, each timed over enough calls to last ~20 ms. Figures are medians over the
// rounds; "% of peak" and the ratios are medians of the per-round ratios, so a load change
// between rounds (a shared machine) cancels out as far as possible. Exits 0 with "n/a" on a CPU
// without AVX512_BF16; the AMX columns say "n/a" on a CPU without AMX.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "amx_peak.h"
#include "core/bfloat16.h"
#include "core/convert.h"
#include "ops/cpu/bgemm_amx.h"
#include "ops/cpu/bgemm_avx512bf16.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/cpu_features.h"
#include "ops/threads.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kChains = 16;  // fma_peak's best chain count on the development machine (Zen 5)

#if defined(__x86_64__) && defined(__GNUC__)
// kChains vdpbf16ps chains; acc stays 1 (the products are far below its half ulp): no denormals.
__attribute__((target("avx512f,avx512bf16"))) float dpbf16_chains(long iters) {
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3580);  // 2^-20
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(1.0f);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, a);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  float out[16];
  _mm512_storeu_ps(out, s);
  return out[0] + out[15];
}

#else
float dpbf16_chains(long) { return 0.f; }
#endif

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// GFLOP/s of the vdpbf16ps chains on `threads` threads, `iters` iterations each.
double peak_gflops(int threads, long iters) {
  volatile float sink = 0;
  const auto t0 = Clock::now();
  float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  total += dpbf16_chains(iters);
  const double s = seconds_since(t0);
  sink = sink + total;
  return threads * kChains * 64.0 * static_cast<double>(iters) / s * 1e-9;
}

// GFLOP/s of the tdpbf16ps chains on `threads` threads, `iters` iterations each.
double amx_peak_gflops(int threads, long iters) {
  volatile float sink = 0;
  const auto t0 = Clock::now();
  float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  total += bench_amx::amx_chains(iters);
  const double s = seconds_since(t0);
  sink = sink + total;
  return threads * bench_amx::kAccumulators * bench_amx::kFlopsPerInstruction * static_cast<double>(iters) / s * 1e-9;
}

// GFLOP/s of `fn` (one GEMM of `flops`), called `reps` times.
double gemm_gflops(const std::function<void()>& fn, int reps, double flops) {
  const auto t0 = Clock::now();
  for (int r = 0; r < reps; ++r) fn();
  return flops * reps / seconds_since(t0) * 1e-9;
}

struct Stat {
  double median, min, max;
};
Stat stat(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

}  // namespace

int main(int argc, char** argv) {
  using namespace mixtape;
  int threads = omp_get_max_threads(), rounds = 15;
  int64_t m = 512, n = 512, k = 512;
  bool ta = false, tb = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--ta") ta = true;
    else if (a == "--tb") tb = true;
    else if (a == "--threads" && has_value) threads = std::atoi(argv[++i]);
    else if (a == "--rounds" && has_value) rounds = std::atoi(argv[++i]);
    else if (a == "--m" && has_value) m = std::atoll(argv[++i]);
    else if (a == "--n" && has_value) n = std::atoll(argv[++i]);
    else if (a == "--k" && has_value) k = std::atoll(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bgemm [--threads N] [--rounds 15] [--m 512] [--n 512] [--k 512] [--ta] [--tb]\n");
      return 2;
    }
  }
  if (threads < 1 || rounds < 1 || m < 1 || n < 1 || k < 1) {
    std::fprintf(stderr, "bgemm: --threads, --rounds, --m, --n, --k must be >= 1\n");
    return 2;
  }
  if (!cpu::bgemm_avx512bf16_available()) {
    std::printf("bgemm: n/a (this CPU lacks %s)\n", cpu::bf16_native_missing(cpu::cpu_features()).c_str());
    return 0;
  }

  // op(A) (m, k) and op(B) (k, n), stored transposed when ta / tb, dense (ld = stored width).
  const int64_t lda = ta ? m : k, ldb = tb ? k : n;
  std::mt19937 gen(0);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> af(static_cast<size_t>(m * k)), bf(static_cast<size_t>(k * n)), c(static_cast<size_t>(m * n));
  for (auto& x : af) x = static_cast<float>(BFloat16(u(gen)));  // FP32 operands hold the BF16 values
  for (auto& x : bf) x = static_cast<float>(BFloat16(u(gen)));
  std::vector<BFloat16> ah(af.size()), bh(bf.size());
  convert_float_to_bfloat16(af.data(), ah.data(), af.size());
  convert_float_to_bfloat16(bf.data(), bh.data(), bf.size());
  std::vector<float> aw(af.size()), bw(bf.size());  // the emulated path's widened copies

  const auto native = [&] {
    cpu::bgemm_avx512bf16(ta, tb, m, n, k, ah.data(), lda, bh.data(), ldb, 0.0f, c.data(), n);
  };
  const bool amx = cpu::bgemm_amx_available();
  const auto amx_gemm = [&] {
    cpu::bgemm_amx(ta, tb, m, n, k, ah.data(), lda, bh.data(), ldb, 0.0f, c.data(), n);
  };
  const auto emulated = [&] {
    convert_bfloat16_to_float(ah.data(), aw.data(), ah.size());
    convert_bfloat16_to_float(bh.data(), bw.data(), bh.size());
    cpu::gemm(ta, tb, m, n, k, aw.data(), lda, bw.data(), ldb, 0.0f, c.data(), n);
  };
  const auto fp32 = [&] { cpu::gemm(ta, tb, m, n, k, af.data(), lda, bf.data(), ldb, 0.0f, c.data(), n); };

  // Sanity: native and FP32 on the same values agree to the FP32 summation bound.
  std::vector<float> ref(c.size());
  fp32();
  ref = c;
  native();
  double worst = 0;
  for (size_t i = 0; i < c.size(); ++i) worst = std::max(worst, std::fabs(double(c[i]) - double(ref[i])));
  double worst_amx = 0;
  if (amx) {
    amx_gemm();
    for (size_t i = 0; i < c.size(); ++i) worst_amx = std::max(worst_amx, std::fabs(double(c[i]) - double(ref[i])));
  }

  const double flops = 2.0 * double(m) * double(n) * double(k);
  std::printf("bgemm: C (%lld, %lld) = op(A) (%lld, %lld) op(B)%s%s, BF16 operands, FP32 result; median of %d rounds\n",
              (long long)m, (long long)n, (long long)m, (long long)k, ta ? ", A transposed" : "",
              tb ? ", B transposed" : "", rounds);
  std::printf("  %s\n", cpu::blas_info_line().c_str());
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {  // a shared machine's load explains a wide spread
    char line[128] = {0};
    if (std::fgets(line, sizeof line, f)) std::printf("  load average at start: %s", line);
    std::fclose(f);
  }
  std::printf("  max |avx512bf16 - fp32| = %.3g, max |amx - fp32| = %s (sums of %lld products of values in [-1, 1])\n",
              worst, amx ? std::to_string(worst_amx).c_str() : "n/a", (long long)k);
  std::printf("| threads | peak vdpbf16ps GFLOP/s | avx512bf16 GFLOP/s | %% of peak | peak tdpbf16ps GFLOP/s "
              "| amx GFLOP/s | %% of peak | emulated GFLOP/s | fp32 GFLOP/s | avx512bf16/fp32 | amx/fp32 "
              "| amx/emulated |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<int> counts = {1};
  if (threads > 1) counts.push_back(threads);
  for (const int t : counts) {
    set_num_threads(t);
    // Calibrate: calls per measurement for ~20 ms each, peak iterations for ~20 ms.
    const auto reps_for = [&](const std::function<void()>& fn) {
      fn();
      const auto t0 = Clock::now();
      fn();
      return std::max(1, static_cast<int>(0.02 / std::max(1e-7, seconds_since(t0))));
    };
    const int rn = reps_for(native), re = reps_for(emulated), rf = reps_for(fp32), ra = amx ? reps_for(amx_gemm) : 0;
    const double cal = peak_gflops(t, 1 << 16);
    const long iters = std::max(1L << 12, static_cast<long>(0.02 * cal * 1e9 / t / (kChains * 64.0)));
    const double acal = amx ? amx_peak_gflops(t, 1 << 12) : 0;
    const double amx_flops_per_iter = bench_amx::kAccumulators * bench_amx::kFlopsPerInstruction;
    const long aiters = std::max(1L << 8, static_cast<long>(0.02 * acal * 1e9 / t / amx_flops_per_iter));
    std::vector<double> pk, nv, apk, am, em, f32, pct, apct, vs_f32, vs_f32a, vs_ema;
    for (int r = 0; r < rounds; ++r) {
      double g[6] = {0, 0, 0, 0, 0, 0};
      for (int s = 0; s < 6; ++s) {  // rotate the order so no variant always follows another
        const int which = (s + r) % 6;
        if (which == 0) g[0] = peak_gflops(t, iters);
        if (which == 1) g[1] = gemm_gflops(native, rn, flops);
        if (which == 2) g[2] = gemm_gflops(emulated, re, flops);
        if (which == 3) g[3] = gemm_gflops(fp32, rf, flops);
        if (which == 4 && amx) g[4] = amx_peak_gflops(t, aiters);
        if (which == 5 && amx) g[5] = gemm_gflops(amx_gemm, ra, flops);
      }
      pk.push_back(g[0]), nv.push_back(g[1]), em.push_back(g[2]), f32.push_back(g[3]);
      apk.push_back(g[4]), am.push_back(g[5]);
      pct.push_back(100.0 * g[1] / g[0]), vs_f32.push_back(g[1] / g[3]);
      apct.push_back(amx ? 100.0 * g[5] / g[4] : 0), vs_f32a.push_back(g[5] / g[3]), vs_ema.push_back(g[5] / g[2]);
    }
    const Stat P = stat(pk), N = stat(nv), E = stat(em), F = stat(f32), AP = stat(apk), A = stat(am);
    const auto cell = [&](const Stat& x) {
      char buf[64];
      if (!amx) return std::string("n/a");
      std::snprintf(buf, sizeof buf, "%.1f (%.1f..%.1f)", x.median, x.min, x.max);
      return std::string(buf);
    };
    const auto ratio = [&](const std::vector<double>& v, const char* fmt) {
      char buf[32];
      if (!amx) return std::string("n/a");
      std::snprintf(buf, sizeof buf, fmt, stat(v).median);
      return std::string(buf);
    };
    std::printf("| %d | %.1f (%.1f..%.1f) | %.1f (%.1f..%.1f) | %.1f%% | %s | %s | %s | %.1f (%.1f..%.1f) "
                "| %.1f (%.1f..%.1f) | %.2fx | %s | %s |\n",
                t, P.median, P.min, P.max, N.median, N.min, N.max, stat(pct).median, cell(AP).c_str(),
                cell(A).c_str(), ratio(apct, "%.1f%%").c_str(), E.median, E.min, E.max, F.median, F.min, F.max,
                stat(vs_f32).median, ratio(vs_f32a, "%.2fx").c_str(), ratio(vs_ema, "%.2fx").c_str());
  }
  return 0;
}
