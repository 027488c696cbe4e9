// amp/fp8_im2col.cpp — see amp/fp8_im2col.h.
#include "amp/fp8_im2col.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "amp/fp8_scaling.h"
#include "core/error.h"
#include "ops/cpu/im2col_avx512.h"
#include "ops/cpu/loops.h"
#include "ops/creation.h"

namespace mixtape::amp {

namespace {

// conv2d's im2col: x (N, C, H, W) contiguous -> (N OH OW, C kH kW) of dtype `dt`, each value
// convert(x value), zero (Out{}) where the window leaves the padded image.
template <typename In, typename Out, typename Convert>
Tensor im2col(const Tensor& x, const ConvGeom& g, DType dt, Convert convert) {
  Tensor out = Tensor::empty({g.N * g.L(), g.K()}, TensorOptions(dt));
  const In* src = static_cast<const In*>(x.data_ptr());
  Out* dst = static_cast<Out*>(out.data_ptr());
#pragma omp parallel for collapse(2) if (g.N * g.L() * g.K() >= cpu::kParallelGrain) schedule(static)
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        Out* row = dst + ((n * g.OH + oh) * g.OW + ow) * g.K();
        const int64_t w0 = ow * g.sW - g.pW;
        // The kernel columns j whose image column w0 + j dW lies inside [0, W): [jlo, jhi).
        int64_t jlo = 0, jhi = g.kW;
        while (jlo < jhi && w0 + jlo * g.dW < 0) ++jlo;
        while (jhi > jlo && w0 + (jhi - 1) * g.dW >= g.W) --jhi;
        for (int64_t c = 0; c < g.C; ++c)
          for (int64_t i = 0; i < g.kH; ++i, row += g.kW) {
            const int64_t h = oh * g.sH - g.pH + i * g.dH;
            if (h < 0 || h >= g.H) {
              std::fill(row, row + g.kW, Out{});
              continue;
            }
            const int64_t line = ((n * g.C + c) * g.H + h) * g.W + w0;  // may be < 0; indexed only in bounds
            for (int64_t j = 0; j < jlo; ++j) row[j] = Out{};
            for (int64_t j = jlo; j < jhi; ++j) row[j] = convert(src[line + j * g.dW]);
            for (int64_t j = jhi; j < g.kW; ++j) row[j] = Out{};
          }
      }
  return out;
}

}  // namespace

Tensor im2col_f32(const Tensor& x, const ConvGeom& g) {
  return im2col<float, float>(x, g, DType::Float32, [](float v) { return v; });
}

Tensor im2col_bf16(const Tensor& x, const ConvGeom& g) {
  return im2col<BFloat16, BFloat16>(x, g, DType::BFloat16, [](BFloat16 v) { return v; });
}

Tensor im2col_fp8_to_bf16(const Tensor& x, const ConvGeom& g) {
  const std::array<BFloat16, 256> table = fp8_to_bf16_table(x.dtype());
  return im2col<uint8_t, BFloat16>(x, g, DType::BFloat16, [&](uint8_t b) { return table[b]; });
}

Tensor im2col_fp8_to_bf16_transposed(const Tensor& x, const ConvGeom& g) {
  if (!(g.sH == 1 && g.sW == 1 && g.dW == 1 && g.OW == g.W && g.pH >= 0 && g.pW >= 0) ||
      !cpu::im2col_avx512_available())
    return {};
  // The image widened first (N C H W values, a ninth of the matrix for a 3x3 kernel), then copied.
  const std::array<BFloat16, 256> table = fp8_to_bf16_table(x.dtype());
  Tensor xb = Tensor::empty(x.sizes(), TensorOptions(DType::BFloat16));
  const uint8_t* src = static_cast<const uint8_t*>(x.data_ptr());
  BFloat16* wide = xb.data_ptr<BFloat16>();
  const int64_t numel = x.numel();
#pragma omp parallel for if (numel >= cpu::kParallelGrain) schedule(static)
  for (int64_t i = 0; i < numel; ++i) wide[i] = table[src[i]];
  const int64_t m = g.N * g.L(), plane = g.C * g.H * g.W;
  Tensor out = Tensor::empty({g.K(), m}, TensorOptions(DType::BFloat16));
  BFloat16* dst = out.data_ptr<BFloat16>();
  // Image n fills columns [n L, (n + 1) L) of every row: rows m apart.
#pragma omp parallel for if (m * g.K() >= cpu::kParallelGrain) schedule(static)
  for (int64_t n = 0; n < g.N; ++n)
    cpu::im2col_plane_shift_avx512(wide + n * plane, g.C, g.H, g.W, g.OH, g.kH, g.kW, g.pH, g.pW, g.dH,
                                   dst + n * g.L(), m);
  return out;
}

namespace {
template <typename T>
void im2col_transposed_into(const T* src, const ConvGeom& g, bool plane_shift, T* dst) {
  const int64_t m = g.N * g.L(), plane = g.C * g.H * g.W;
  const cpu::Im2colRows rows{g.C, g.H, g.W, g.OH, g.OW, g.kH, g.kW, g.sH, g.sW, g.pH, g.pW, g.dH};
  // Image n fills columns [n L, (n + 1) L) of every row: rows m apart.
#pragma omp parallel for if (m * g.K() >= cpu::kParallelGrain) schedule(static)
  for (int64_t n = 0; n < g.N; ++n) {
    if (plane_shift)
      cpu::im2col_plane_shift_avx512(src + n * plane, g.C, g.H, g.W, g.OH, g.kH, g.kW, g.pH, g.pW, g.dH,
                                     dst + n * g.L(), m);
    else
      cpu::im2col_rows_avx512(src + n * plane, rows, dst + n * g.L(), m);
  }
}
}  // namespace

