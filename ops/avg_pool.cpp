// ops/avg_pool.cpp — the mean poolings avg_pool2d and adaptive_avg_pool2d and their gradient
// ops avg_pool2d_backward and adaptive_avg_pool2d_backward: one pair of kernels (the mean of
// each window and its adjoint) over separable windows, which differ only in how the windows
// are laid out.
//
// Windows:
//   avg:  rows [i sH - pH, min(i sH - pH + kH, H + pH)), then clipped to [0, H); divisor = the
//         unclipped window area (count_include_pad, which stops at the padding edge even in
//         ceil_mode) or the clipped area. The output size is ops/pool_geometry.cpp's.
//   adaptive avg: rows [floor(i H / OH), ceil((i + 1) H / OH)), columns alike, divisor = area.
// Invariant: a window's divisor is rows[oh].count * cols[ow].count for both the forward and the
// gradient, so each gradient op is exactly the adjoint of its forward (and its backward is the
// forward again: both ops are linear).
// Numerics: 16-bit values are summed in f32 (f64 for f64 inputs) and rounded once on store. Sums
// are short (one window) and accumulate in the compute type, as PyTorch's CPU kernels; 16-bit
// gradients accumulate in an f32 plane and are rounded once.
#include <algorithm>
#include <vector>

#include "ops/op_def.h"
#include "ops/pool_geometry.h"
#include "ops/pool_planes.h"
#include "ops/pooling.h"

namespace mixtape {
using namespace pool_impl;  // the shared plane machinery (ops/pool_planes.h)
namespace {

// ---- avg_pool2d / adaptive_avg_pool2d: means over separable windows ----
// One dim of the windows of output position o: the taps [lo, hi) inside the input, and count,
// this dim's factor of the divisor (a window's divisor is rows[oh].count * cols[ow].count).
struct Span {
  int64_t lo, hi, count;
};
struct Windows {
  std::vector<Span> rows, cols;
};

std::vector<Span> avg_spans(int64_t out, int64_t size, int64_t k, int64_t s, int64_t p, bool include_pad) {
  std::vector<Span> v(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    int64_t lo = o * s - p;
    int64_t hi = std::min(lo + k, size + p);  // the padding ends at size + p, even in ceil_mode
    const int64_t padded = hi - lo;
    lo = std::max<int64_t>(lo, 0);
    hi = std::min(hi, size);
    v[static_cast<size_t>(o)] = {lo, hi, include_pad ? padded : hi - lo};
  }
  return v;
}
Windows avg_windows(const PoolGeom& g, bool include_pad) {
  return {avg_spans(g.OH, g.H, g.kH, g.sH, g.pH, include_pad), avg_spans(g.OW, g.W, g.kW, g.sW, g.pW, include_pad)};
}

std::vector<Span> adaptive_spans(int64_t out, int64_t size) {
  std::vector<Span> v(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    const int64_t lo = o * size / out, hi = ((o + 1) * size + out - 1) / out;  // floor, ceil
    v[static_cast<size_t>(o)] = {lo, hi, hi - lo};
  }
  return v;
}
Windows adaptive_windows(const PoolGeom& g) { return {adaptive_spans(g.OH, g.H), adaptive_spans(g.OW, g.W)}; }

// Mean of each window of one plane (an empty window gives 0).
template <typename T>
void mean_pool_plane(const PoolGeom& g, const Windows& win, const T* in, T* out) {
  using A = acc_t<T>;
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    const Span r = win.rows[static_cast<size_t>(oh)];
    for (int64_t ow = 0; ow < g.OW; ++ow) {
      const Span c = win.cols[static_cast<size_t>(ow)];
      A s = 0;
      if (r.lo < r.hi && c.lo < c.hi) {
        for (int64_t h = r.lo; h < r.hi; ++h)
          for (int64_t w = c.lo; w < c.hi; ++w) s += static_cast<A>(in[h * g.W + w]);
        s /= static_cast<A>(r.count * c.count);
      }
      out[oh * g.OW + ow] = static_cast<T>(s);
    }
  }
}

// The adjoint: each grad value / divisor added over its window.
template <typename T>
void mean_unpool_plane(const PoolGeom& g, const Windows& win, const T* grad, acc_t<T>* acc) {
  using A = acc_t<T>;
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    const Span r = win.rows[static_cast<size_t>(oh)];
    for (int64_t ow = 0; ow < g.OW; ++ow) {
      const Span c = win.cols[static_cast<size_t>(ow)];
      if (r.lo >= r.hi || c.lo >= c.hi) continue;
      const A v = static_cast<A>(grad[oh * g.OW + ow]) / static_cast<A>(r.count * c.count);
      for (int64_t h = r.lo; h < r.hi; ++h)
        for (int64_t w = c.lo; w < c.hi; ++w) acc[h * g.W + w] += v;
    }
  }
}

