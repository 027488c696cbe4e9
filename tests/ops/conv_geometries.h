// tests/ops/conv_geometries.h — the one list of conv2d geometries every CPU conv kernel test
// draws from: the models' layers (SmallCNN, LeNet, ResNet-8/20), each kernel's blocking edges
// (vectors of channels, pixel blocks, depth slices, image chunks, panels), odd sizes, strides,
// padding, dilation, groups, and the planes the im2col kernels cut into chunks.
// tests/ops/test_kernel_entries.cpp runs every CPU kernel entry on every geometry here that the
// entry takes; the kernel files' own tests (bits, specials, thread counts, helpers) iterate it too,
// filtered by what they test. A geometry a kernel needs goes here, never into its test file (the
// thread-count tests' team-sized shapes excepted: no row is that big).
// Invariant: every row is a valid conv2d (the kernel within the padded input), and as small as
// the edge it names allows (the tests run every row, most at several ISA levels and dtypes).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "core/shape.h"
#include "ops/cpu/conv_shape.h"

namespace mixtape::testing {

struct ConvGeometry {
  const char* what;
  int64_t N, C, H, W, O, kH, kW, sH, sW, pH, pW, dH, dW, G;
  bool bias = false;  // the forward adds one
  int64_t OH() const { return (H + 2 * pH - dH * (kH - 1) - 1) / sH + 1; }
  int64_t OW() const { return (W + 2 * pW - dW * (kW - 1) - 1) / sW + 1; }
  IntList x_size() const { return {N, C, H, W}; }
  IntList w_size() const { return {O, C / G, kH, kW}; }
  IntList y_size() const { return {N, O, OH(), OW()}; }
  IntList stride() const { return {sH, sW}; }
  IntList padding() const { return {pH, pW}; }
  IntList dilation() const { return {dH, dW}; }
  // The direct kernels' shape (ops/cpu/conv_shape.h; they take one group).
  cpu::ConvShape shape() const { return {N, C, H, W, O, kH, kW, sH, sW, pH, pW, dH, dW, OH(), OW()}; }
  // Unit strides and column dilation with OW == W, one group: the implicit GEMM's geometry and
  // the plane-shift im2col's.
  bool plane_shift() const { return sH == 1 && sW == 1 && dW == 1 && OW() == W && G == 1; }
};

// clang-format off
inline constexpr ConvGeometry kConvGeometries[] = {
    // The models' layers.
    {"SmallCNN conv1", 2, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {"SmallCNN conv2 (N 4)", 4, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {"LeNet conv1", 2, 1, 28, 28, 6, 5, 5, 1, 1, 2, 2, 1, 1, 1},
    {"LeNet conv2", 2, 6, 14, 14, 16, 5, 5, 1, 1, 0, 0, 1, 1, 1},
    {"ResNet-8 layer1 (28x28)", 2, 16, 28, 28, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {"ResNet-8/20 stride-2 3x3", 2, 16, 28, 28, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1},
    {"ResNet-8/20 1x1 stride-2 shortcut", 2, 16, 28, 28, 32, 1, 1, 2, 2, 0, 0, 1, 1, 1},
    {"ResNet-20 layer3 (8x8, 64)", 2, 64, 8, 8, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {"ResNet-8 layer3 (7x7)", 2, 64, 7, 7, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {"ResNet-8 stride 2 onto 7x7: four vectors of O, pixel blocks of 4 and 3", 2, 32, 14, 14, 64, 3, 3, 2, 2, 1, 1, 1, 1, 1, true},
    // Odd sizes, strides, dilation, groups.
    {"row of 15 (a block short), O 17", 1, 3, 5, 15, 17, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {"row of 17, O 33", 1, 5, 4, 17, 33, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {"odd 7x9, no padding, O 1", 3, 3, 7, 9, 1, 3, 3, 1, 1, 0, 0, 1, 1, 1},
    {"column stride 2 only", 1, 4, 6, 13, 6, 3, 3, 1, 2, 1, 1, 1, 1, 1},
    {"row stride 3, padding past the reach", 2, 4, 10, 12, 8, 3, 3, 3, 1, 2, 2, 1, 1, 1},
    {"row dilation 2", 1, 4, 9, 10, 4, 3, 3, 1, 1, 2, 1, 2, 1, 1},
    {"dilation 2x2", 1, 3, 9, 9, 4, 3, 3, 1, 1, 2, 2, 2, 2, 1},
    {"groups 2", 2, 4, 8, 8, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2},
    {"groups 2, stride 2", 2, 4, 9, 8, 6, 3, 3, 2, 2, 1, 1, 1, 1, 2},
    {"depthwise", 1, 4, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 4},
    {"1x1, stride 1", 2, 8, 5, 5, 12, 1, 1, 1, 1, 0, 0, 1, 1, 1},
    {"5x3 kernel", 1, 3, 8, 8, 4, 5, 3, 1, 1, 2, 1, 1, 1, 1},
    {"3x5 kernel", 2, 4, 9, 8, 16, 3, 5, 1, 1, 1, 2, 1, 1, 1},
    {"H 1: two of three kernel rows read padding", 2, 3, 1, 3, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {"H 1, O 64", 2, 3, 1, 3, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    // The direct kernels' edges (3 columns wide): vectors of O (1, 2, 4, O % 16 != 0), pixel blocks
    // of every length the row split makes, depth slices, C odd (BF16 channel pairs).
    {"O 17: a second vector of one channel; C 5 (three pairs, the last half empty)", 3, 5, 9, 11, 17, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {"O 40: one-vector blocks; C 3; 49-pixel rows (blocks of 17 and 15)", 1, 3, 13, 49, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {"O 80; row stride 3, row dilation 2, column stride 2, pW past the reach", 2, 4, 10, 25, 80, 3, 3, 3, 2, 0, 2, 2, 1, 1},
    {"5 rows, column stride 2: 20-pixel rows", 2, 6, 5, 40, 8, 5, 3, 1, 2, 2, 1, 1, 1, 1, true},
    {"1x3 kernel, O 64", 2, 8, 6, 11, 64, 1, 3, 1, 1, 0, 1, 1, 1, 1},
    {"no padding: 1-pixel rows, O 5", 2, 4, 6, 3, 5, 3, 3, 1, 1, 0, 0, 1, 1, 1, true},
    {"one channel (one pair, its high half zero), O 3", 1, 1, 7, 13, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {"C 40, four vectors of O: six depth slices of 7 channels", 2, 40, 5, 9, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {"C 80, four vectors of O: 40 pairs in several depth slices", 2, 80, 5, 9, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    // The input gradient's: vectors of C, stride 2, unread input rows and columns, O odd and 1.
    {"C 64 (two two-vector blocks), stride 2, O 8", 2, 64, 9, 9, 8, 3, 3, 2, 2, 1, 1, 1, 1, 1},
    {"C 17: a second vector of one channel; O 5", 3, 17, 9, 11, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {"C 40: one-vector blocks; column stride 2: 25-pixel rows", 1, 40, 8, 49, 6, 3, 3, 1, 2, 1, 1, 1, 1, 1},
    {"row stride 3, dilation 2, pW past the reach; unread rows and columns; O 7", 2, 4, 10, 26, 7, 3, 3, 3, 2, 0, 2, 2, 1, 1},
    {"1x3 kernel, row stride 2", 2, 8, 6, 11, 12, 1, 3, 2, 1, 0, 1, 1, 1, 1},
    {"stride 2, no padding: 1-pixel rows; the last row and column unread", 2, 4, 7, 4, 5, 3, 3, 2, 2, 0, 0, 1, 1, 1},
    {"O 1, stride 2: one pair, its high half zero", 2, 5, 9, 9, 1, 3, 3, 2, 2, 1, 1, 1, 1, 1},
    // The weight gradient's: pair blocks, image chunks (and pairs), padded rows over 16 columns.
    {"ResNet-8 layer1, N 3: the last image paired with zeros", 3, 16, 28, 28, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {"stride 2, O 32 (two vectors)", 2, 16, 12, 12, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1},
    {"O 64 on 7x7 planes (49 pixels: a ragged 16-pixel transpose)", 2, 8, 7, 7, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {"O 48 (three one-vector blocks), row stride 2, dH 2, pW past the reach", 2, 6, 10, 9, 48, 3, 3, 2, 1, 0, 2, 2, 1, 1},
    {"N 1, 5 rows, column stride 2: padded rows of 41 columns (3 chunks)", 1, 6, 5, 40, 8, 5, 3, 1, 2, 2, 1, 1, 1, 1},
    {"N 7 at 20x20: image chunks of 3, 3 and 1", 7, 64, 20, 20, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {"N 7 at 28x28: staged chunks of one pair (2, 2, 2, 1)", 7, 64, 28, 28, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {"no padding, O 40", 3, 4, 6, 6, 40, 3, 3, 1, 1, 0, 0, 1, 1, 1},
    {"one channel, N 20: one short block, chunks of 9, 9 and 2", 20, 1, 28, 28, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {"one channel, N 41: chunks of 18, 18 and 5", 41, 1, 28, 28, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    // The BF16 GEMM paths' (native against emulated, every pass; im2col's plane-shift kernel
    // against its row kernel): batches for the batch threads, O <= C, odd K, a 3x2 kernel,
    // dilation with groups, 1x1 (no col).
    {"SmallCNN conv2, N 16", 16, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {"ResNet-style 32 -> 32 at 14x14, N 8", 8, 32, 14, 14, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {"3x2 kernel, row stride 2, padding past the reach", 3, 5, 9, 8, 7, 3, 2, 2, 1, 1, 2, 1, 1, 1, true},
    {"dilation 2x3, groups 3", 2, 6, 11, 11, 9, 3, 3, 1, 1, 2, 1, 2, 3, 3, true},
    {"1x1, C 40 -> O 33", 4, 40, 6, 6, 33, 1, 1, 1, 1, 0, 0, 1, 1, 1, true},
    {"one channel -> 32, N 8", 8, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {"6x7 'same', C 3", 2, 3, 6, 7, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {"7x5, row dilation 2", 1, 2, 7, 5, 3, 3, 3, 1, 1, 2, 1, 2, 1, 1},
    {"5x5 'same', groups 2", 2, 4, 5, 9, 6, 5, 5, 1, 1, 2, 2, 1, 1, 2},
    {"no row padding, 9x10", 1, 2, 9, 10, 3, 3, 3, 1, 1, 0, 1, 1, 1, 1},
    {"14x14 'same', C 5", 2, 5, 14, 14, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {"28x28 'same', C 3", 1, 3, 28, 28, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    // The implicit GEMM's ("same", unit strides): tiles of 8 outputs and 32 pixels, panels
    // spanning images, depth slices (FP32 256, BF16 512), odd depth, AMX's 16-row blocks.
    {"tiny: O < 8, one panel spans both images", 2, 3, 5, 6, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {"K 9 (odd), O 9: a second, nearly empty A panel", 3, 1, 28, 28, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {"49 pixels: panels straddle images; K 153 (odd), O 33", 2, 17, 7, 7, 33, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {"K 360: two FP32 depth slices", 1, 40, 6, 9, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {"K 549 (odd): two BF16 depth slices", 2, 61, 4, 5, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {"H 1, N 5: only the middle kernel row reads the image", 5, 2, 1, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {"5x5 'same'", 2, 4, 9, 8, 7, 5, 5, 1, 1, 2, 2, 1, 1, 1, true},
    {"3x1, row dilation 2", 2, 3, 8, 7, 4, 3, 1, 1, 1, 1, 0, 2, 1, 1},
    {"1x3 'same', O 6", 2, 5, 6, 11, 6, 1, 3, 1, 1, 0, 1, 1, 1, 1, true},
    {"row dilation 3 with padding 3", 2, 3, 9, 6, 5, 3, 3, 1, 1, 3, 1, 3, 1, 1},
    {"O 17: AMX's full block with one row past 16", 2, 5, 6, 7, 17, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {"O 31", 2, 9, 5, 5, 31, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    // The im2col kernels' planes (16 FP32 / 32 BF16 columns a chunk; rows split into chunks).
    {"L 20: one partial chunk", 1, 2, 4, 5, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {"L 32: exactly one BF16 chunk, two FP32 ones", 1, 2, 4, 8, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {"one row of 9", 1, 2, 1, 9, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {"1x1 stride-2 shortcut at 14x14", 1, 2, 14, 14, 4, 1, 1, 2, 2, 0, 0, 1, 1, 1},
    {"odd 9x7, stride 2", 1, 2, 9, 7, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1},
    {"row dilation 2, padding 2, column stride 2", 1, 2, 8, 9, 3, 3, 3, 1, 2, 2, 2, 2, 1, 1},
    {"OW 35: rows of several chunks; row stride 3", 1, 1, 5, 70, 2, 3, 3, 3, 2, 1, 1, 1, 1, 1},
    {"'valid' 7x8: stride 1, OW != W", 1, 2, 7, 8, 3, 3, 3, 1, 1, 0, 0, 1, 1, 1},
    {"2x5 kernel, OW 36", 1, 2, 6, 40, 3, 2, 5, 1, 1, 1, 0, 1, 1, 1},
    {"padding 2 on a 3-wide kernel: OW = W + 2", 1, 2, 5, 6, 3, 3, 3, 1, 1, 2, 2, 1, 1, 1},
    {"padding as large as the image", 1, 1, 3, 3, 2, 3, 3, 2, 2, 2, 2, 1, 1, 1},
    {"OW 8, stride 2: FP32's paired rows fill a vector", 1, 2, 16, 16, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1},
    {"OW 16, stride 2: BF16's paired rows fill one", 1, 2, 32, 32, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1},
    {"OW 20, stride 2", 1, 1, 6, 40, 2, 3, 3, 2, 2, 1, 1, 1, 1, 1},
    {"H 1, column stride 2", 1, 2, 1, 9, 3, 3, 3, 1, 2, 1, 1, 1, 1, 1},
    {"W 1, stride 2", 1, 2, 7, 1, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1},
    {"1x1 kernel with padding beyond its reach", 1, 2, 5, 6, 3, 1, 1, 2, 2, 1, 1, 1, 1, 1},
};
// clang-format on

// The geometry named `what` (a test that needs one particular layer).
inline const ConvGeometry& conv_geometry(std::string_view what) {
  for (const ConvGeometry& g : kConvGeometries)
    if (what == g.what) return g;
  throw std::invalid_argument("tests/ops/conv_geometries.h has no geometry named " + std::string(what));
}

}  // namespace mixtape::testing
