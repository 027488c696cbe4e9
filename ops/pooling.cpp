// ops/pooling.cpp — max_pool2d, avg_pool2d, adaptive_avg_pool2d and their gradient ops.
//
// Layout: x (N, C, H, W) is N C independent planes of H x W, contiguous (other layouts are
// copied once). Output (N, C, OH, OW). Every kernel runs plane by plane, planes split over
// OpenMP threads above cpu::kParallelGrain.
//
// Windows (PyTorch's rules, aten/src/ATen/native/Pool.h):
//   OH = floor((H + 2 pH - dH (kH - 1) - 1 [+ sH - 1 if ceil_mode]) / sH) + 1, and with ceil_mode
//   one less if the last window would start at or past H + pH (every window starts inside the
//   input or its left padding). Padding is at most half the kernel. Output row i's window starts
//   at i sH - pH; OW / columns alike.
//   max:  rows i sH - pH + m dH, m < kH, clipped to [0, H); padding is -inf (never chosen). The
//         index saved for backward is h W + w within the plane (PyTorch's return_indices). Scan is
//         row-major and a value replaces the running max if greater or NaN: the first of equal
//         maxima wins, NaN propagates. A window lying wholly in padding (possible only with a
//         dilation larger than the input) gives -inf and index -1 (no gradient).
//   avg:  rows [i sH - pH, min(i sH - pH + kH, H + pH)), then clipped to [0, H); divisor = the
//         unclipped window area (count_include_pad, which stops at the padding edge even in
//         ceil_mode) or the clipped area.
//   adaptive avg: rows [floor(i H / OH), ceil((i + 1) H / OH)), columns alike, divisor = area.
// Numerics: 16-bit values are compared / summed in f32 (f64 for f64 inputs) and rounded once
// on store, so a 16-bit pooling equals the f32 pooling of the widened input, rounded, bit for
// bit. Sums are short (one window) and accumulate in the compute type, as PyTorch's CPU kernels.
//
// Gradient ops, each the adjoint of its forward (so every backward is differentiable again):
//   max_pool2d_backward(g, idx):  zeros (N, C, H, W), plane[idx] += g   (scatter, accumulates
//                                 where windows overlap);  its backward: gather G at idx
//   avg_pool2d_backward(g):       each g spread as g / divisor over its window; backward: avg_pool2d
//   adaptive_avg_pool2d_backward: the same with adaptive windows;  backward: adaptive_avg_pool2d
// 16-bit gradients accumulate in an f32 plane and are rounded once.
#include "ops/pooling.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <vector>

#include "autograd/grad_mode.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/max_pool_2x2_avx512.h"
#include "ops/op_def.h"
#include "ops/pool_geometry.h"

