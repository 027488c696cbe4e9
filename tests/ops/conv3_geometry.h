// tests/ops/conv3_geometry.h — a conv2d geometry with a kernel 3 columns wide and unit column
// dilation (the direct AVX-512 kernels' family: ops/cpu/conv_shape.h), for their tests: the sizes,
// the output size conv2d computes, the kernels' ConvShape and the op's arguments.
#pragma once
#include <cstdint>

#include "core/shape.h"
#include "ops/cpu/conv_shape.h"

namespace mixtape::testing {

struct Conv3 {
  int64_t N, C, H, W, O, kH, sH, sW, pH, pW, dH;
  bool bias;
  const char* what;
  int64_t OH() const { return (H + 2 * pH - dH * (kH - 1) - 1) / sH + 1; }
  int64_t OW() const { return (W + 2 * pW - 3) / sW + 1; }
  cpu::ConvShape shape() const { return {N, C, H, W, O, kH, 3, sH, sW, pH, pW, dH, 1, OH(), OW()}; }
  IntList x_size() const { return {N, C, H, W}; }
  IntList w_size() const { return {O, C, kH, 3}; }
  IntList y_size() const { return {N, O, OH(), OW()}; }
  IntList stride() const { return {sH, sW}; }
  IntList padding() const { return {pH, pW}; }
  IntList dilation() const { return {dH, 1}; }
};

}  // namespace mixtape::testing