Tensor im2col_transposed(const Tensor& x, const ConvGeom& g) {
  const bool plane_shift = g.sH == 1 && g.sW == 1 && g.dW == 1 && g.OW == g.W && g.pH >= 0 && g.pW >= 0;
  if (!cpu::im2col_avx512_available() || !(plane_shift || cpu::im2col_rows_applies(g.sW, g.dW)) || g.pH < 0 ||
      g.pW < 0 || !(x.dtype() == DType::Float32 || x.dtype() == DType::BFloat16) || !x.is_contiguous())
    return {};
  Tensor out = Tensor::empty({g.K(), g.N * g.L()}, TensorOptions(x.dtype()));
  if (out.numel() == 0) return out;
  if (x.dtype() == DType::Float32) im2col_transposed_into(x.data_ptr<float>(), g, plane_shift, out.data_ptr<float>());
  else im2col_transposed_into(x.data_ptr<BFloat16>(), g, plane_shift, out.data_ptr<BFloat16>());
  return out;
}

Tensor channels_major(const Tensor& y) {
  MT_CHECK(y.dim() == 4 && y.is_contiguous(), "channels_major: expected a contiguous 4-D tensor, got ", y.describe());
  const int64_t N = y.size(0), O = y.size(1), L = y.size(2) * y.size(3);
  Tensor out = Tensor::empty({O, N * L}, TensorOptions(y.dtype()));
  const size_t es = element_size(y.dtype()), row = static_cast<size_t>(L) * es;
  const char* src = static_cast<const char*>(y.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
#pragma omp parallel for collapse(2) if (y.numel() >= cpu::kParallelGrain) schedule(static)
  for (int64_t o = 0; o < O; ++o)
    for (int64_t n = 0; n < N; ++n)
      if (row != 0) std::memcpy(dst + static_cast<size_t>(o * N + n) * row, src + static_cast<size_t>(n * O + o) * row, row);
  return out;
}

// Each (image, channel) plane is summed by one thread in a fixed order.
Tensor col2im(const Tensor& cols, const ConvGeom& g) {
  Tensor out = zeros({g.N, g.C, g.H, g.W});
  const float* src = cols.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  const int64_t kk = g.kH * g.kW;
  if (g.sH == 1 && g.sW == 1) {
    // Unit strides: pixel (h, w) gets the taps (i, j) with window (h + pH - i dH, w + pW - j dW).
    // The scatter's order, windows (oh, ow) ascending, is (i, j) descending here, so each pixel
    // sums the same values in the same order; but a row of pixels takes one tap at a time, adds
    // that do not wait on each other (the scatter's overlapping windows chain theirs).
#pragma omp parallel for collapse(2) if (g.N * g.L() * g.K() >= cpu::kParallelGrain) schedule(static)
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t c = 0; c < g.C; ++c)
        for (int64_t h = 0; h < g.H; ++h) {
          float* line = dst + ((n * g.C + c) * g.H + h) * g.W;
          for (int64_t i = g.kH - 1; i >= 0; --i) {
            const int64_t oh = h + g.pH - i * g.dH;
            if (oh < 0 || oh >= g.OH) continue;
            for (int64_t j = g.kW - 1; j >= 0; --j) {
              const int64_t shift = g.pW - j * g.dW;  // ow = w + shift
              const int64_t w0 = std::max<int64_t>(0, -shift), w1 = std::min(g.W, g.OW - shift);
              const float* tap = src + (n * g.OH + oh) * g.OW * g.K() + c * kk + i * g.kW + j;
              for (int64_t w = w0; w < w1; ++w) line[w] += tap[(w + shift) * g.K()];
            }
          }
        }
    return out;
  }
#pragma omp parallel for collapse(2) if (g.N * g.L() * g.K() >= cpu::kParallelGrain) schedule(static)
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t c = 0; c < g.C; ++c) {
      float* plane = dst + (n * g.C + c) * g.H * g.W;
      for (int64_t oh = 0; oh < g.OH; ++oh)
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          const float* row = src + ((n * g.OH + oh) * g.OW + ow) * g.K() + c * kk;
          // The in-image kernel columns [jlo, jhi), found once per window (as im2col does); the
          // sums keep their order (i, then j), so the bits do not change.
          const int64_t w0 = ow * g.sW - g.pW;
          int64_t jlo = 0, jhi = g.kW;
          while (jlo < jhi && w0 + jlo * g.dW < 0) ++jlo;
          while (jhi > jlo && w0 + (jhi - 1) * g.dW >= g.W) --jhi;
          for (int64_t i = 0; i < g.kH; ++i) {
            const int64_t h = oh * g.sH - g.pH + i * g.dH;
            if (h < 0 || h >= g.H) continue;
            const int64_t line = h * g.W + w0;  // may be < 0; indexed only at in-image columns
            const float* r = row + i * g.kW;
            for (int64_t j = jlo; j < jhi; ++j) plane[line + j * g.dW] += r[j];
          }
        }
    }
  return out;
}

}  // namespace mixtape::amp