namespace mixtape {
namespace {

IntList pair_arg(const char* op, const char* what, const IntList& v) {
  MT_CHECK(v.size() == 1 || v.size() == 2, op, ": ", what, " must have 1 or 2 values, got ", shape_str(v));
  return v.size() == 1 ? IntList{v[0], v[0]} : v;
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t pooled_size(int64_t in, int64_t k, int64_t p, int64_t s, int64_t d, bool ceil_mode) {
  int64_t out = floor_div(in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0), s) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

void check_floating(const char* op, const char* what, const Tensor& t) {
  MT_CHECK(is_floating(t.dtype()), op, ": expected a floating ", what, ", got ", t.describe());
}

}  // namespace

void check_planes(const char* op, const Shown& x) {
  MT_CHECK(x.sizes.size() == 4, op, ": expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got ", x.str());
  MT_CHECK(x.sizes[1] > 0 && x.sizes[2] > 0 && x.sizes[3] > 0, op, ": expected non-empty C, H and W, got ", x.str());
}

WindowArgs WindowArgs::normalise(const char* op, const IntList& k, const IntList& s, const IntList& p,
                                 const IntList& d, bool ceil_mode) {
  IntList kk = pair_arg(op, "kernel_size", k);
  return {kk, s.empty() ? kk : pair_arg(op, "stride", s), pair_arg(op, "padding", p), pair_arg(op, "dilation", d),
          ceil_mode};
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

PoolGeom adaptive_geometry(const char* op, const Shown& x, const IntList& out) {
  check_planes(op, x);
  MT_CHECK(out.size() == 2 && out[0] >= 0 && out[1] >= 0, op,
           ": output_size must be 2 non-negative values, got ", shape_str(out));
  const IntList& xs = x.sizes;
  return PoolGeom{xs[0], xs[1], xs[2], xs[3], 0, 0, 0, 0, 0, 0, 1, 1, out[0], out[1]};
}

namespace {


// A gradient op's grad must have the forward output's shape.
void check_grad_shape(const char* op, const PoolGeom& g, const Tensor& grad) {
  MT_CHECK(grad.sizes() == g.out_sizes(), op, ": expected grad of shape ", shape_str(g.out_sizes()),
           " (the pooled shape of input_size), got ", grad.describe());
}

Tensor dense(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.sizes(), TensorOptions(t.dtype()));
  cpu::copy_into(out, t);
  return out;
}

// fn(plane, thread) for every plane; threads when the work pays for them.
template <typename F>
void for_each_plane(int64_t planes, int64_t work_per_plane, F&& fn) {
  const bool par = planes > 1 && planes * work_per_plane >= cpu::kParallelGrain && !omp_in_parallel();
#pragma omp parallel for if (par) schedule(static)
  for (int64_t p = 0; p < planes; ++p) fn(p, omp_get_thread_num());
}

// 16-bit planes are widened to float with the bulk (F16C) converters before the window loops
// and narrowed once after, which gives the bits of per-element conversion in a fraction of the
// time. widen returns src itself when T is already the compute type.
template <typename T>
const acc_t<T>* widen(const T* src, int64_t n, std::vector<acc_t<T>>& buf) {
  if constexpr (std::is_same_v<T, acc_t<T>>) {
    return src;
  } else {
    buf.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; i += cpu::kBlock)
      cpu::load_block<T>(reinterpret_cast<const char*>(src + i), sizeof(T), std::min(cpu::kBlock, n - i), buf.data() + i);
    return buf.data();
  }
}
template <typename T>
void narrow_into(const acc_t<T>* src, T* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += cpu::kBlock)
    cpu::store_block<T>(reinterpret_cast<char*>(dst + i), sizeof(T), std::min(cpu::kBlock, n - i), src + i);
}

// A gradient plane (H, W) is accumulated in the compute type A: directly in the output when
// T == A, else in a per-thread scratch plane rounded once into the output.
template <typename T>
struct GradPlanes {
  using A = acc_t<T>;
  static constexpr bool direct = std::is_same_v<T, A>;
  std::vector<A> scratch;
  int64_t size;
  explicit GradPlanes(int64_t plane) : scratch(direct ? 0 : static_cast<size_t>(omp_get_max_threads() * plane)), size(plane) {}
  // zero = false: the caller writes every element itself.
  A* begin(T* out, int thread, bool zero = true) {
    A* acc;
    if constexpr (direct)
      acc = out;
    else
      acc = scratch.data() + static_cast<int64_t>(thread) * size;
    if (zero) std::fill(acc, acc + size, A(0));
    return acc;
  }
  void finish(const A* acc, T* out) {
    if constexpr (!direct) narrow_into(acc, out, size);
  }
};

// ---- max_pool2d ----
// The taps of one window along one dim: first, end (exclusive), both inside [0, size).
struct Taps {
  int64_t lo, hi;
};
std::vector<Taps> max_taps(int64_t out, int64_t size, int64_t k, int64_t s, int64_t p, int64_t d) {
  std::vector<Taps> t(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    int64_t lo = o * s - p;
    const int64_t hi = std::min(lo + (k - 1) * d + 1, size);
    if (lo < 0) lo += (-lo + d - 1) / d * d;  // first tap inside the input
    t[static_cast<size_t>(o)] = {lo, hi};
  }
  return t;
}

// The 2x2, stride-2 window of every small CNN, with all four taps inside the plane: the same
// scan order and the same comparison as the general loop below (take a tap when it is greater
// than the best so far, or NaN), without branches, 4 windows at a time with SSE2 where there
// is SSE2 (a data-dependent branch per tap mispredicts on real activations).
template <typename A>
void max_pool_row_2x2_scalar(const A* r0, const A* r1, int64_t ow0, int64_t OW, A* out, int64_t* idx,
                             int64_t row0_index, int64_t W) {
  for (int64_t ow = ow0; ow < OW; ++ow) {
    const A t[4] = {r0[2 * ow], r0[2 * ow + 1], r1[2 * ow], r1[2 * ow + 1]};
    A bv = t[0];  // the general loop starts at -inf: t[0] is taken, or is -inf itself
    int code = 0;
    for (int k = 1; k < 4; ++k)
      if (t[k] > bv || t[k] != t[k]) bv = t[k], code = k;
    if (out) out[ow] = bv;
    if (idx) idx[ow] = row0_index + (code >> 1) * W + 2 * ow + (code & 1);
  }
}

template <typename A>
void max_pool_plane_2x2(const PoolGeom& g, const A* in, A* out, int64_t* idx) {
  static_assert(std::is_same_v<A, float> || std::is_same_v<A, double>);
  if constexpr (std::is_same_v<A, float>)
    if (g.H * g.W < (int64_t(1) << 31) && cpu::max_pool_2x2_avx512_available()) {
      return cpu::max_pool_plane_2x2_avx512(in, g.OH, g.OW, g.W, out, idx);  // 16 windows at a time, same bits
    }
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    const int64_t row0_index = 2 * oh * g.W;
    const A* r0 = in + row0_index;
    const A* r1 = r0 + g.W;
    A* orow = out ? out + oh * g.OW : nullptr;
    int64_t* irow = idx ? idx + oh * g.OW : nullptr;
    int64_t ow = 0;
#if defined(__SSE2__)
    if constexpr (std::is_same_v<A, float>) {
      for (; ow + 4 <= g.OW; ow += 4) {
        // Even and odd columns of 8 consecutive inputs: taps 0/1 (row 0) and 2/3 (row 1).
        const __m128 a0 = _mm_loadu_ps(r0 + 2 * ow), a1 = _mm_loadu_ps(r0 + 2 * ow + 4);
        const __m128 b0 = _mm_loadu_ps(r1 + 2 * ow), b1 = _mm_loadu_ps(r1 + 2 * ow + 4);
        const __m128 taps[4] = {_mm_shuffle_ps(a0, a1, _MM_SHUFFLE(2, 0, 2, 0)),
                                _mm_shuffle_ps(a0, a1, _MM_SHUFFLE(3, 1, 3, 1)),
                                _mm_shuffle_ps(b0, b1, _MM_SHUFFLE(2, 0, 2, 0)),
                                _mm_shuffle_ps(b0, b1, _MM_SHUFFLE(3, 1, 3, 1))};
        __m128 bv = taps[0];
        __m128i code = _mm_setzero_si128();
        for (int k = 1; k < 4; ++k) {
          const __m128 t = taps[k];
          const __m128 take = _mm_or_ps(_mm_cmpgt_ps(t, bv), _mm_cmpunord_ps(t, t));
          bv = _mm_or_ps(_mm_and_ps(take, t), _mm_andnot_ps(take, bv));
          const __m128i tk = _mm_castps_si128(take);
          code = _mm_or_si128(_mm_and_si128(tk, _mm_set1_epi32(k)), _mm_andnot_si128(tk, code));
        }
        if (orow) _mm_storeu_ps(orow + ow, bv);
        if (irow) {
          alignas(16) int32_t c[4];
          _mm_store_si128(reinterpret_cast<__m128i*>(c), code);
          for (int j = 0; j < 4; ++j) irow[ow + j] = row0_index + (c[j] >> 1) * g.W + 2 * (ow + j) + (c[j] & 1);
        }
      }
    }
#endif
    max_pool_row_2x2_scalar(r0, r1, ow, g.OW, orow, irow, row0_index, g.W);
  }
}

