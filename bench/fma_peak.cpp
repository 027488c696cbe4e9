// bench/fma_peak.cpp — the machine's measured fp32 FMA peak (GFLOP/s), on 1 thread and on N
// threads: the ceiling against which bench/suite.sh states what fraction a training step
// achieves. Owns nothing else; it does not use mixtape at all, so its number depends on the
// CPU only.
//
//   build-bench/bench/fma_peak [--threads N] [--runs 7] [--seconds 0.2] [--json FILE]
//
// Method: kAcc independent 8-lane accumulators, each updated by one vfmadd per iteration. An
// FMA has a latency of 4-5 cycles and a core has two FMA pipes, so at least 2 x 5 = 10 chains
// must be in flight to keep both pipes busy; 12 leaves margin and still fits in the 16 ymm
// registers with the two operands. acc = acc * a + b with a just below 1 converges to
// b / (1 - a) and never reaches denormals or infinity, which would slow the pipes down.
// Each run times `iters` iterations on every thread at once (OpenMP); the figure is the median
// of `runs` runs and the spread is their min..max. On a CPU with AVX-512F the same chains run
// 16 lanes wide too (JSON key "avx512"): the ceiling of mixtape's AVX-512 SGEMM. On a CPU with
// AVX512_BF16, chains of vdpbf16ps zmm (32 bf16 pair products into 16 fp32 lanes, counted as 64
// flops) give the ceiling of mixtape's BF16 GEMM (ops/cpu/bgemm_avx512bf16.h; JSON key
// "avx512_bf16"), with 12, 16 and 24 chains: its latency is not the FMA's, so the number of chains
// that fills the pipes is measured rather than assumed; the best N-thread median is the peak. On a
// CPU with AMX (and Linux's permission), 6 independent tdpbf16ps accumulator tiles per thread
// (16,384 flops each) give the ceiling of mixtape's AMX BF16 GEMM (ops/cpu/bgemm_amx.h; JSON key
// "amx_bf16"; bench/amx_peak.h).
// Needs AVX2 + FMA (checked at run time; without them it prints n/a and exits 0, since the rest
// of the suite still means something).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "amx_peak.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

constexpr int kAcc = 12;                     // independent dependency chains (see above)
constexpr double kFlopPerIter = kAcc * 8 * 2;  // 8 lanes, multiply + add (AVX2)

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) float fma_chains(long iters, float seed) {
  const __m256 a = _mm256_set1_ps(0.9999999f), b = _mm256_set1_ps(1e-7f);
  __m256 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm256_set1_ps(seed + static_cast<float>(i));
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  // Fold the chains so none of them is dead code.
  __m256 s = acc[0];
  for (int i = 1; i < kAcc; ++i) s = _mm256_add_ps(s, acc[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0] + out[7];
}
// The same chains 16 lanes wide: the ceiling of mixtape's AVX-512 SGEMM (ops/cpu/sgemm_avx512.h).
__attribute__((target("avx512f"))) float fma_chains512(long iters, float seed) {
  const __m512 a = _mm512_set1_ps(0.9999999f), b = _mm512_set1_ps(1e-7f);
  __m512 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_ps(seed + static_cast<float>(i));
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kAcc; ++i) s = _mm512_add_ps(s, acc[i]);
  float out[16];
  _mm512_storeu_ps(out, s);
  return out[0] + out[15];
}
// kChains chains of vdpbf16ps zmm. acc starts at 1 and each instruction adds two products of
// 2^-20 x 2^-20: far below half an ulp of 1, so acc stays 1 (normal, never denormal or inf) and
// every instruction still does its full work.
template <int kChains>
__attribute__((target("avx512f,avx512bf16"))) float dpbf16_chains(long iters, float seed) {
  (void)seed;
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3580), b = a;  // 2^-20 in bf16
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(1.0f);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  float out[16];
  _mm512_storeu_ps(out, s);
  return out[0] + out[15];
}
bool have_avx2_fma() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
bool have_avx512f() { return __builtin_cpu_supports("avx512f"); }
// GCC's check includes the OS's XSAVE support for ZMM state, like avx512f's.
bool have_avx512_bf16() { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16"); }
#else
float fma_chains(long, float) { return 0.f; }
float fma_chains512(long, float) { return 0.f; }
template <int kChains>
float dpbf16_chains(long, float) { return 0.f; }
bool have_avx2_fma() { return false; }
bool have_avx512f() { return false; }
bool have_avx512_bf16() { return false; }
#endif

struct Stat {
  double median = 0, min = 0, max = 0;
};

using Chains = float (*)(long, float);

// GFLOP/s of `runs` runs on `threads` threads, each thread doing `iters` iterations of `chains`
// (`flop_per_iter` flops per iteration).
Stat measure_flops(Chains chains, double flop_per_iter, int threads, long iters, int runs) {
  std::vector<double> g;
  volatile float sink = 0.f;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    float total = 0.f;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    total += chains(iters, static_cast<float>(omp_get_thread_num()));
    const auto t1 = std::chrono::steady_clock::now();
    sink = sink + total;
    const double s = std::chrono::duration<double>(t1 - t0).count();
    g.push_back(threads * flop_per_iter * static_cast<double>(iters) / s * 1e-9);
  }
  std::sort(g.begin(), g.end());
  return {g[g.size() / 2], g.front(), g.back()};
}
// kAcc FMA chains `lanes` wide.
Stat measure(Chains chains, int lanes, int threads, long iters, int runs) {
  return measure_flops(chains, kAcc * lanes * 2.0, threads, iters, runs);
}

