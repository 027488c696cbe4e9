// ops/cuda/pooling_ops.cpp — CUDA kernels of max_pool2d, max_pool2d_with_indices,
// max_pool2d_backward, max_pool2d_tap_backward, max_pool2d_tap_gather, avg_pool2d, adaptive_avg_pool2d and their
// backward ops: attributes and checks as ops/max_pool.cpp and ops/avg_pool.cpp, whose window geometry they call
// (ops/pool_geometry.h, same messages), kernels in pooling.cu. Inputs are (N, C, H, W) (the public
// functions reshape 3-D inputs before dispatch), made dense on the device.
#include "ops/cuda/pooling_kernels.h"
#include "ops/cuda/tensor_iter.h"
#include "ops/max_pool_taps.h"
#include "ops/pool_geometry.h"

namespace mixtape::cuda {
namespace {

// The shared host geometry (ops/pool_geometry.h) as the kernels' struct.
PoolGeom kernel_geom(const mixtape::PoolGeom& h) {
  PoolGeom g{};
  g.planes = h.planes();
  g.H = h.H, g.W = h.W, g.OH = h.OH, g.OW = h.OW;
  g.kH = h.kH, g.kW = h.kW, g.sH = h.sH, g.sW = h.sW, g.pH = h.pH, g.pW = h.pW, g.dH = h.dH, g.dW = h.dW;
  return g;
}
// Geometry from the op's window attributes (kernel_size, stride, padding, dilation, ceil_mode; all
// normalised to 2 values by the public function) and the input shape.
PoolGeom geometry(const char* op, const Shown& x, const Attrs& a) {
  return kernel_geom(window_geometry(op, x, WindowArgs::from(a)));
}

void check_floating(const char* op, const char* what, const Tensor& t) {
  MT_CHECK(t.defined() && is_floating(t.dtype()), op, ": expected a floating ", what, ", got ",
           t.defined() ? t.describe() : "undefined");
}

// with_indices: (out, Int64 indices); otherwise (out, tap codes) unless the call says "taps": false.
TensorList max_pool_forward(const OpCall& c, bool with_indices) {
  const Tensor& x = c.inputs[0];
  const PoolGeom g = geometry(c.name(), Shown::of(x), c.attrs);
  check_floating(c.name(), "input", x);
  DeviceGuard guard(x.device().index());
  const Tensor xc = dense(x, c.name());
  const IntList osz{x.size(0), x.size(1), g.OH, g.OW};
  Tensor out = empty_on(osz, x.dtype(), x.device());
  Tensor idx = with_indices ? empty_on(osz, DType::Int64, x.device()) : Tensor();
  const bool keep_taps = !with_indices && (!c.attrs.has("taps") || c.attrs.get<bool>("taps"));
  const TapFormat tf = max_pool_tap_format(g);
  Tensor taps = keep_taps ? empty_on({x.size(0), x.size(1), g.OH, tap_row_length(tf, g.OW)}, tap_format_dtype(tf),
                                     x.device())
                          : Tensor();
  MT_CUDA_CHECK(launch_max_pool_forward(x.dtype(), g, xc.data_ptr(), out.data_ptr(),
                                        with_indices ? static_cast<int64_t*>(idx.data_ptr()) : nullptr,
                                        keep_taps ? taps.data_ptr() : nullptr, tf, current_stream()),
                c.name());
  if (with_indices) return {out, idx};
  return {out, taps};
}
TensorList max_pool2d_cuda(const OpCall& c) { return max_pool_forward(c, false); }
TensorList max_pool2d_with_indices_cuda(const OpCall& c) { return max_pool_forward(c, true); }

// max_pool2d_backward(grad, indices; input_size): the indices say where each gradient goes; the
// gather uses the window attributes, when the call carries them, to visit only the windows that
// can cover a pixel.
TensorList max_pool2d_backward_cuda(const OpCall& c) {
  const Tensor& grad = c.inputs[0];
  const Tensor& indices = c.inputs[1];
  const IntList& in_size = c.attrs.get<IntList>("input_size");
  MT_CHECK(in_size.size() == 4 && in_size[1] > 0 && in_size[2] > 0 && in_size[3] > 0, c.name(),
           ": expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got ", shape_str(in_size));
  check_floating(c.name(), "grad", grad);
  MT_CHECK(grad.dim() == 4 && grad.size(0) == in_size[0] && grad.size(1) == in_size[1], c.name(),
           ": expected grad (N, C, OH, OW) with N, C of input_size ", shape_str(in_size), ", got ", grad.describe());
  MT_CHECK(indices.dtype() == DType::Int64 && indices.sizes() == grad.sizes(), c.name(),
           ": expected Int64 indices of the grad's shape ", shape_str(grad.sizes()), ", got ", indices.describe());
  // Without the window attributes every output position may hold a pixel's argmax: a geometry
  // whose "window" (kH = H + OH + 1, padding OH, stride 1) makes every pixel's covering range
  // the whole [0, OH) x [0, OW) — exact, only slower than the real windows.
  PoolGeom g{};
  if (c.attrs.has("kernel_size")) {
    g = geometry(c.name(), Shown::shape(in_size), c.attrs);
  } else {
    g.planes = in_size[0] * in_size[1];
    g.H = in_size[2], g.W = in_size[3], g.OH = grad.size(2), g.OW = grad.size(3);
    g.kH = g.H + g.OH + 1, g.kW = g.W + g.OW + 1, g.pH = g.OH, g.pW = g.OW;
    g.sH = g.sW = g.dH = g.dW = 1;
  }
  DeviceGuard guard(grad.device().index());
  const Tensor gc = dense(grad, c.name()), ic = dense(indices, c.name());
  Tensor out = empty_on(in_size, grad.dtype(), grad.device());
  MT_CUDA_CHECK(launch_max_pool_backward(grad.dtype(), g, gc.data_ptr(), static_cast<const int64_t*>(ic.data_ptr()),
                                         nullptr, TapFormat::Byte, out.data_ptr(), current_stream()),
                c.name());
  return {out};
}

// max_pool2d_tap_backward(grad, taps; window attrs, input_size): the scatter from max_pool2d's
// tap codes, as a gather per input pixel (pooling.cu). The window and input_size fix the codes'
// format (ops/max_pool_taps.h), checked as on the CPU; a code that is no tap of its window inside
// the plane gives no gradient here (the CPU refuses it: the device reports no per-element errors).
TensorList max_pool2d_tap_backward_cuda(const OpCall& c) {
  const Tensor& grad = c.inputs[0];
  const Tensor& taps = c.inputs[1];
  const IntList& in_size = c.attrs.get<IntList>("input_size");
  const mixtape::PoolGeom hg = window_geometry(c.name(), Shown::shape(in_size), WindowArgs::from(c.attrs));
  check_floating(c.name(), "grad", grad);
  MT_CHECK(grad.sizes() == hg.out_sizes(), c.name(), ": expected grad of shape ", shape_str(hg.out_sizes()),
           " (the pooled shape of input_size), got ", grad.describe());
  check_max_pool_taps(c.name(), hg, taps);
  DeviceGuard guard(grad.device().index());
  const Tensor gc = dense(grad, c.name()), tc = dense(taps, c.name());
  Tensor out = empty_on(in_size, grad.dtype(), grad.device());
  MT_CUDA_CHECK(launch_max_pool_backward(grad.dtype(), kernel_geom(hg), gc.data_ptr(), nullptr, tc.data_ptr(),
                                         max_pool_tap_format(hg), out.data_ptr(), current_stream()),
                c.name());
  return {out};
}

// max_pool2d_tap_gather(G, taps; window attrs): G at each window's winning tap.
TensorList max_pool2d_tap_gather_cuda(const OpCall& c) {
  const Tensor& G = c.inputs[0];
  const Tensor& taps = c.inputs[1];
  const mixtape::PoolGeom hg = window_geometry(c.name(), Shown::of(G), WindowArgs::from(c.attrs));
  check_floating(c.name(), "input", G);
  check_max_pool_taps(c.name(), hg, taps);
  DeviceGuard guard(G.device().index());
  const Tensor Gc = dense(G, c.name()), tc = dense(taps, c.name());
  Tensor out = empty_on(hg.out_sizes(), G.dtype(), G.device());
  MT_CUDA_CHECK(launch_max_pool_tap_gather(G.dtype(), kernel_geom(hg), Gc.data_ptr(), tc.data_ptr(),
                                           max_pool_tap_format(hg), out.data_ptr(), current_stream()),
                c.name());
  return {out};
}

// ---- mean pooling: avg_pool2d (window attrs + count_include_pad), adaptive_avg_pool2d (output_size) ----
void check_grad_shape(const char* op, const PoolGeom& g, int64_t N, int64_t C, const Tensor& grad) {
  const IntList want{N, C, g.OH, g.OW};
  MT_CHECK(grad.sizes() == want, op, ": expected grad of shape ", shape_str(want), ", got ", grad.describe());
}
Tensor mean_pool(const OpCall& c, const Tensor& x, const PoolGeom& g, bool adaptive, bool include_pad) {
  check_floating(c.name(), "input", x);
  DeviceGuard guard(x.device().index());
  const Tensor xc = dense(x, c.name());
  Tensor out = empty_on({x.size(0), x.size(1), g.OH, g.OW}, x.dtype(), x.device());
  MT_CUDA_CHECK(launch_mean_pool(x.dtype(), g, adaptive, include_pad, xc.data_ptr(), out.data_ptr(), current_stream()),
                c.name());
  return out;
}
Tensor mean_unpool(const OpCall& c, const Tensor& grad, const IntList& in_size, const PoolGeom& g, bool adaptive,
                   bool include_pad) {
  check_floating(c.name(), "grad", grad);
  check_grad_shape(c.name(), g, in_size[0], in_size[1], grad);
  DeviceGuard guard(grad.device().index());
  const Tensor gc = dense(grad, c.name());
  Tensor out = empty_on(in_size, grad.dtype(), grad.device());
  MT_CUDA_CHECK(launch_mean_unpool(grad.dtype(), g, adaptive, include_pad, gc.data_ptr(), out.data_ptr(),
                                   current_stream()),
                c.name());
  return out;
}

TensorList avg_pool2d_cuda(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const PoolGeom g = geometry(c.name(), Shown::of(x), c.attrs);
  return {mean_pool(c, x, g, false, c.attrs.get<bool>("count_include_pad"))};
}
TensorList avg_pool2d_backward_cuda(const OpCall& c) {
  const IntList& in_size = c.attrs.get<IntList>("input_size");
  const PoolGeom g = geometry(c.name(), Shown::shape(in_size), c.attrs);
  return {mean_unpool(c, c.inputs[0], in_size, g, false, c.attrs.get<bool>("count_include_pad"))};
}
TensorList adaptive_avg_pool2d_cuda(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const PoolGeom g = kernel_geom(adaptive_geometry(c.name(), Shown::of(x), c.attrs.get<IntList>("output_size")));
  return {mean_pool(c, x, g, true, false)};
}
TensorList adaptive_avg_pool2d_backward_cuda(const OpCall& c) {
  const Tensor& grad = c.inputs[0];
  MT_CHECK(grad.dim() == 4, c.name(), ": expected a 4-D grad (N, C, OH, OW), got ", grad.describe());
  const IntList& in_size = c.attrs.get<IntList>("input_size");
  const PoolGeom g =
      kernel_geom(adaptive_geometry(c.name(), Shown::shape(in_size), {grad.size(2), grad.size(3)}));
  return {mean_unpool(c, grad, in_size, g, true, false)};
}

const bool kRegistered = [] {
  register_kernel("avg_pool2d", DeviceType::CUDA, avg_pool2d_cuda);
  register_kernel("avg_pool2d_backward", DeviceType::CUDA, avg_pool2d_backward_cuda);
  register_kernel("adaptive_avg_pool2d", DeviceType::CUDA, adaptive_avg_pool2d_cuda);
  register_kernel("adaptive_avg_pool2d_backward", DeviceType::CUDA, adaptive_avg_pool2d_backward_cuda);
  register_kernel("max_pool2d", DeviceType::CUDA, max_pool2d_cuda);
  register_kernel("max_pool2d_with_indices", DeviceType::CUDA, max_pool2d_with_indices_cuda);
  register_kernel("max_pool2d_backward", DeviceType::CUDA, max_pool2d_backward_cuda);
  register_kernel("max_pool2d_tap_backward", DeviceType::CUDA, max_pool2d_tap_backward_cuda);
  register_kernel("max_pool2d_tap_gather", DeviceType::CUDA, max_pool2d_tap_gather_cuda);
  return true;
}();

}  // namespace
}  // namespace mixtape::cuda