// A window that is the whole plane (global average pooling: adaptive to 1 x 1, or a kernel the
// size of the plane). The loops above then run one latency-bound add chain per plane (ResNet's
// head: 8192 planes of 49 values, 120-250 us a call); below, the forward sums kPlanes planes side
// by side, each in its own order (mean_pool_plane's bits, kPlanes independent chains), and the
// gradient fills each plane with its one value.
constexpr int64_t kPlanes = 8;
bool whole_plane(const PoolGeom& g, const Windows& win) {
  return g.OH == 1 && g.OW == 1 && win.rows[0].lo == 0 && win.rows[0].hi == g.H && win.cols[0].lo == 0 &&
         win.cols[0].hi == g.W;
}
// Planes [p, p + kPlanes).
template <typename T>
void mean_pool_whole_planes(const PoolGeom& g, const Windows& win, const T* in, T* out) {
  using A = acc_t<T>;
  const int64_t n = g.in_plane();
  A s[kPlanes] = {};
  for (int64_t i = 0; i < n; ++i)
    for (int64_t q = 0; q < kPlanes; ++q) s[q] += static_cast<A>(in[q * n + i]);
  const auto divisor = static_cast<A>(win.rows[0].count * win.cols[0].count);
  for (int64_t q = 0; q < kPlanes; ++q) out[q] = static_cast<T>(s[q] / divisor);
}
// One plane of the gradient: grad / divisor everywhere, plus 0 as mean_unpool_plane's
// accumulation from zero adds it (a -0 comes out +0).
template <typename T>
void mean_unpool_whole_plane(const PoolGeom& g, const Windows& win, T grad, T* out) {
  using A = acc_t<T>;
  const A v = static_cast<A>(grad) / static_cast<A>(win.rows[0].count * win.cols[0].count) + A(0);
  std::fill(out, out + g.in_plane(), static_cast<T>(v));
}