// The 2x2, stride-2 window with every tap inside the plane (the fast paths above).
bool is_2x2_fast(const PoolGeom& g) {
  return g.kH == 2 && g.kW == 2 && g.sH == 2 && g.sW == 2 && g.pH == 0 && g.pW == 0 && g.dH == 1 && g.dW == 1 &&
         2 * g.OH <= g.H && 2 * g.OW <= g.W;
}

template <typename T>
void max_pool_plane(const PoolGeom& g, const std::vector<Taps>& rows, const std::vector<Taps>& cols, const T* in,
                    T* out, int64_t* idx) {
  using A = acc_t<T>;
  if (is_2x2_fast(g)) {
    if constexpr (std::is_same_v<T, A>) return max_pool_plane_2x2<A>(g, in, out, idx);
  }
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    const Taps r = rows[static_cast<size_t>(oh)];
    for (int64_t ow = 0; ow < g.OW; ++ow) {
      const Taps c = cols[static_cast<size_t>(ow)];
      int64_t best = r.lo < r.hi && c.lo < c.hi ? r.lo * g.W + c.lo : -1;
      A bv = -std::numeric_limits<A>::infinity();
      for (int64_t h = r.lo; h < r.hi; h += g.dH) {
        const T* row = in + h * g.W;
        for (int64_t w = c.lo; w < c.hi; w += g.dW) {
          const A v = static_cast<A>(row[w]);
          const bool take = v > bv || v != v;  // greater, or NaN (which then sticks)
          bv = take ? v : bv;
          best = take ? h * g.W + w : best;
        }
      }
      if (out) out[oh * g.OW + ow] = static_cast<T>(bv);
      if (idx) idx[oh * g.OW + ow] = best;
    }
  }
}

