// ops/cuda/pooling.cu — avg_pool2d / adaptive_avg_pool2d and their gradients (mean pooling, at the
// end of the file), max_pool2d forward (with indices or tap codes, ops/max_pool_taps.h) and its
// gradient ops on the device, with ops/max_pool.cpp's and ops/avg_pool.cpp's window rules: taps
// clipped to the plane, padding never chosen, row-major scan where a value wins if greater or NaN
// (first of equal maxima, NaN sticks), -1 (no tap) for a window wholly in padding. Tap codes in
// ops/max_pool_taps.h's formats; the 2-bit ones are written by one thread per code byte.
// Gradients are gathers, not scatters: one thread per input
// pixel visits the windows that can contain it in output order and adds the gradient of those
// whose argmax it is, in acc_t, rounding once — the CPU's accumulation order, so the result is
// bit-identical and deterministic (no atomics).
#include "ops/cuda/loops.cuh"
#include "ops/cuda/pooling_kernels.h"
#include "ops/max_pool_taps.h"

namespace mixtape::cuda {
namespace {

// First tap inside [0, size) and end (exclusive) of output position o's window along one dim.
__device__ __forceinline__ void taps(int64_t o, int64_t size, int64_t k, int64_t s, int64_t p, int64_t d, int64_t& lo,
                                     int64_t& hi) {
  lo = o * s - p;
  hi = lo + (k - 1) * d + 1;
  if (hi > size) hi = size;
  if (lo < 0) lo += (-lo + d - 1) / d * d;
}

template <typename T>
__device__ __forceinline__ int64_t window_argmax(const PoolGeom& g, const T* plane, int64_t oh, int64_t ow,
                                                 acc_t<T>& best_value) {
  using A = acc_t<T>;
  int64_t rlo, rhi, clo, chi;
  taps(oh, g.H, g.kH, g.sH, g.pH, g.dH, rlo, rhi);
  taps(ow, g.W, g.kW, g.sW, g.pW, g.dW, clo, chi);
  int64_t best = rlo < rhi && clo < chi ? rlo * g.W + clo : -1;
  A bv = -INFINITY;
  for (int64_t h = rlo; h < rhi; h += g.dH)
    for (int64_t w = clo; w < chi; w += g.dW) {
      const A v = static_cast<A>(plane[h * g.W + w]);
      const bool take = v > bv || v != v;
      bv = take ? v : bv;
      best = take ? h * g.W + w : best;
    }
  best_value = bv;
  return best;
}

// One thread per output; taps: codes of type C a value (TapFormat Byte, Int32), or null.
template <typename T, typename C>
__global__ void max_pool_forward_kernel(PoolGeom g, const T* x, T* out, int64_t* idx, C* taps) {
  const int64_t total = g.planes * g.OH * g.OW;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(blockDim.x) * gridDim.x) {
    const int64_t p = i / (g.OH * g.OW), r = i % (g.OH * g.OW);
    acc_t<T> bv;
    const int64_t best = window_argmax(g, x + p * g.H * g.W, r / g.OW, r % g.OW, bv);
    if (out) out[i] = static_cast<T>(bv);
    if (idx) idx[i] = best;
    if (taps) taps[i] = tap_of<C>(tap_window(g), r / g.OW, r % g.OW, best);
  }
}

// TapFormat Packed2: one thread per code byte, i.e. the (up to) 4 outputs of a row that share it,
// so no two threads write one byte; it writes their values and the byte, pad bits 0.
template <typename T>
__global__ void max_pool_forward_packed_kernel(PoolGeom g, const T* x, T* out, uint8_t* taps) {
  const int64_t row = packed_tap_bytes(g.OW), total = g.planes * g.OH * row;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(blockDim.x) * gridDim.x) {
    const int64_t p = i / (g.OH * row), r = i % (g.OH * row), oh = r / row, ow0 = 4 * (r % row);
    const int64_t ow1 = ow0 + 4 < g.OW ? ow0 + 4 : g.OW;
    unsigned byte = 0;
    for (int64_t ow = ow0; ow < ow1; ++ow) {
      acc_t<T> bv;
      const int64_t best = window_argmax(g, x + p * g.H * g.W, oh, ow, bv);
      out[(p * g.OH + oh) * g.OW + ow] = static_cast<T>(bv);
      byte |= (tap_of<unsigned>(tap_window(g), oh, ow, best) & 3u) << (2 * (ow - ow0));
    }
    taps[i] = static_cast<uint8_t>(byte);
  }
}

// codes: a reader of ops/max_pool_taps.h (TapCodes<C>, PackedTapCodes).
template <typename T, typename R>
__global__ void max_pool_tap_gather_kernel(PoolGeom g, const T* G, R codes, T* out) {
  const int64_t total = g.planes * g.OH * g.OW;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(blockDim.x) * gridDim.x) {
    const int64_t p = i / (g.OH * g.OW), r = i % (g.OH * g.OW), oh = r / g.OW, ow = r % g.OW;
    const int64_t pos = checked_position_of(tap_window(g), oh, ow, codes(p, oh, ow));
    out[i] = pos >= 0 ? G[p * g.H * g.W + pos] : static_cast<T>(acc_t<T>(0));
  }
}

