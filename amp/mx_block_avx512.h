// amp/mx_block_avx512.h — MX blocks of contiguous values (a tensor blocked along a dim with
// nothing after it: inner 1, as MXFP8's conv2d wgrad lays out its operands) in one AVX-512 pass
// per block: its amax, its E8M0 code, the FP8 cast and the widening times 2^e, 16 values a vector
// (BF16 blocks of 32: 16 blocks at a time, their codes computed 16 lanes at once); and the amax
// pass of blocks along a strided dim, 16 lanes a vector.
// Invariant: the codes, FP8 elements and widened values are mx_quantize_widened's scalar rule's
// (amp/mx_scale_rule.h) bit for bit; tests/amp/test_fp8_kernels.cpp checks them against it.
#pragma once
#include <cstdint>

#include "core/bfloat16.h"

namespace mixtape::amp {

// True where a block with this code widens to the product of its elements and 2^e truncated to
// BF16, exactly (e in [-110, 111]: every element, |q| in [2^-16, 2^16] or 0, times 2^e is a normal
// BF16 number); false for the NaN code and for blocks near BF16's range edges (mx_widen's cases).
inline bool mx_widening_is_product(uint8_t code) {
  const int e = static_cast<int>(code) - 127;
  return e >= -110 && e <= 111;
}

// True where mx_contiguous_blocks runs (cpu::isa_avx512()).
bool mx_contiguous_blocks_available();

// src[0, n) in blocks of k (the last one n - (nb - 1) k values, nb = ceil(n / k)): codes[b] is
// block b's E8M0 code (mx_code_of of its amax; 0xFF where it holds an inf or NaN); for each block
// with mx_widening_is_product(code), its FP8 elements (dst, when not null) and widened values
// (wide). Other blocks' elements are left for the caller's scalar path. Call only where available.
void mx_contiguous_blocks(const float* src, int64_t n, int64_t k, bool e5m2, bool spec, uint8_t* codes, uint8_t* dst,
                          BFloat16* wide);
void mx_contiguous_blocks(const BFloat16* src, int64_t n, int64_t k, bool e5m2, bool spec, uint8_t* codes,
                          uint8_t* dst, BFloat16* wide);

// Blocks along a strided dim (inner > 1): am[i] = max(am[i], |src[j inner + i]|'s bits) for
// j < rows, i < inner (the amax of each lane's block as a max of |v|'s bits: monotonic for non-NaN
// floats, >= 0x7F800000 where an inf or NaN is among them; BF16 read as its f32 bits). Call only
// where mx_contiguous_blocks_available().
void mx_amax_rows(const float* src, int64_t rows, int64_t inner, uint32_t* am);
void mx_amax_rows(const BFloat16* src, int64_t rows, int64_t inner, uint32_t* am);

// The codes of n blocks from their amaxes as mx_amax_rows leaves them, 16 at once (mx_code_of's
// rule): codes[i], inv[i] = mx_inv_scale_of(codes[i]), pow2[i] = mx_scale_of(codes[i]). Returns
// whether every code has mx_widening_is_product. Call only where mx_contiguous_blocks_available().
bool mx_codes_of(const uint32_t* am, int64_t n, bool e5m2, bool spec, uint8_t* codes, float* inv, float* pow2);

}  // namespace mixtape::amp
