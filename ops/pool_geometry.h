// ops/pool_geometry.h — the window geometry of the 2-D pooling ops (max_pool2d, avg_pool2d,
// adaptive_avg_pool2d and their backward ops): the window attributes, their checks with the
// input's shape, and the pooled output size. Defined in ops/pool_geometry.cpp; shared by the CPU
// kernels (ops/max_pool.cpp, ops/avg_pool.cpp) and the CUDA glue (ops/cuda/pooling_ops.cpp), so
// both backends accept the same windows, size the same outputs and fail with the same messages.
// Internal: not part of the public API.
#pragma once
#include <cstdint>

#include "core/dispatcher.h"
#include "core/tensor.h"
#include "ops/shown.h"

namespace mixtape {

// x (N, C, H, W) pooled to (N, C, OH, OW) by kH x kW windows (stride, padding, dilation).
struct PoolGeom {
  int64_t N, C, H, W;
  int64_t kH, kW, sH, sW, pH, pW, dH, dW;
  int64_t OH, OW;
  int64_t planes() const { return N * C; }
  int64_t in_plane() const { return H * W; }
  int64_t out_plane() const { return OH * OW; }
  IntList out_sizes() const { return {N, C, OH, OW}; }
};

// The window attributes as stored on the op (every list normalised to 2 values).
struct WindowArgs {
  IntList kernel, stride, padding, dilation;
  bool ceil_mode;
  static WindowArgs from(const Attrs& a) {
    return {a.get<IntList>("kernel_size"), a.get<IntList>("stride"), a.get<IntList>("padding"),
            a.has("dilation") ? a.get<IntList>("dilation") : IntList{1, 1}, a.get<bool>("ceil_mode")};
  }
  // The public functions' arguments (1 or 2 values each; empty stride = kernel_size) as 2 values.
  static WindowArgs normalise(const char* op, const IntList& k, const IntList& s, const IntList& p, const IntList& d,
                              bool ceil_mode);
};

// A public function's 1-or-2-value argument (`what` of `op`) as 2 values ({v} -> {v, v}).
IntList pool_pair_arg(const char* op, const char* what, const IntList& v);

// x is (N, C, H, W) with non-empty C, H and W.
void check_planes(const char* op, const Shown& x);

// The geometry of window pooling: checks x's planes, a positive kernel, stride and dilation, a
// padding of at most half the kernel, and an output of at least 1x1 (PyTorch's ceil_mode rule).
PoolGeom window_geometry(const char* op, const Shown& x, const WindowArgs& a);
// max_pool2d's tap codes for window g (ops/max_pool_taps.h): the dtype and shape of its format.
void check_max_pool_taps(const char* op, const PoolGeom& g, const Tensor& taps);

// The geometry of adaptive pooling to `out` (2 non-negative values): checks x's planes.
PoolGeom adaptive_geometry(const char* op, const Shown& x, const IntList& out);

}  // namespace mixtape
