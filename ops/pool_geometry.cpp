// ops/pool_geometry.cpp — the window geometry of the 2-D pooling ops, declared in
// ops/pool_geometry.h: argument normalisation, the window and input checks, and the pooled output
// size (PyTorch's rules, aten/src/ATen/native/Pool.h):
//   OH = floor((H + 2 pH - dH (kH - 1) - 1 [+ sH - 1 if ceil_mode]) / sH) + 1, and with ceil_mode
//   one less if the last window would start at or past H + pH (every window starts inside the
//   input or its left padding). Padding is at most half the kernel. Output row i's window starts
//   at i sH - pH; OW / columns alike.
// Invariant: both backends (the CPU kernels in ops/max_pool.cpp and ops/avg_pool.cpp, the CUDA
// glue in ops/cuda/pooling_ops.cpp) size outputs and reject windows only through these functions,
// so they accept the same windows and fail with the same messages.
#include "ops/pool_geometry.h"

#include "ops/max_pool_taps.h"

namespace mixtape {
namespace {

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t pooled_size(int64_t in, int64_t k, int64_t p, int64_t s, int64_t d, bool ceil_mode) {
  int64_t out = floor_div(in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0), s) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

}  // namespace

IntList pool_pair_arg(const char* op, const char* what, const IntList& v) {
  MT_CHECK(v.size() == 1 || v.size() == 2, op, ": ", what, " must have 1 or 2 values, got ", shape_str(v));
  return v.size() == 1 ? IntList{v[0], v[0]} : v;
}

void check_planes(const char* op, const Shown& x) {
  MT_CHECK(x.sizes.size() == 4, op, ": expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got ", x.str());
  MT_CHECK(x.sizes[1] > 0 && x.sizes[2] > 0 && x.sizes[3] > 0, op, ": expected non-empty C, H and W, got ", x.str());
}

WindowArgs WindowArgs::normalise(const char* op, const IntList& k, const IntList& s, const IntList& p,
                                 const IntList& d, bool ceil_mode) {
  IntList kk = pool_pair_arg(op, "kernel_size", k);
  return {kk, s.empty() ? kk : pool_pair_arg(op, "stride", s), pool_pair_arg(op, "padding", p),
          pool_pair_arg(op, "dilation", d), ceil_mode};
}

PoolGeom window_geometry(const char* op, const Shown& x, const WindowArgs& a) {
  check_planes(op, x);
  const IntList &k = a.kernel, &s = a.stride, &p = a.padding, &d = a.dilation;
  MT_CHECK(k.size() == 2 && k[0] > 0 && k[1] > 0, op, ": kernel_size must be positive, got ", shape_str(k));
  MT_CHECK(s.size() == 2 && s[0] > 0 && s[1] > 0, op, ": stride must be positive, got ", shape_str(s));
  MT_CHECK(d.size() == 2 && d[0] > 0 && d[1] > 0, op, ": dilation must be positive, got ", shape_str(d));
  MT_CHECK(p.size() == 2 && p[0] >= 0 && p[1] >= 0 && p[0] <= k[0] / 2 && p[1] <= k[1] / 2, op,
           ": padding must be between 0 and half the kernel size, got padding ", shape_str(p), " for kernel_size ",
           shape_str(k));
  const IntList& xs = x.sizes;
  PoolGeom g{xs[0], xs[1], xs[2], xs[3], k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1], 0, 0};
  g.OH = pooled_size(g.H, g.kH, g.pH, g.sH, g.dH, a.ceil_mode);
  g.OW = pooled_size(g.W, g.kW, g.pW, g.sW, g.dW, a.ceil_mode);
  MT_CHECK(g.OH >= 1 && g.OW >= 1, op, ": output size is too small: input ", x.str(), " with kernel_size ",
           shape_str(k), ", stride ", shape_str(s), ", padding ", shape_str(p), ", dilation ", shape_str(d),
           " gives ", g.OH, "x", g.OW);
  return g;
}

void check_max_pool_taps(const char* op, const PoolGeom& g, const Tensor& taps) {
  MT_CHECK(g.kH * g.kW < (int64_t(1) << 31), op, ": a ", g.kH, "x", g.kW, " window has ", g.kH * g.kW,
           " taps, more than its Int32 tap codes hold");
  const TapFormat f = max_pool_tap_format(g);
  const DType want = tap_format_dtype(f);
  const IntList shape{g.N, g.C, g.OH, tap_row_length(f, g.OW)};
  MT_CHECK(taps.defined() && taps.dtype() == want && taps.sizes() == shape, op, ": expected ", dtype_name(want),
           " tap codes of shape ", shape_str(shape), " (a ", g.kH, "x", g.kW, " window",
           f == TapFormat::Packed2 ? ": 2-bit codes, 4 per byte of each output row of " : " over a pooled width of ",
           g.OW, "), got ", taps.defined() ? taps.describe() : "undefined");
}

PoolGeom adaptive_geometry(const char* op, const Shown& x, const IntList& out) {
  check_planes(op, x);
  MT_CHECK(out.size() == 2 && out[0] >= 0 && out[1] >= 0, op,
           ": output_size must be 2 non-negative values, got ", shape_str(out));
  const IntList& xs = x.sizes;
  return PoolGeom{xs[0], xs[1], xs[2], xs[3], 0, 0, 0, 0, 0, 0, 1, 1, out[0], out[1]};
}

}  // namespace mixtape