Tensor mean_pool(const char* op, const Tensor& x, const PoolGeom& g, int64_t window_area, const Windows& win) {
  check_floating(op, "input", x);
  Tensor xc = dense(x);
  Tensor out = Tensor::empty(g.out_sizes(), TensorOptions(x.dtype()));
  visit_floating(x.dtype(), op, [&]<typename T>() {
    const T* in = static_cast<const T*>(xc.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    if (whole_plane(g, win)) {
      const int64_t groups = g.planes() / kPlanes;
      for_each_plane(groups, kPlanes * g.in_plane(), [&](int64_t q, int) {
        mean_pool_whole_planes(g, win, in + q * kPlanes * g.in_plane(), o + q * kPlanes);
      });
      for (int64_t p = groups * kPlanes; p < g.planes(); ++p)  // the last planes, fewer than kPlanes
        mean_pool_plane(g, win, in + p * g.in_plane(), o + p);
      return;
    }
    for_each_plane(g.planes(), g.out_plane() * window_area, [&](int64_t p, int) {
      mean_pool_plane(g, win, in + p * g.in_plane(), o + p * g.out_plane());
    });
  });
  return out;
}

Tensor mean_unpool(const char* op, const Tensor& grad, const PoolGeom& g, int64_t window_area, const Windows& win) {
  check_floating(op, "grad", grad);
  check_grad_shape(op, g, grad);
  Tensor gc = dense(grad);
  Tensor out = Tensor::empty({g.N, g.C, g.H, g.W}, TensorOptions(grad.dtype()));
  visit_floating(grad.dtype(), op, [&]<typename T>() {
    const T* gp = static_cast<const T*>(gc.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    if (whole_plane(g, win)) {
      for_each_plane(g.planes(), g.in_plane(),
                     [&](int64_t p, int) { mean_unpool_whole_plane(g, win, gp[p], o + p * g.in_plane()); });
      return;
    }
    GradPlanes<T> planes(g.in_plane());
    for_each_plane(g.planes(), g.out_plane() * window_area + g.in_plane(), [&](int64_t p, int t) {
      acc_t<T>* acc = planes.begin(o + p * g.in_plane(), t);
      mean_unpool_plane(g, win, gp + p * g.out_plane(), acc);
      planes.finish(acc, o + p * g.in_plane());
    });
  });
  return out;
}

TensorList avg_pool2d_cpu(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const PoolGeom g = window_geometry(call.name(), Shown::of(x), WindowArgs::from(call.attrs));
  const bool include_pad = call.attrs.get<bool>("count_include_pad");
  return {mean_pool(call.name(), x, g, g.kH * g.kW, avg_windows(g, include_pad))};
}

// attrs: those of avg_pool2d plus input_size
TensorList avg_pool2d_backward_cpu(const OpCall& call) {
  const PoolGeom g = window_geometry(call.name(), Shown::shape(call.attrs.get<IntList>("input_size")),
                                     WindowArgs::from(call.attrs));
  const bool include_pad = call.attrs.get<bool>("count_include_pad");
  return {mean_unpool(call.name(), call.inputs[0], g, g.kH * g.kW, avg_windows(g, include_pad))};
}

Attrs avg_attrs(const WindowArgs& a, bool count_include_pad) {
  return {{"kernel_size", a.kernel},
          {"stride", a.stride},
          {"padding", a.padding},
          {"ceil_mode", a.ceil_mode},
          {"count_include_pad", count_include_pad}};
}

TensorList avg_pool2d_backward_backward(BackwardContext& c);
// Samples: sums_of(window area) bounds the CPU/CUDA difference of a window's mean (and of the
// gradient's sum over the windows an input lies in).
const OpSchema& kAvgPoolBackward =
    define_op("avg_pool2d_backward")
        .save({})
        .grad(avg_pool2d_backward_backward)
        .kernel(DeviceType::CPU, avg_pool2d_backward_cpu)
        // grad: avg_pool2d's output for a (1, 2, 6, 5) input (ceil: 4 x 3 windows)
        .sample("ceil-padding", {arg({1, 2, 4, 3})},
                [](const TensorList& x) {
                  return TensorList{avg_pool2d_backward(x[0], {1, 2, 6, 5}, {3}, {2}, {1}, true, false)};
                },
                sums_of(9));

TensorList avg_pool2d_backward_fn(BackwardContext& c) {
  Attrs a = avg_attrs(WindowArgs::from(c.attrs), c.attrs.get<bool>("count_include_pad"));
  a.set("input_size", c.input_sizes(0));
  return {dispatch1(kAvgPoolBackward, {c.grad()}, std::move(a))};
}
const OpSchema& kAvgPool =
    define_op("avg_pool2d")
        .save({})
        .grad(avg_pool2d_backward_fn)
        .kernel(DeviceType::CPU, avg_pool2d_cpu)
        .sample("2x2", {arg({2, 3, 6, 6})}, [](const TensorList& x) { return TensorList{avg_pool2d(x[0], {2, 2})}; })
        .sample("padding-include", {arg({1, 2, 6, 5})},
                [](const TensorList& x) { return TensorList{avg_pool2d(x[0], {3}, {2}, {1}, false, true)}; }, sums_of(9))
        .sample("padding-exclude", {arg({1, 2, 6, 5})},
                [](const TensorList& x) { return TensorList{avg_pool2d(x[0], {3}, {2}, {1}, false, false)}; },
                sums_of(9))
        .sample("ceil-include", {arg({1, 2, 6, 5})},
                [](const TensorList& x) { return TensorList{avg_pool2d(x[0], {3, 2}, {2, 2}, {1, 1}, true, true)}; }, sums_of(6))
        .sample("ceil-exclude", {arg({1, 2, 6, 5})},
                [](const TensorList& x) { return TensorList{avg_pool2d(x[0], {3, 2}, {2, 2}, {1, 1}, true, false)}; }, sums_of(6))
        .sample("unbatched-overlap", {arg({2, 5, 5})},
                [](const TensorList& x) { return TensorList{avg_pool2d(x[0], {3}, {1})}; }, sums_of(9));

TensorList avg_pool2d_backward_backward(BackwardContext& c) {
  // avg_pool2d is linear, and avg_pool2d_backward its adjoint: the adjoint's adjoint is avg_pool2d.
  return {dispatch1(kAvgPool, {c.grad()}, avg_attrs(WindowArgs::from(c.attrs), c.attrs.get<bool>("count_include_pad")))};
}

// ---- adaptive_avg_pool2d ----
// Largest window along a dim: ceil(in / out) + 1 bounds it (for the threading estimate only).
int64_t adaptive_area(const PoolGeom& g) {
  auto span = [](int64_t in, int64_t out) { return out > 0 ? in / out + 2 : 0; };
  return span(g.H, g.OH) * span(g.W, g.OW);
}

TensorList adaptive_avg_pool2d_cpu(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const PoolGeom g = adaptive_geometry(call.name(), Shown::of(x), call.attrs.get<IntList>("output_size"));
  return {mean_pool(call.name(), x, g, adaptive_area(g), adaptive_windows(g))};
}

// attrs: input_size; the output size is the grad's.
TensorList adaptive_avg_pool2d_backward_cpu(const OpCall& call) {
  const Tensor& grad = call.inputs[0];
  MT_CHECK(grad.dim() == 4, call.name(), ": expected a 4-D grad (N, C, OH, OW), got ", grad.describe());
  const PoolGeom g = adaptive_geometry(call.name(), Shown::shape(call.attrs.get<IntList>("input_size")),
                                       {grad.size(2), grad.size(3)});
  return {mean_unpool(call.name(), grad, g, adaptive_area(g), adaptive_windows(g))};
}

TensorList adaptive_avg_pool2d_backward_backward(BackwardContext& c);
const OpSchema& kAdaptiveBackward =
    define_op("adaptive_avg_pool2d_backward")
        .save({})
        .grad(adaptive_avg_pool2d_backward_backward)
        .kernel(DeviceType::CPU, adaptive_avg_pool2d_backward_cpu)
        .sample("5x7-to-3x4", {arg({1, 2, 3, 4})},
                [](const TensorList& x) { return TensorList{adaptive_avg_pool2d_backward(x[0], {1, 2, 5, 7})}; },
                sums_of(6));

TensorList adaptive_avg_pool2d_backward_fn(BackwardContext& c) {
  return {dispatch1(kAdaptiveBackward, {c.grad()}, {{"input_size", c.input_sizes(0)}})};
}
const OpSchema& kAdaptive =
    define_op("adaptive_avg_pool2d")
        .save({})
        .grad(adaptive_avg_pool2d_backward_fn)
        .kernel(DeviceType::CPU, adaptive_avg_pool2d_cpu)
        .sample("5x7-to-3x4", {arg({2, 2, 5, 7})},
                [](const TensorList& x) { return TensorList{adaptive_avg_pool2d(x[0], {3, 4})}; }, sums_of(9))
        .sample("global", {arg({2, 3, 4, 5})},
                [](const TensorList& x) { return TensorList{adaptive_avg_pool2d(x[0], {1})}; }, sums_of(20))
        .sample("upsample-unbatched", {arg({2, 3, 3})},
                [](const TensorList& x) { return TensorList{adaptive_avg_pool2d(x[0], {5, 4})}; });

TensorList adaptive_avg_pool2d_backward_backward(BackwardContext& c) {
  const IntList& gs = c.input_sizes(0);
  return {dispatch1(kAdaptive, {c.grad()}, {{"output_size", IntList{gs[2], gs[3]}}})};
}

}  // namespace

Tensor avg_pool2d(const Tensor& x, const IntList& kernel_size, const IntList& stride, const IntList& padding,
                  bool ceil_mode, bool count_include_pad) {
  check_rank("avg_pool2d", x);
  WindowArgs a = WindowArgs::normalise("avg_pool2d", kernel_size, stride, padding, {1, 1}, ceil_mode);
  Tensor xb = batched(x);
  window_geometry("avg_pool2d", Shown{&x, xb.sizes()}, a);
  Tensor r = dispatch1(kAvgPool, {xb}, avg_attrs(a, count_include_pad));
  return x.dim() == 3 ? r.squeeze(0) : r;
}

Tensor avg_pool2d_backward(const Tensor& grad, const IntList& input_size, const IntList& kernel_size,
                           const IntList& stride, const IntList& padding, bool ceil_mode, bool count_include_pad) {
  MT_CHECK(grad.defined(), "avg_pool2d_backward: grad must be defined");
  IntList size = batched_size("avg_pool2d_backward", input_size);
  const bool unbatched = input_size.size() == 3;
  MT_CHECK(grad.dim() == static_cast<int64_t>(input_size.size()), "avg_pool2d_backward: expected grad of rank ",
           input_size.size(), " (input_size ", shape_str(input_size), "), got ", grad.describe());
  WindowArgs a = WindowArgs::normalise("avg_pool2d_backward", kernel_size, stride, padding, {1, 1}, ceil_mode);
  Attrs attrs = avg_attrs(a, count_include_pad);
  attrs.set("input_size", size);
  Tensor r = dispatch1(kAvgPoolBackward, {unbatched ? grad.unsqueeze(0) : grad}, std::move(attrs));
  return unbatched ? r.squeeze(0) : r;
}

Tensor adaptive_avg_pool2d(const Tensor& x, const IntList& output_size) {
  check_rank("adaptive_avg_pool2d", x);
  IntList out = pool_pair_arg("adaptive_avg_pool2d", "output_size", output_size);
  Tensor xb = batched(x);
  adaptive_geometry("adaptive_avg_pool2d", Shown{&x, xb.sizes()}, out);
  Tensor r = dispatch1(kAdaptive, {xb}, {{"output_size", out}});
  return x.dim() == 3 ? r.squeeze(0) : r;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad, const IntList& input_size) {
  MT_CHECK(grad.defined(), "adaptive_avg_pool2d_backward: grad must be defined");
  IntList size = batched_size("adaptive_avg_pool2d_backward", input_size);
  const bool unbatched = input_size.size() == 3;
  MT_CHECK(grad.dim() == static_cast<int64_t>(input_size.size()),
           "adaptive_avg_pool2d_backward: expected grad of rank ", input_size.size(), " (input_size ",
           shape_str(input_size), "), got ", grad.describe());
  Tensor r = dispatch1(kAdaptiveBackward, {unbatched ? grad.unsqueeze(0) : grad}, {{"input_size", size}});
  return unbatched ? r.squeeze(0) : r;
}

}  // namespace mixtape
