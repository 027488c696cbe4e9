// ops/cpu/conv_shape.h — the geometry shared by the direct (no im2col) convolution kernels on
// AVX-512 (ops/cpu/conv_direct_avx512.h, conv_input_grad_avx512.h, conv_weight_grad_avx512.h):
// a conv2d's sizes, and
// the zero-padded input plane they read (PaddedPlanes: exactly the rows and columns the taps
// touch). The kernels take kernels 3 columns wide with unit column dilation and one group.
// Internal: ops/conv.cpp and those kernels.
#pragma once
#include <algorithm>
#include <cstdint>

namespace mixtape::cpu {

// x (N, C, H, W), w (O, C, kH, kW), y (N, O, OH, OW) with OH = (H + 2 pH - dH (kH - 1) - 1) / sH + 1
// and OW likewise (the caller's geometry); one group.
struct ConvShape {
  int64_t N, C, H, W, O, kH, kW, sH, sW, pH, pW, dH, dW, OH, OW;
};

constexpr int kPaddedTaps = 3;                // the kernels' width: every tap is a column offset 0..2
constexpr int64_t kMaxPaddedWidth = 1024;     // stage_padded's masks: 64 chunks of 16 columns

struct PaddedPlanes {
  int64_t C, H, W, pH, pW;
  int64_t Hp, Wp;  // rows (OH - 1) sH + (kH - 1) dH + 1 and columns (OW - 1) sW + 3: what the taps read
  int64_t plane() const { return Hp * Wp; }
  int64_t image() const { return C * Hp * Wp; }
  static PaddedPlanes of(const ConvShape& s) {
    return {s.C, s.H, s.W, s.pH, s.pW, (s.OH - 1) * s.sH + (s.kH - 1) * s.dH + 1, (s.OW - 1) * s.sW + kPaddedTaps};
  }
};

// Whether s is a geometry the padded-plane kernels take: kW == 3, dW == 1, sizes positive, OH and
// OW conv2d's, the taps within the padded input, a padded row at most kMaxPaddedWidth columns.
inline bool padded_geometry_ok(const ConvShape& s) {
  return s.N > 0 && s.C > 0 && s.O > 0 && s.kH > 0 && s.kW == kPaddedTaps && s.dW == 1 && s.sH > 0 && s.sW > 0 &&
         s.dH > 0 && s.pH >= 0 && s.pW >= 0 && s.OH > 0 && s.OW > 0 && s.H > 0 && s.W > 0 &&
         s.H + 2 * s.pH - s.dH * (s.kH - 1) > 0 && s.W + 2 * s.pW - kPaddedTaps >= 0 &&
         s.OH == (s.H + 2 * s.pH - s.dH * (s.kH - 1) - 1) / s.sH + 1 &&
         s.OW == (s.W + 2 * s.pW - kPaddedTaps) / s.sW + 1 &&
         (s.OH - 1) * s.sH + (s.kH - 1) * s.dH < s.H + 2 * s.pH &&
         (s.OW - 1) * s.sW + kPaddedTaps <= std::min(s.W + 2 * s.pW, kMaxPaddedWidth);
}

}  // namespace mixtape::cpu
