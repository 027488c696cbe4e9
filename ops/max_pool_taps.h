// ops/max_pool_taps.h — what max_pool2d keeps for its backward: per output, the tap of its window
// that won, shared by the CPU (ops/max_pool.cpp) and CUDA (ops/cuda/pooling.cu) kernels.
// A window's taps are numbered over the whole unclipped window, padding included: tap m kW + n
// (m < kH, n < kW) is the input pixel (oh sH - pH + m dH, ow sW - pW + n dW). The winner is the
// forward's (ops/max_pool.cpp's rule): row-major scan, a tap replaces the best so far if greater
// or NaN, so the first of equal maxima wins and NaN propagates (a window with several NaNs: the
// last of them, each NaN tap being taken); padding is never chosen. A window
// lying wholly in padding has no winner: the code with every bit set (255, or -1), no gradient.
// Storage: UInt8 when kH kW <= 255 (codes 0..254, 255 = none: 1 byte per output, 1/8 of
// PyTorch's Int64 index), Int32 for wider windows (-1 = none).
// Invariant: tap_of(position_of(t)) == t for every tap of a window; the codes do not depend on
// the input's size, only on the window arguments. C++17 and host/device clean.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "core/macros.h"

namespace mixtape {

struct TapWindow {
  int64_t W, kW, sH, sW, pH, pW, dH, dW;
};

// The code dtype of a window of kH x kW taps.
inline DType max_pool_tap_dtype(int64_t kH, int64_t kW) { return kH * kW <= 255 ? DType::UInt8 : DType::Int32; }

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

}  // namespace mixtape
