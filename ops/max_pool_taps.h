// ops/max_pool_taps.h — what max_pool2d keeps for its backward: per output, the tap of its window
// that won, shared by the CPU (ops/max_pool.cpp) and CUDA (ops/cuda/pooling.cu) kernels.
// A window's taps are numbered over the whole unclipped window, padding included: tap m kW + n
// (m < kH, n < kW) is the input pixel (oh sH - pH + m dH, ow sW - pW + n dW). The winner is the
// forward's (ops/max_pool.cpp's rule): row-major scan, a tap replaces the best so far if greater
// or NaN, so the first of equal maxima wins and NaN propagates (a window with several NaNs: the
// last of them, each NaN tap being taken); padding is never chosen. A window lying wholly in
// padding (only with a dilation that jumps over the input) has no winner: code "none".
// Storage, the TapFormat of the window arguments and the input size (max_pool_tap_format), never
// of the code tensor's shape: the forward and both gradient ops receive all of them, so they agree
// on the format, and a code tensor of another shape or dtype is refused, not reinterpreted.
//   Packed2: windows of at most 4 taps none of which can be empty: 2-bit codes, 4 per byte, packed
//            per output row: UInt8 (N, C, OH, ceil(OW / 4)), column ow's code at byte ow / 4, bits
//            2 (ow % 4) (low bits first), pad bits 0 (never read). A 2x2 pool keeps 1/4 byte per
//            output, 1/64 of its f32 input's bytes. Rows never share a byte, so one thread (or
//            AVX-512 chunk of 16 windows) writes whole bytes.
//   Byte:    other windows of up to 255 taps: UInt8 (N, C, OH, OW), codes 0..254, 255 = none.
//   Int32:   wider windows: Int32 (N, C, OH, OW), -1 = none.
// Invariant: tap_of(position_of(t)) == t for every tap of a window, in every format; the code of
// a window depends only on the window arguments, its storage also on the input's size.
// C++17 and host/device clean.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "core/macros.h"

namespace mixtape {

struct TapWindow {
  int64_t H, W, kH, kW, sH, sW, pH, pW, dH, dW;
};
// The code window of a pooling geometry G (ops/pool_geometry.h's PoolGeom or the CUDA kernels').
template <typename G>
MIXTAPE_HD inline TapWindow tap_window(const G& g) {
  return TapWindow{g.H, g.W, g.kH, g.kW, g.sH, g.sW, g.pH, g.pW, g.dH, g.dW};
}

// Whether one of the `out` windows along a dim of `size` (k taps, stride s, padding p, dilation
// d) has no tap inside [0, size): ops/max_pool.cpp's max_taps with first >= end.
MIXTAPE_HD inline bool max_pool_window_may_be_empty(int64_t out, int64_t size, int64_t k, int64_t s, int64_t p,
                                                    int64_t d) {
  for (int64_t o = 0; o < out; ++o) {
    int64_t lo = o * s - p;
    const int64_t end = lo + (k - 1) * d + 1;
    if (lo < 0) lo += (-lo + d - 1) / d * d;  // first tap inside the input
    if (lo >= end || lo >= size) return true;
  }
  return false;
}

enum class TapFormat { Packed2, Byte, Int32 };

template <typename G>
inline TapFormat max_pool_tap_format(const G& g) {
  if (g.kH * g.kW <= 4 && !max_pool_window_may_be_empty(g.OH, g.H, g.kH, g.sH, g.pH, g.dH) &&
      !max_pool_window_may_be_empty(g.OW, g.W, g.kW, g.sW, g.pW, g.dW))
    return TapFormat::Packed2;
  return g.kH * g.kW <= 255 ? TapFormat::Byte : TapFormat::Int32;
}
inline DType tap_format_dtype(TapFormat f) { return f == TapFormat::Int32 ? DType::Int32 : DType::UInt8; }
// Bytes of one output row of 2-bit codes.
MIXTAPE_HD inline int64_t packed_tap_bytes(int64_t OW) { return (OW + 3) / 4; }
// The last dim of the code tensor (N, C, OH, row).
inline int64_t tap_row_length(TapFormat f, int64_t OW) { return f == TapFormat::Packed2 ? packed_tap_bytes(OW) : OW; }

// The tap code of flat plane position `best` (h W + w) in window (oh, ow); best < 0: no winner.
template <typename C>
MIXTAPE_HD inline C tap_of(const TapWindow& g, int64_t oh, int64_t ow, int64_t best) {
  if (best < 0) return static_cast<C>(~C(0));
  const int64_t h = best / g.W, w = best - h * g.W;
  return static_cast<C>((h - (oh * g.sH - g.pH)) / g.dH * g.kW + (w - (ow * g.sW - g.pW)) / g.dW);
}
// The flat plane position of tap code `t` of window (oh, ow); -1 for no winner.
template <typename C>
MIXTAPE_HD inline int64_t position_of(const TapWindow& g, int64_t oh, int64_t ow, C t) {
  if (t == static_cast<C>(~C(0))) return -1;
  const int64_t code = static_cast<int64_t>(t), m = code / g.kW, n = code - m * g.kW;
  return (oh * g.sH - g.pH + m * g.dH) * g.W + (ow * g.sW - g.pW + n * g.dW);
}

// position_of for codes not known to come from max_pool2d (the gradient ops' input): -1 for no
// winner, -2 for a code that is no tap of the window inside the plane.
template <typename C>
MIXTAPE_HD inline int64_t checked_position_of(const TapWindow& g, int64_t oh, int64_t ow, C t) {
  if (t == static_cast<C>(~C(0))) return -1;
  const int64_t code = static_cast<int64_t>(t);
  if (code < 0 || code >= g.kH * g.kW) return -2;
  const int64_t m = code / g.kW, n = code - m * g.kW;
  const int64_t h = oh * g.sH - g.pH + m * g.dH, w = ow * g.sW - g.pW + n * g.dW;
  return h < 0 || h >= g.H || w < 0 || w >= g.W ? -2 : h * g.W + w;
}

// Readers of a code tensor (planes, OH, row): code(plane, oh, ow) in the storage's own type, so
// position_of sees "none" as the storage's all-ones value (a 2-bit code, as int, is never -1).
template <typename C>
struct TapCodes {
  const C* p;
  int64_t OH, OW;
  MIXTAPE_HD C operator()(int64_t plane, int64_t oh, int64_t ow) const { return p[(plane * OH + oh) * OW + ow]; }
};
struct PackedTapCodes {
  const uint8_t* p;
  int64_t OH, row;  // row = packed_tap_bytes(OW)
  MIXTAPE_HD int operator()(int64_t plane, int64_t oh, int64_t ow) const {
    return (p[(plane * OH + oh) * row + (ow >> 2)] >> (2 * (ow & 3))) & 3;
  }
};

}  // namespace mixtape
