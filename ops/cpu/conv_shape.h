// ops/cpu/conv_shape.h — the geometry and rules shared by the direct (no im2col) convolution
// kernels on AVX-512 (ops/cpu/conv_direct_avx512.h, conv_input_grad_avx512.h,
// conv_weight_grad_avx512.h): a conv2d's sizes, the zero-padded input plane they read
// (PaddedPlanes: exactly the rows and columns the taps touch), how an output row is cut into
// register blocks, and how many threads a call gets. The kernels take kernels 3 columns wide with
// unit column dilation and one group.
// Internal: ops/conv.cpp and those kernels.
#pragma once
#include <omp.h>

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

// Whether s is a geometry the padded-plane kernels take: kW == 3, dW == 1, sizes positive, the
// kernel within the padded input, OH and OW conv2d's (so every tap reads inside the padded plane),
// a padded row at most kMaxPaddedWidth columns.
inline bool padded_geometry_ok(const ConvShape& s) {
  const int64_t rows = s.H + 2 * s.pH - s.dH * (s.kH - 1), cols = s.W + 2 * s.pW - kPaddedTaps + 1;
  return s.N > 0 && s.C > 0 && s.O > 0 && s.H > 0 && s.W > 0 && s.kH > 0 && s.kW == kPaddedTaps && s.dW == 1 &&
         s.sH > 0 && s.sW > 0 && s.dH > 0 && s.pH >= 0 && s.pW >= 0 && rows > 0 && cols > 0 &&
         s.OH == (rows - 1) / s.sH + 1 && s.OW == (cols - 1) / s.sW + 1 &&
         PaddedPlanes::of(s).Wp <= kMaxPaddedWidth;
}

// An output row of OW pixels cut into `count` register blocks of at most `most` pixels, as equal as
// can be: the first count - 1 hold `size`, the last `last` (1 <= last <= size).
struct RowBlocks {
  int64_t count;
  int size, last;
  static RowBlocks of(int64_t OW, int64_t most) {
    const int64_t count = (OW + most - 1) / most, size = (OW + count - 1) / count;
    return {count, static_cast<int>(size), static_cast<int>(OW - (count - 1) * size)};
  }
};

// Threads for a call of `macs` multiply-adds split into `units` independent pieces: one inside a
// parallel region or below 2^21 multiply-adds (as the implicit-GEMM conv), else OpenMP's count, at
// most `units`.
inline int padded_kernel_threads(int64_t macs, int64_t units) {
  if (omp_in_parallel() || macs < (int64_t(1) << 21)) return 1;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(omp_get_max_threads(), units)));
}

}  // namespace mixtape::cpu