// Output positions whose window may contain input coordinate c along one dim: [first, last].
__device__ __forceinline__ void covering(int64_t c, int64_t out, int64_t k, int64_t s, int64_t p, int64_t d,
                                         int64_t& first, int64_t& last) {
  // o*s - p <= c  and  o*s - p + (k-1)*d >= c
  const int64_t num = c + p - (k - 1) * d;
  first = num <= 0 ? 0 : (num + s - 1) / s;
  last = (c + p) / s;
  if (last > out - 1) last = out - 1;
}

// idx != null: flat indices (codes unused); else the codes' reader R (ops/max_pool_taps.h).
template <typename T, typename R>
__global__ void max_pool_backward_kernel(PoolGeom g, const T* grad_out, const int64_t* idx, R codes, T* grad_in) {
  using A = acc_t<T>;
  const int64_t total = g.planes * g.H * g.W;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(blockDim.x) * gridDim.x) {
    const int64_t p = i / (g.H * g.W), k = i % (g.H * g.W), h = k / g.W, w = k % g.W;
    int64_t oh0, oh1, ow0, ow1;
    covering(h, g.OH, g.kH, g.sH, g.pH, g.dH, oh0, oh1);
    covering(w, g.OW, g.kW, g.sW, g.pW, g.dW, ow0, ow1);
    const int64_t obase = p * g.OH * g.OW;
    A acc = 0;
    for (int64_t oh = oh0; oh <= oh1; ++oh)
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const int64_t o = obase + oh * g.OW + ow;
        const int64_t best = idx ? idx[o] : checked_position_of(tap_window(g), oh, ow, codes(p, oh, ow));
        if (best == k) acc += static_cast<A>(grad_out[o]);
      }
    grad_in[i] = static_cast<T>(acc);
  }
}

// One dim of a mean-pooling window of output o: taps [lo, hi) inside the input and this dim's
// factor of the divisor (ops/avg_pool.cpp's avg_spans / adaptive_spans).
__device__ __forceinline__ void mean_span(bool adaptive, bool include_pad, int64_t o, int64_t out, int64_t size,
                                          int64_t k, int64_t s, int64_t p, int64_t& lo, int64_t& hi, int64_t& count) {
  if (adaptive) {
    lo = o * size / out;
    hi = ((o + 1) * size + out - 1) / out;
    count = hi - lo;
    return;
  }
  lo = o * s - p;
  hi = lo + k < size + p ? lo + k : size + p;
  const int64_t padded = hi - lo;
  if (lo < 0) lo = 0;
  if (hi > size) hi = size;
  count = include_pad ? padded : hi - lo;
}

template <typename T>
__global__ void mean_pool_kernel(PoolGeom g, bool adaptive, bool include_pad, const T* x, T* out) {
  using A = acc_t<T>;
  const int64_t total = g.planes * g.OH * g.OW;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(blockDim.x) * gridDim.x) {
    const int64_t p = i / (g.OH * g.OW), r = i % (g.OH * g.OW), oh = r / g.OW, ow = r % g.OW;
    int64_t rlo, rhi, rc, clo, chi, cc;
    mean_span(adaptive, include_pad, oh, g.OH, g.H, g.kH, g.sH, g.pH, rlo, rhi, rc);
    mean_span(adaptive, include_pad, ow, g.OW, g.W, g.kW, g.sW, g.pW, clo, chi, cc);
    const T* plane = x + p * g.H * g.W;
    A s = 0;
    if (rlo < rhi && clo < chi) {
      for (int64_t h = rlo; h < rhi; ++h)
        for (int64_t w = clo; w < chi; ++w) s += static_cast<A>(plane[h * g.W + w]);
      s /= static_cast<A>(rc * cc);
    }
    out[i] = static_cast<T>(s);
  }
}

template <typename T>
__global__ void mean_unpool_kernel(PoolGeom g, bool adaptive, bool include_pad, const T* grad, T* grad_in) {
  using A = acc_t<T>;
  const int64_t total = g.planes * g.H * g.W;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(blockDim.x) * gridDim.x) {
    const int64_t p = i / (g.H * g.W), k = i % (g.H * g.W), h = k / g.W, w = k % g.W;
    // Candidate windows: all for adaptive pooling (few outputs), the covering range otherwise;
    // each is checked against its real (clipped) span.
    int64_t oh0 = 0, oh1 = g.OH - 1, ow0 = 0, ow1 = g.OW - 1;
    if (!adaptive) {
      covering(h, g.OH, g.kH, g.sH, g.pH, 1, oh0, oh1);
      covering(w, g.OW, g.kW, g.sW, g.pW, 1, ow0, ow1);
    }
    A acc = 0;
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      int64_t rlo, rhi, rc;
      mean_span(adaptive, include_pad, oh, g.OH, g.H, g.kH, g.sH, g.pH, rlo, rhi, rc);
      if (h < rlo || h >= rhi) continue;
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        int64_t clo, chi, cc;
        mean_span(adaptive, include_pad, ow, g.OW, g.W, g.kW, g.sW, g.pW, clo, chi, cc);
        if (w < clo || w >= chi) continue;
        acc += static_cast<A>(grad[(p * g.OH + oh) * g.OW + ow]) / static_cast<A>(rc * cc);
      }
    }
    grad_in[i] = static_cast<T>(acc);
  }
}

}  // namespace

