// bench/amx_peak.h — the AMX tdpbf16ps peak probe that bench/fma_peak and bench/bgemm share: the
// ceiling of mixtape's AMX BF16 GEMM (ops/cpu/bgemm_amx.h). Self-contained (fma_peak links no
// mixtape code): its own CPU/OS check and Linux permission request.
// Invariant: amx_chains() runs only after amx_usable() returned true.
#pragma once
#include <cstdint>

#include "ops/cpu/amx_tiles.h"  // header-only: the tile configuration the GEMM uses

#if MIXTAPE_HAVE_AMX_TILES && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace bench_amx {

// Six accumulator tiles, each tdpbf16ps 16 x 16 x 32 multiply-adds = 16,384 flops.
constexpr int kAccumulators = 6;
constexpr double kFlopsPerInstruction = 16.0 * 16 * 32 * 2;

#if MIXTAPE_HAVE_AMX_TILES && defined(__linux__) && defined(SYS_arch_prctl)
// What amx_chains (compiled MT_AMX, so with AVX-512 too) needs: AVX-512 F/BW/VL and AVX512_BF16
// (leaf 7: EBX bits 16, 30, 31; subleaf 1 EAX bit 5) with ZMM/opmask state in XCR0 (0xE6),
// AMX-TILE + AMX-BF16 (leaf 7: EDX bits 24, 22) with tile state in XCR0 (bits 17, 18), and Linux's
// permission (ops/cpu/cpu_features.cpp asks the same way; this program links no mixtape).
inline bool amx_usable() {
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;  // OSXSAVE: XGETBV usable
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0x600E6u) != 0x600E6u || __get_cpuid_max(0, nullptr) < 7) return false;
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned subleaves = a;
    const unsigned avx512 = (1u << 16) | (1u << 30) | (1u << 31);
    if ((b & avx512) != avx512 || !(d & (1u << 24)) || !(d & (1u << 22)) || subleaves < 1) return false;
    __cpuid_count(7, 1, a, b, c, d);
    if (!(a & (1u << 5))) return false;
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
  }();
  return ok;
}

// kAccumulators independent tdpbf16ps accumulators (tmm0-5) fed by two constant tiles (tmm6-7:
// 2^-20 in every BF16, so the sums stay far from overflow and from subnormals). `seed` is unused
// (the signature of fma_peak's probes).
MT_AMX inline float amx_chains(long iters, float seed = 0.0f) {
  (void)seed;
  const mixtape::cpu::amx::TileScope tiles;
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
  return out[0];
}
#else
inline bool amx_usable() { return false; }
inline float amx_chains(long, float = 0.0f) { return 0.0f; }
#endif

}  // namespace bench_amx