// The vdpbf16ps peak: one and `threads` threads for each chain count.
struct Bf16Peak {
  int chains[3] = {12, 16, 24};
  Stat one[3], all[3];
  int best = 0;  // index of the chain count with the best `threads`-thread median
};
Bf16Peak measure_bf16(int threads, long iters, int runs) {
  const Chains fns[3] = {dpbf16_chains<12>, dpbf16_chains<16>, dpbf16_chains<24>};
  Bf16Peak p;
  // Half the instructions of an FMA run per run (they issue at the FMA's rate: about half its
  // duration), so the three chain counts together add about 3 FMA runs' time.
  for (int c = 0; c < 3; ++c) {
    const long it = std::max(1L, iters * kAcc / p.chains[c] / 2);
    p.one[c] = measure_flops(fns[c], p.chains[c] * 64.0, 1, it, runs);
    p.all[c] = measure_flops(fns[c], p.chains[c] * 64.0, threads, it, runs);
    if (p.all[c].median > p.all[p.best].median) p.best = c;
  }
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = omp_get_max_threads(), runs = 7;
  double seconds = 0.2;
  std::string json;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--threads") threads = std::atoi(v.c_str());
    else if (a == "--runs") runs = std::atoi(v.c_str());
    else if (a == "--seconds") seconds = std::atof(v.c_str());
    else if (a == "--json") json = v;
    else {
      std::fprintf(stderr, "usage: fma_peak [--threads N] [--runs 7] [--seconds 0.2] [--json FILE]\n");
      return 2;
    }
  }
  if (threads < 1 || runs < 1) {
    std::fprintf(stderr, "fma_peak: --threads and --runs must be >= 1\n");
    return 2;
  }
  if (!have_avx2_fma()) {
    std::printf("fma_peak: n/a (this CPU lacks AVX2 + FMA)\n");
    if (!json.empty())
      if (FILE* f = std::fopen(json.c_str(), "w")) {
        std::fprintf(f, "{\"available\": false}\n");
        std::fclose(f);
      }
    return 0;
  }
  // Size one run from a short calibration so it lasts about `seconds` on one thread.
  long iters = 1 << 20;
  const Stat cal = measure(fma_chains, 8, 1, iters, 1);
  iters = std::max(1L << 16, static_cast<long>(seconds * cal.median * 1e9 / kFlopPerIter));
  const Stat one = measure(fma_chains, 8, 1, iters, runs);
  const Stat all = measure(fma_chains, 8, threads, iters, runs);
  const bool z = have_avx512f();
  const Stat one512 = z ? measure(fma_chains512, 16, 1, iters, runs) : Stat{};
  const Stat all512 = z ? measure(fma_chains512, 16, threads, iters, runs) : Stat{};
  std::printf("fma_peak: %d accumulators x 8 lanes, %ld iterations per thread per run, median of %d runs\n", kAcc,
              iters, runs);
  std::printf("  1 thread : %8.1f GFLOP/s  (%.1f..%.1f)\n", one.median, one.min, one.max);
  std::printf("  %d threads: %8.1f GFLOP/s  (%.1f..%.1f)\n", threads, all.median, all.min, all.max);
  if (z) {
    std::printf("AVX-512 (16 lanes):\n");
    std::printf("  1 thread : %8.1f GFLOP/s  (%.1f..%.1f)\n", one512.median, one512.min, one512.max);
    std::printf("  %d threads: %8.1f GFLOP/s  (%.1f..%.1f)\n", threads, all512.median, all512.min, all512.max);
  }
  const bool bf = have_avx512_bf16();
  const Bf16Peak bp = bf ? measure_bf16(threads, iters, runs) : Bf16Peak{};
  if (bf) {
    std::printf("AVX512_BF16 vdpbf16ps zmm (64 flops each), by independent chains per thread:\n");
    for (int c = 0; c < 3; ++c)
      std::printf("  %2d chains: 1 thread %8.1f GFLOP/s (%.1f..%.1f), %d threads %8.1f GFLOP/s (%.1f..%.1f)%s\n",
                  bp.chains[c], bp.one[c].median, bp.one[c].min, bp.one[c].max, threads, bp.all[c].median,
                  bp.all[c].min, bp.all[c].max, c == bp.best ? "  <- peak" : "");
  }
  const bool amx = bench_amx::amx_usable();
  Stat amx_one, amx_all;
  if (amx) {
    // One tdpbf16ps does 16,384 flops in ~16 cycles: size the runs from the FMA calibration.
    const long it = std::max(1L << 8, static_cast<long>(seconds * cal.median * 1e9 * 8 / bench_amx::kFlopsPerInstruction /
                                                        bench_amx::kAccumulators));
    const double per_iter = bench_amx::kAccumulators * bench_amx::kFlopsPerInstruction;
    amx_one = measure_flops(bench_amx::amx_chains, per_iter, 1, it, runs);
    amx_all = measure_flops(bench_amx::amx_chains, per_iter, threads, it, runs);
    std::printf("AMX tdpbf16ps (16,384 flops each), %d accumulator tiles per thread:\n", bench_amx::kAccumulators);
    std::printf("  1 thread : %8.1f GFLOP/s  (%.1f..%.1f)\n", amx_one.median, amx_one.min, amx_one.max);
    std::printf("  %d threads: %8.1f GFLOP/s  (%.1f..%.1f)\n", threads, amx_all.median, amx_all.min, amx_all.max);
  }
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "fma_peak: cannot write %s: %s\n", json.c_str(), std::strerror(errno));
      return 1;
    }
    std::fprintf(f,
                 "{\"available\": true, \"accumulators\": %d, \"iters\": %ld, \"runs\": %d,\n"
                 " \"one\": {\"threads\": 1, \"median\": %.3f, \"min\": %.3f, \"max\": %.3f},\n"
                 " \"all\": {\"threads\": %d, \"median\": %.3f, \"min\": %.3f, \"max\": %.3f}",
                 kAcc, iters, runs, one.median, one.min, one.max, threads, all.median, all.min, all.max);
    if (z)
      std::fprintf(f,
                   ",\n \"avx512\": {\"one\": {\"threads\": 1, \"median\": %.3f, \"min\": %.3f, \"max\": %.3f},\n"
                   "            \"all\": {\"threads\": %d, \"median\": %.3f, \"min\": %.3f, \"max\": %.3f}}",
                   one512.median, one512.min, one512.max, threads, all512.median, all512.min, all512.max);
    if (bf) {
      const int c = bp.best;
      std::fprintf(f,
                   ",\n \"avx512_bf16\": {\"chains\": %d, \"flops_per_instruction\": 64,\n"
                   "            \"one\": {\"threads\": 1, \"median\": %.3f, \"min\": %.3f, \"max\": %.3f},\n"
                   "            \"all\": {\"threads\": %d, \"median\": %.3f, \"min\": %.3f, \"max\": %.3f}}",
                   bp.chains[c], bp.one[c].median, bp.one[c].min, bp.one[c].max, threads, bp.all[c].median,
                   bp.all[c].min, bp.all[c].max);
    }
    if (amx)
      std::fprintf(f,
                   ",\n \"amx_bf16\": {\"accumulators\": %d, \"flops_per_instruction\": %.0f,\n"
                   "            \"one\": {\"threads\": 1, \"median\": %.3f, \"min\": %.3f, \"max\": %.3f},\n"
                   "            \"all\": {\"threads\": %d, \"median\": %.3f, \"min\": %.3f, \"max\": %.3f}}",
                   bench_amx::kAccumulators, bench_amx::kFlopsPerInstruction, amx_one.median, amx_one.min, amx_one.max,
                   threads, amx_all.median, amx_all.min, amx_all.max);
    std::fprintf(f, "}\n");
    std::fclose(f);
  }
  return 0;
}
