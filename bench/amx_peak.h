// bench/amx_peak.h — the AMX tdpbf16ps peak probe that bench/fma_peak and bench/bgemm share: the
// ceiling of mixtape's AMX BF16 GEMM (ops/cpu/bgemm_amx.h). Self-contained (fma_peak links no
// mixtape code): its own CPU/OS check and Linux permission request.
// Invariant: amx_chains() runs only after amx_usable() returned true.
#pragma once
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif

namespace bench_amx {

// Six accumulator tiles, each tdpbf16ps 16 x 16 x 32 multiply-adds = 16,384 flops.
constexpr int kAccumulators = 6;
constexpr double kFlopsPerInstruction = 16.0 * 16 * 32 * 2;

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__) && defined(SYS_arch_prctl)
// AMX-TILE + AMX-BF16 in CPUID, tile state in XCR0 (bits 17, 18), and Linux's permission.
inline bool amx_usable() {
  static const bool ok = [] {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16")) return false;
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0x60000u) != 0x60000u) return false;
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
  }();
  return ok;
}

// ldtilecfg's operand: palette 1, tmm0-7 each 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// kAccumulators independent tdpbf16ps accumulators (tmm0-5) fed by two constant tiles (tmm6-7:
// 2^-20 in every BF16, so the sums stay far from overflow and from subnormals). `seed` is unused
// (the signature of fma_peak's probes).
__attribute__((target("amx-tile,amx-bf16"))) inline float amx_chains(long iters, float seed = 0.0f) {
  (void)seed;
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  __asm__ volatile("" : : "r"(&cfg) : "memory");  // GCC's _tile_loadconfig declares 8 bytes read
  _tile_loadconfig(&cfg);
  alignas(64) uint16_t operand[16 * 32];
  for (auto& x : operand) x = 0x3580;
  alignas(64) float out[16 * 16];
  __asm__ volatile("" : : "r"(operand) : "memory");  // tileloadd declares no memory read
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  for (long it = 0; it < iters; ++it) {
    _tile_dpbf16ps(0, 6, 7);
    _tile_dpbf16ps(1, 6, 7);
    _tile_dpbf16ps(2, 6, 7);
    _tile_dpbf16ps(3, 6, 7);
    _tile_dpbf16ps(4, 6, 7);
    _tile_dpbf16ps(5, 6, 7);
  }
  _tile_stored(0, out, 64);
  _tile_release();
  return out[0];
}
#else
inline bool amx_usable() { return false; }
inline float amx_chains(long, float = 0.0f) { return 0.0f; }
#endif

}  // namespace bench_amx