// with_indices: (out, Int64 flat indices into each H*W plane); otherwise out only.
TensorList max_pool2d_forward(const OpCall& call, bool with_indices) {
  const Tensor& x = call.inputs[0];
  const WindowArgs a = WindowArgs::from(call.attrs);
  const PoolGeom g = window_geometry(call.name(), Shown::of(x), a);
  check_floating(call.name(), "input", x);
  Tensor xc = dense(x);
  Tensor out = Tensor::empty(g.out_sizes(), TensorOptions(x.dtype()));
  Tensor idx = with_indices ? Tensor::empty(g.out_sizes(), TensorOptions(DType::Int64)) : Tensor();
  visit_floating(x.dtype(), call.name(), [&]<typename T>() {
    const T* in = static_cast<const T*>(xc.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    int64_t* ix = with_indices ? idx.data_ptr<int64_t>() : nullptr;
    const std::vector<Taps> rows = max_taps(g.OH, g.H, g.kH, g.sH, g.pH, g.dH);
    const std::vector<Taps> cols = max_taps(g.OW, g.W, g.kW, g.sW, g.pW, g.dW);
    using A = acc_t<T>;
    // Per-thread widened planes (16-bit only): input, output.
    std::vector<std::vector<A>> win(static_cast<size_t>(omp_get_max_threads())), wout(win.size());
    for_each_plane(g.planes(), g.out_plane() * g.kH * g.kW, [&](int64_t p, int t) {
      const A* src = widen(in + p * g.in_plane(), g.in_plane(), win[static_cast<size_t>(t)]);
      int64_t* ixp = ix ? ix + p * g.out_plane() : nullptr;
      if constexpr (std::is_same_v<T, A>) {
        max_pool_plane<A>(g, rows, cols, src, o + p * g.out_plane(), ixp);
      } else {
        std::vector<A>& ob = wout[static_cast<size_t>(t)];
        ob.resize(static_cast<size_t>(g.out_plane()));
        max_pool_plane<A>(g, rows, cols, src, ob.data(), ixp);
        narrow_into(ob.data(), o + p * g.out_plane(), g.out_plane());  // exact: values came from T
      }
    });
  });
  if (with_indices) return {out, idx};
  return {out};
}
TensorList max_pool2d_cpu(const OpCall& call) { return max_pool2d_forward(call, false); }
TensorList max_pool2d_with_indices_cpu(const OpCall& call) { return max_pool2d_forward(call, true); }

// attrs: input_size (N, C, H, W)
TensorList max_pool2d_backward_cpu(const OpCall& call) {
  const Tensor& grad = call.inputs[0];
  const Tensor& indices = call.inputs[1];
  const IntList& in_size = call.attrs.get<IntList>("input_size");
  check_planes(call.name(), Shown::shape(in_size));
  check_floating(call.name(), "grad", grad);
  MT_CHECK(grad.dim() == 4 && grad.size(0) == in_size[0] && grad.size(1) == in_size[1], call.name(),
           ": expected grad (N, C, OH, OW) with N, C of input_size ", shape_str(in_size), ", got ", grad.describe());
  MT_CHECK(indices.dtype() == DType::Int64 && indices.sizes() == grad.sizes(), call.name(),
           ": expected Int64 indices of the grad's shape ", shape_str(grad.sizes()), ", got ", indices.describe());
  const int64_t plane = in_size[2] * in_size[3], oplane = grad.size(2) * grad.size(3);
  Tensor gc = dense(grad), ic = dense(indices);
  Tensor out = Tensor::empty(in_size, TensorOptions(grad.dtype()));
  std::atomic<int64_t> bad{0};
  visit_floating(grad.dtype(), call.name(), [&]<typename T>() {
    using A = acc_t<T>;
    const T* gp = static_cast<const T*>(gc.data_ptr());
    const int64_t* ip = ic.data_ptr<int64_t>();
    T* o = static_cast<T*>(out.data_ptr());
    GradPlanes<T> planes(plane);
    for_each_plane(in_size[0] * in_size[1], oplane + plane, [&](int64_t p, int t) {
      A* acc = planes.begin(o + p * plane, t);
      const T* gpl = gp + p * oplane;
      const int64_t* ipl = ip + p * oplane;
      for (int64_t i = 0; i < oplane; ++i) {
        const int64_t k = ipl[i];
        if (k >= 0 && k < plane)
          acc[k] += static_cast<A>(gpl[i]);
        else if (k != -1)  // -1: a window wholly in padding
          bad.store(k, std::memory_order_relaxed);
      }
      planes.finish(acc, o + p * plane);
    });
  });
  MT_CHECK(bad.load() == 0, call.name(), ": index ", bad.load(), " is outside its ", in_size[2], "x", in_size[3],
           " plane (indices must come from max_pool2d_with_indices on input_size ", shape_str(in_size), ")");
  return {out};
}

TensorList max_pool2d_backward_backward(BackwardContext& c) {
  // d/dgrad of a scatter is a gather: out[n, c, i] = G[n, c, idx[n, c, i]].
  const IntList& gs = c.input_sizes(0);
  const IntList& in = c.attrs.get<IntList>("input_size");
  Tensor G = c.grad().reshape({in[0], in[1], in[2] * in[3]});
  Tensor idx = c.input(1).reshape({gs[0], gs[1], gs[2] * gs[3]});
  return {gather(G, 2, idx).reshape(gs), Tensor()};
}

const OpSchema& kMaxPoolBackward = define_op("max_pool2d_backward")
                                       .save({1})
                                       .grad(max_pool2d_backward_backward)
                                       .kernel(DeviceType::CPU, max_pool2d_backward_cpu);

TensorList max_pool2d_with_indices_backward(BackwardContext& c) {
  return {dispatch1(kMaxPoolBackward, {c.grad(0), c.output(1)}, {{"input_size", c.input_sizes(0)}})};
}
const OpSchema& kMaxPoolWithIndices = define_op("max_pool2d_with_indices")
                                          .save({}, {1})
                                          .grad(max_pool2d_with_indices_backward)
                                          .kernel(DeviceType::CPU, max_pool2d_with_indices_cpu);

// max_pool2d keeps no indices: its backward op finds each window's argmax again in the saved
// input, one plane at a time, and scatters the gradient there. In a CNN that input is a ReLU's
// output, which the ReLU saves anyway, so nothing is kept for the pooling at all, where Int64
// indices would cost twice an f32 output (four times an f16 one), and no index tensor is ever
// materialised. attrs: the window arguments.
TensorList max_pool2d_input_backward_cpu(const OpCall& call) {
  const Tensor& grad = call.inputs[0];
  const Tensor& x = call.inputs[1];
  const WindowArgs a = WindowArgs::from(call.attrs);
  const PoolGeom g = window_geometry(call.name(), Shown::of(x), a);
  check_floating(call.name(), "grad", grad);
  MT_CHECK(grad.dtype() == x.dtype() && grad.sizes() == g.out_sizes(), call.name(), ": expected grad ",
           dtype_name(x.dtype()), shape_str(g.out_sizes()), " for input ", x.describe(), ", got ", grad.describe());
  Tensor gc = dense(grad), xc = dense(x);
  Tensor out = Tensor::empty(x.sizes(), TensorOptions(x.dtype()));
  const int64_t plane = g.in_plane(), oplane = g.out_plane();
  visit_floating(x.dtype(), call.name(), [&]<typename T>() {
    using A = acc_t<T>;
    const T* gp = static_cast<const T*>(gc.data_ptr());
    const T* in = static_cast<const T*>(xc.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    const std::vector<Taps> rows = max_taps(g.OH, g.H, g.kH, g.sH, g.pH, g.dH);
    const std::vector<Taps> cols = max_taps(g.OW, g.W, g.kW, g.sW, g.pW, g.dW);
    GradPlanes<T> planes(plane);
    std::vector<std::vector<int64_t>> idx(static_cast<size_t>(omp_get_max_threads()));
    std::vector<std::vector<A>> win(idx.size()), wgrad(idx.size());  // 16-bit only
    // The 2x2 window on f32 values with AVX-512: argmax and gradient in one pass per row, no zero
    // fill (but for the rows/columns no window covers) and no scatter; the same values.
    const bool fused = std::is_same_v<A, float> && is_2x2_fast(g) && plane < (int64_t(1) << 31) &&
                       cpu::max_pool_2x2_avx512_available();
    const bool uncovered = 2 * g.OH < g.H || 2 * g.OW < g.W;
    for_each_plane(g.planes(), oplane * g.kH * g.kW + plane, [&](int64_t p, int t) {
      const size_t ts = static_cast<size_t>(t);
      const A* xpl = widen(in + p * plane, plane, win[ts]);
      const A* gpl = widen(gp + p * oplane, oplane, wgrad[ts]);
      if constexpr (std::is_same_v<A, float>) {
        if (fused) {
          A* acc = planes.begin(o + p * plane, t, uncovered);
          cpu::max_pool_plane_2x2_grad_avx512(xpl, g.OH, g.OW, g.W, gpl, acc);
          planes.finish(acc, o + p * plane);
          return;
        }
      }
      std::vector<int64_t>& ix = idx[ts];
      ix.resize(static_cast<size_t>(oplane));
      max_pool_plane<A>(g, rows, cols, xpl, nullptr, ix.data());
      A* acc = planes.begin(o + p * plane, t);
      for (int64_t i = 0; i < oplane; ++i)
        if (ix[static_cast<size_t>(i)] >= 0) acc[ix[static_cast<size_t>(i)]] += gpl[i];
      planes.finish(acc, o + p * plane);
    });
  });
  return {out};
}

// Its adjoint in grad: gather G at the argmax positions (recomputed; the input gets no gradient:
// the argmax is piecewise constant).
TensorList max_pool2d_input_backward_backward(BackwardContext& c) {
  const IntList& gs = c.input_sizes(0);
  const IntList& in = c.input_sizes(1);
  Tensor idx;
  {
    NoGradGuard no_grad;
    idx = dispatch(kMaxPoolWithIndices, {c.input(1).detach()}, c.attrs)[1];
  }
  Tensor G = c.grad().reshape({in[0], in[1], in[2] * in[3]});
  return {gather(G, 2, idx.reshape({gs[0], gs[1], gs[2] * gs[3]})).reshape(gs), Tensor()};
}

const OpSchema& kMaxPoolInputBackward = define_op("max_pool2d_input_backward")
                                            .grad(max_pool2d_input_backward_backward)
                                            .kernel(DeviceType::CPU, max_pool2d_input_backward_cpu);

TensorList max_pool2d_backward_fn(BackwardContext& c) {
  return {dispatch1(kMaxPoolInputBackward, {c.grad(0), c.input(0)}, c.attrs)};
}

const OpSchema& kMaxPool = define_op("max_pool2d")
                               .save({0})
                               .grad(max_pool2d_backward_fn)
                               .kernel(DeviceType::CPU, max_pool2d_cpu);

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

Tensor mean_pool(const char* op, const Tensor& x, const PoolGeom& g, int64_t window_area, const Windows& win) {
  check_floating(op, "input", x);
  Tensor xc = dense(x);
  Tensor out = Tensor::empty(g.out_sizes(), TensorOptions(x.dtype()));
  visit_floating(x.dtype(), op, [&]<typename T>() {
    const T* in = static_cast<const T*>(xc.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
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
const OpSchema& kAvgPoolBackward = define_op("avg_pool2d_backward")
                                       .save({})
                                       .grad(avg_pool2d_backward_backward)
                                       .kernel(DeviceType::CPU, avg_pool2d_backward_cpu);

TensorList avg_pool2d_backward_fn(BackwardContext& c) {
  Attrs a = avg_attrs(WindowArgs::from(c.attrs), c.attrs.get<bool>("count_include_pad"));
  a.set("input_size", c.input_sizes(0));
  return {dispatch1(kAvgPoolBackward, {c.grad()}, std::move(a))};
}
const OpSchema& kAvgPool =
    define_op("avg_pool2d").save({}).grad(avg_pool2d_backward_fn).kernel(DeviceType::CPU, avg_pool2d_cpu);

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
const OpSchema& kAdaptiveBackward = define_op("adaptive_avg_pool2d_backward")
                                        .save({})
                                        .grad(adaptive_avg_pool2d_backward_backward)
                                        .kernel(DeviceType::CPU, adaptive_avg_pool2d_backward_cpu);

TensorList adaptive_avg_pool2d_backward_fn(BackwardContext& c) {
  return {dispatch1(kAdaptiveBackward, {c.grad()}, {{"input_size", c.input_sizes(0)}})};
}
const OpSchema& kAdaptive = define_op("adaptive_avg_pool2d")
                                .save({})
                                .grad(adaptive_avg_pool2d_backward_fn)
                                .kernel(DeviceType::CPU, adaptive_avg_pool2d_cpu);

TensorList adaptive_avg_pool2d_backward_backward(BackwardContext& c) {
  const IntList& gs = c.input_sizes(0);
  return {dispatch1(kAdaptive, {c.grad()}, {{"output_size", IntList{gs[2], gs[3]}}})};
}

// ---- public wrappers: (C, H, W) inputs run as a batch of one ----
void check_rank(const char* op, const Tensor& x) {
  MT_CHECK(x.defined(), op, ": input must be defined");
  MT_CHECK(x.dim() == 3 || x.dim() == 4, op, ": expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got ",
           x.describe());
}
Tensor batched(const Tensor& x) { return x.dim() == 3 ? x.unsqueeze(0) : x; }
IntList batched_size(const char* op, const IntList& s) {
  MT_CHECK(s.size() == 3 || s.size() == 4, op, ": input_size must be (C, H, W) or (N, C, H, W), got ", shape_str(s));
  if (s.size() == 4) return s;
  return {1, s[0], s[1], s[2]};
}

}  // namespace

namespace {
// Checks x and the window, then calls `op` on x with a batch dimension (added when x is 3-D).
TensorList call_max_pool(const OpSchema& op, const Tensor& x, const IntList& kernel_size, const IntList& stride,
                         const IntList& padding, const IntList& dilation, bool ceil_mode) {
  check_rank("max_pool2d", x);
  WindowArgs a = WindowArgs::normalise("max_pool2d", kernel_size, stride, padding, dilation, ceil_mode);
  Tensor xb = batched(x);
  window_geometry("max_pool2d", Shown{&x, xb.sizes()}, a);  // shape errors name the caller's tensor
  TensorList r = dispatch(op, {xb},
                          {{"kernel_size", a.kernel},
                           {"stride", a.stride},
                           {"padding", a.padding},
                           {"dilation", a.dilation},
                           {"ceil_mode", a.ceil_mode}});
  if (x.dim() == 3)
    for (Tensor& t : r) t = t.squeeze(0);
  return r;
}
}  // namespace

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const IntList& kernel_size, const IntList& stride,
                                                  const IntList& padding, const IntList& dilation, bool ceil_mode) {
  TensorList r = call_max_pool(kMaxPoolWithIndices, x, kernel_size, stride, padding, dilation, ceil_mode);
  return {r[0], r[1]};
}

Tensor max_pool2d(const Tensor& x, const IntList& kernel_size, const IntList& stride, const IntList& padding,
                  const IntList& dilation, bool ceil_mode) {
  return call_max_pool(kMaxPool, x, kernel_size, stride, padding, dilation, ceil_mode)[0];
}

Tensor max_pool2d_backward(const Tensor& grad, const Tensor& indices, const IntList& input_size) {
  MT_CHECK(grad.defined() && indices.defined(), "max_pool2d_backward: grad and indices must be defined");
  IntList size = batched_size("max_pool2d_backward", input_size);
  const bool unbatched = input_size.size() == 3;
  MT_CHECK(grad.dim() == static_cast<int64_t>(input_size.size()), "max_pool2d_backward: expected grad of rank ",
           input_size.size(), " (input_size ", shape_str(input_size), "), got ", grad.describe());
  Tensor r = dispatch1(kMaxPoolBackward, {unbatched ? grad.unsqueeze(0) : grad,
                                          unbatched && indices.dim() == 3 ? indices.unsqueeze(0) : indices},
                       {{"input_size", size}});
  return unbatched ? r.squeeze(0) : r;
}

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
  IntList out = pair_arg("adaptive_avg_pool2d", "output_size", output_size);
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
