// tests/ops/test_im2col_avx512.cpp — the AVX-512 im2col kernels (ops/cpu/im2col_avx512.h)
// against a scalar im2col written from the definition, f32 and BF16, on the planes of every
// geometry of tests/ops/conv_geometries.h each takes (one image: N and O play no part):
//   - plane-shift: every value in place, zero where the tap falls into the padding or the
//     neighbouring row, and with a row stride ld > L the elements between rows left exactly as
//     they were (conv2d's weight gradient pads col's rows to cache lines). Planes of one partial
//     chunk to many, sizes on and off the 16/32-lane chunks, 1-row planes, row dilation, 1x3 /
//     3x1 / 5x5 kernels;
//   - the row kernel (column stride 1 or 2) likewise: stride 2 with odd and even widths, padding
//     0-2, row strides and dilations, 1x1 shortcuts, output rows longer than a vector;
//   - its col2im adds into a plane holding values (-0.0 among them) in the generic loop's order,
//     bit for bit, pixels nothing reads untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/bfloat16.h"
#include "ops/conv_geometries.h"
#include "ops/cpu/im2col_avx512.h"

namespace mixtape {
namespace {

// The input element row r's column l reads, or -1 for padding.
int64_t source(const cpu::Im2colRows& g, int64_t r, int64_t l) {
  const int64_t c = r / (g.kH * g.kW), ki = r / g.kW % g.kH, kj = r % g.kW;
  const int64_t ih = l / g.OW * g.sH + ki * g.dH - g.pH, iw = l % g.OW * g.sW + kj - g.pW;
  return ih >= 0 && ih < g.H && iw >= 0 && iw < g.W ? (c * g.H + ih) * g.W + iw : -1;
}

// Runs kernel(x, col, ld) on distinct, BF16-exact inputs (never 0: a zero is padding) and checks
// every element of col against source(): the input element, 0 for padding, and each row's gap
// [L, ld) left holding the sentinel.
template <typename E, typename Kernel>
void check_kernel(const cpu::Im2colRows& g, int64_t extra, uint32_t seed, Kernel kernel) {
  const int64_t L = g.OH * g.OW, K = g.C * g.kH * g.kW, ld = L + extra;
  std::mt19937 rng(seed);
  std::vector<E> x(static_cast<size_t>(g.C * g.H * g.W));
  for (size_t i = 0; i < x.size(); ++i) x[i] = E(float(1 + (i * 37 + rng() % 3) % 251));
  const E sentinel = E(-12345.0f);
  std::vector<E> col(static_cast<size_t>(K * ld), sentinel);
  kernel(x.data(), col.data(), ld);
  int64_t bad = 0;
  for (int64_t r = 0; r < K; ++r)
    for (int64_t l = 0; l < ld; ++l) {
      const int64_t src = l < L ? source(g, r, l) : -2;
      const float want = src >= 0 ? float(x[static_cast<size_t>(src)]) : src == -1 ? 0.0f : float(sentinel);
      const float got = float(col[static_cast<size_t>(r * ld + l)]);
      if (got != want && bad++ < 3)
        ADD_FAILURE() << "row " << r << " column " << l << ": got " << got << ", want " << want;
    }
  EXPECT_EQ(bad, 0);
}

using testing::ConvGeometry;
using testing::kConvGeometries;

// The plane of one image of g, as the im2col kernels see it.
cpu::Im2colRows rows_of(const ConvGeometry& g) {
  return {g.C, g.H, g.W, g.OH(), g.OW(), g.kH, g.kW, g.sH, g.sW, g.pH, g.pW, g.dH};
}
// Plane-shift geometry: kW = 2 pW + 1 (so OW = W), unit strides and column dilation (any groups:
// im2col sees the channels of one image).
bool plane_shift(const ConvGeometry& g) {
  return g.sH == 1 && g.sW == 1 && g.dW == 1 && g.kW == 2 * g.pW + 1;
}

template <typename E>
void check(const ConvGeometry& geo, int64_t extra) {
  const cpu::Im2colRows g = rows_of(geo);
  check_kernel<E>(g, extra, 7, [&](const E* x, E* col, int64_t ld) {
    cpu::im2col_plane_shift_avx512(x, g.C, g.H, g.W, g.OH, g.kH, g.kW, g.pH, g.pW, g.dH, col, ld);
  });
}

TEST(Im2colAvx512, EqualsTheDefinitionAndLeavesTheRowGapsAlone) {
  if (!cpu::im2col_avx512_available()) GTEST_SKIP() << "this CPU lacks AVX-512 F/BW";
  int checked = 0;
  for (const ConvGeometry& g : kConvGeometries) {
    if (!plane_shift(g)) continue;
    ++checked;
    for (int64_t extra : {0, 1, 13, 32}) {
      SCOPED_TRACE(std::string(g.what) + " ld = L + " + std::to_string(extra));
      check<float>(g, extra);
      check<BFloat16>(g, extra);
    }
  }
  EXPECT_GE(checked, 30);
}

template <typename E>
void check_rows(const ConvGeometry& geo, int64_t extra) {
  const cpu::Im2colRows g = rows_of(geo);
  check_kernel<E>(g, extra, 8, [&](const E* x, E* col, int64_t ld) { cpu::im2col_rows_avx512(x, g, col, ld); });
}

TEST(Im2colAvx512, RowKernelEqualsTheDefinition) {
  if (!cpu::im2col_avx512_available()) GTEST_SKIP() << "this CPU lacks AVX-512 F/BW";
  int checked = 0;
  for (const ConvGeometry& g : kConvGeometries) {
    if (!cpu::im2col_rows_applies(g.sW, g.dW)) continue;
    ++checked;
    for (int64_t extra : {0, 5}) {
      SCOPED_TRACE(std::string(g.what) + " ld = L + " + std::to_string(extra));
      check_rows<float>(g, extra);
      check_rows<BFloat16>(g, extra);
    }
  }
  EXPECT_GE(checked, 50);
  EXPECT_FALSE(cpu::im2col_rows_applies(3, 1));
  EXPECT_FALSE(cpu::im2col_rows_applies(1, 2));
}

// col2im: x += the columns, each pixel's contributions in row order (r ascending), as the generic
// loop adds them; a plane of mixed values and signed zeros, summands spread over 40 binades, so
// an extra +0 (turning -0.0 into +0.0) or a reordered sum shows in the bits.
TEST(Im2colAvx512, RowCol2imEqualsTheGenericSumsBitForBit) {
  if (!cpu::im2col_avx512_available()) GTEST_SKIP() << "this CPU lacks AVX-512 F/BW";
  for (const ConvGeometry& geo : kConvGeometries) {
    if (!cpu::im2col_rows_applies(geo.sW, geo.dW)) continue;
    SCOPED_TRACE(geo.what);
    const cpu::Im2colRows g = rows_of(geo);
    const int64_t L = g.OH * g.OW, K = g.C * g.kH * g.kW;
    std::mt19937 rng(9);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> col(static_cast<size_t>(K * L)), x(static_cast<size_t>(g.C * g.H * g.W));
    for (float& v : col) v = std::ldexp(nd(rng), std::uniform_int_distribution<int>(-20, 20)(rng));
    for (size_t i = 0; i < x.size(); ++i) x[i] = i % 3 == 0 ? -0.0f : i % 3 == 1 ? 0.0f : nd(rng);
    std::vector<float> want = x;
    for (int64_t r = 0; r < K; ++r)
      for (int64_t l = 0; l < L; ++l)
        if (const int64_t s = source(g, r, l); s >= 0) want[static_cast<size_t>(s)] += col[static_cast<size_t>(r * L + l)];
    cpu::col2im_rows_avx512(col.data(), g, x.data());
    EXPECT_EQ(std::memcmp(x.data(), want.data(), x.size() * sizeof(float)), 0);
  }
}

}  // namespace
}  // namespace mixtape