cudaError_t launch_mean_pool(DType dt, const PoolGeom& g, bool adaptive, bool include_pad, const void* x, void* out,
                             cudaStream_t s) {
  const int64_t total = g.planes * g.OH * g.OW;
  if (total == 0) return cudaSuccess;
  return visit_floating_cuda(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch_kernel(mean_pool_kernel<T>, grid_for(total, kThreads), kThreads, 0, s, g, adaptive, include_pad,
                         static_cast<const T*>(x), static_cast<T*>(out));
  });
}

cudaError_t launch_mean_unpool(DType dt, const PoolGeom& g, bool adaptive, bool include_pad, const void* grad_out,
                               void* grad_in, cudaStream_t s) {
  const int64_t total = g.planes * g.H * g.W;
  if (total == 0) return cudaSuccess;
  return visit_floating_cuda(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch_kernel(mean_unpool_kernel<T>, grid_for(total, kThreads), kThreads, 0, s, g, adaptive, include_pad,
                         static_cast<const T*>(grad_out), static_cast<T*>(grad_in));
  });
}

namespace {
// Calls fn(codes) with the reader of codes `taps` in format tf (ops/max_pool_taps.h).
template <typename Fn>
cudaError_t visit_taps_cuda(const PoolGeom& g, const void* taps, TapFormat tf, Fn&& fn) {
  switch (tf) {
    case TapFormat::Packed2:
      return fn(PackedTapCodes{static_cast<const uint8_t*>(taps), g.OH, packed_tap_bytes(g.OW)});
    case TapFormat::Byte: return fn(TapCodes<uint8_t>{static_cast<const uint8_t*>(taps), g.OH, g.OW});
    case TapFormat::Int32: return fn(TapCodes<int32_t>{static_cast<const int32_t*>(taps), g.OH, g.OW});
  }
  return cudaErrorInvalidValue;
}
}  // namespace

cudaError_t launch_max_pool_forward(DType dt, const PoolGeom& g, const void* x, void* out, int64_t* idx, void* taps,
                                    TapFormat tf, cudaStream_t s) {
  const int64_t total = g.planes * g.OH * g.OW;
  if (total == 0) return cudaSuccess;
  return visit_floating_cuda(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (taps && tf == TapFormat::Packed2) {
      const int64_t bytes = g.planes * g.OH * packed_tap_bytes(g.OW);
      return launch_kernel(max_pool_forward_packed_kernel<T>, grid_for(bytes, kThreads), kThreads, 0, s, g,
                           static_cast<const T*>(x), static_cast<T*>(out), static_cast<uint8_t*>(taps));
    }
    auto run = [&](auto* codes) {
      using C = std::remove_pointer_t<decltype(codes)>;
      return launch_kernel(max_pool_forward_kernel<T, C>, grid_for(total, kThreads), kThreads, 0, s, g,
                           static_cast<const T*>(x), static_cast<T*>(out), idx, codes);
    };
    return taps && tf == TapFormat::Int32 ? run(static_cast<int32_t*>(taps)) : run(static_cast<uint8_t*>(taps));
  });
}

cudaError_t launch_max_pool_backward(DType dt, const PoolGeom& g, const void* grad_out, const int64_t* idx,
                                     const void* taps, TapFormat tf, void* grad_in, cudaStream_t s) {
  const int64_t total = g.planes * g.H * g.W;
  if (total == 0) return cudaSuccess;
  return visit_floating_cuda(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return visit_taps_cuda(g, taps, idx ? TapFormat::Byte : tf, [&](auto codes) {
      return launch_kernel(max_pool_backward_kernel<T, decltype(codes)>, grid_for(total, kThreads), kThreads, 0, s,
                           g, static_cast<const T*>(grad_out), idx, codes, static_cast<T*>(grad_in));
    });
  });
}

cudaError_t launch_max_pool_tap_gather(DType dt, const PoolGeom& g, const void* G, const void* taps, TapFormat tf,
                                       void* out, cudaStream_t s) {
  const int64_t total = g.planes * g.OH * g.OW;
  if (total == 0) return cudaSuccess;
  return visit_floating_cuda(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return visit_taps_cuda(g, taps, tf, [&](auto codes) {
      return launch_kernel(max_pool_tap_gather_kernel<T, decltype(codes)>, grid_for(total, kThreads), kThreads, 0, s,
                           g, static_cast<const T*>(G), codes, static_cast<T*>(out));
    });
  });
}

}  // namespace mixtape::cuda
