// ops/cpu/amx_tiles.h — the AMX tile program shared by the BF16 GEMM (ops/cpu/bgemm_amx.cpp) and
// the implicit-GEMM convolution (ops/cpu/conv_implicit_gemm.cpp): one tile configuration (every
// tile 16 rows of 64 bytes) and the 32 x 32 block product on it, whose order of summation is the
// determinism rule written in ops/cpu/bgemm_amx.h.
// Invariant: call only from MT_TARGET_AMX functions, after can_run_bf16_amx(cpu_features_with_amx()); a thread
// holds a TileScope while it runs tile instructions, so its tiles are configured first and
// released however the scope ends (no thread keeps tile state the kernel must save on every
// context switch).
#pragma once
#include <cstdint>

#include "ops/cpu/isa.h"

namespace mixtape::cpu::amx {

constexpr int64_t kTile = 16;   // rows of every tile; 16 FP32 or 16 BF16 pairs per row
constexpr int64_t kStep = 32;   // depth of one tdpbf16ps: 16 pairs
constexpr int64_t kBlock = 32;  // rows and columns of a C block: 2 x 2 accumulator tiles

#if MIXTAPE_X86_KERNELS

// ldtilecfg's 64-byte operand: palette 1, every tile 16 rows of 64 bytes (tmm0-7).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "ldtilecfg reads 64 bytes");

MT_TARGET_AMX inline void configure_amx_tiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = kTile;
  // GCC's _tile_loadconfig tells the compiler it reads 8 bytes of cfg: make all 64 visible.
  __asm__ volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

// Configures the calling thread's tiles for its lifetime and releases them at its end.
struct TileScope {
  MT_TARGET_AMX TileScope() { configure_amx_tiles(); }
  MT_TARGET_AMX ~TileScope() { _tile_release(); }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

// The 32 x 32 block T = A panel @ B panel over `steps` depth steps of 32, from +0, left in
// tmm0-3 (rows 0-15: tmm0 columns 0-15, tmm1 columns 16-31; rows 16-31: tmm2, tmm3).
//   A panel: per step, two row-major 16 x 32 BF16 tiles (rows 0-15, then 16-31): ap + s 1024.
//   B panel: per step, 16 pair rows of 32 columns (the pair layout of ops/cpu/bf16_pairs_avx512.h,
//            128 bytes a row): bp + s 1024; columns 0-15 are the first 64 bytes of each row.
// With `top`, rows 0-15 only (tmm0-1), for a block whose rows 16-31 are padding (16 output
// channels: ResNet's first stage): half the tile loads and products. Each accumulator tile is its
// own chain, so those rows' sums are the full block's, bit for bit.
MT_TARGET_AMX inline void block_product(int64_t steps, const uint16_t* ap, const uint16_t* bp, bool top = false) {
  // The tile loads are asm without a memory operand: make the packers' stores happen first.
  __asm__ volatile("" : : : "memory");
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t s = 0; s < steps; ++s) {
    const uint16_t* as = ap + s * kBlock * kStep;
    const uint16_t* bs = bp + s * kStep * kBlock;
    _tile_loadd(4, as, kStep * 2);
    _tile_loadd(6, bs, kBlock * 4);
    _tile_loadd(7, bs + kTile * 2, kBlock * 4);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if (top) continue;
    _tile_loadd(5, as + kTile * kStep, kStep * 2);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
}

// Stores tmm0-3 (with `top`, tmm0-1: rows 0-15) as a 32 x 32 FP32 block with row stride ld floats.
MT_TARGET_AMX inline void store_block(float* t, int64_t ld, bool top = false) {
  _tile_stored(0, t, ld * 4);
  _tile_stored(1, t + kTile, ld * 4);
  if (top) return;
  _tile_stored(2, t + kTile * ld, ld * 4);
  _tile_stored(3, t + kTile * ld + kTile, ld * 4);
}

#endif  // MIXTAPE_X86_KERNELS

}  // namespace mixtape::cpu::amx
