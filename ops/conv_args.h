// ops/conv_args.h — conv2d's attributes, geometry and argument checks, shared by the CPU kernels
// (ops/conv.cpp, where they are defined) and the cuDNN glue (ops/cuda/conv_cudnn.cpp), so both
// backends accept the same shapes, size the same outputs and fail with the same messages; each
// adds its own int-range check (BLAS, cuDNN). Internal: not part of the public API.
#pragma once
#include <cstdint>

#include "core/dispatcher.h"
#include "core/tensor.h"
#include "ops/shown.h"

namespace mixtape {

// x (N, C, H, W) cross-correlated with w (O, C/G, kH, kW) to (N, O, OH, OW).
struct ConvGeom {
  int64_t N, C, H, W;  // input
  int64_t O, kH, kW;   // weight (O, C/G, kH, kW)
  int64_t sH, sW, pH, pW, dH, dW, G;
  int64_t OH, OW;      // output
  int64_t Og() const { return O / G; }
  int64_t K() const { return C * kH * kW; }
  int64_t Kg() const { return K() / G; }
  int64_t L() const { return OH * OW; }
  int64_t image() const { return C * H * W; }
  bool direct() const { return kH == 1 && kW == 1 && sH == 1 && sW == 1 && pH == 0 && pW == 0; }
  IntList out_sizes() const { return {N, O, OH, OW}; }
};

// The op's attributes (stride, padding, dilation: 2 values each; groups).
struct ConvArgs {
  IntList stride, padding, dilation;
  int64_t groups;
  static ConvArgs from(const Attrs& a) {
    return {a.get<IntList>("stride"), a.get<IntList>("padding"), a.get<IntList>("dilation"), a.get<int64_t>("groups")};
  }
  Attrs attrs() const { return {{"stride", stride}, {"padding", padding}, {"dilation", dilation}, {"groups", groups}}; }
};

// Checks x (N, C, H, W) and w (O, C/groups, kH, kW) with positive stride and dilation,
// non-negative padding, groups dividing both channel counts, a non-empty kernel that fits the
// padded input; returns the geometry with the output size.
ConvGeom check_conv_geometry(const char* op, const Shown& x, const Shown& w, const IntList& stride,
                             const IntList& padding, const IntList& dilation, int64_t groups);

// The tensors of one call must share one floating dtype (autocast casts them; eager code must):
// a (named an) floating, b (bn) and bias (when defined) of a's dtype.
void check_conv_dtypes(const char* op, const char* an, const Tensor& a, const char* bn, const Tensor& b,
                       const Tensor& bias = Tensor());

}  // namespace mixtape
