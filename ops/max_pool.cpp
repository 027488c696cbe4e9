// ops/max_pool.cpp — max_pool2d, max_pool2d_with_indices and their gradient ops:
// max_pool2d_backward (from PyTorch's Int64 indices) and max_pool2d_tap_backward /
// max_pool2d_tap_gather (from the tap codes max_pool2d keeps, ops/max_pool_taps.h).
//
// Windows: rows i sH - pH + m dH, m < kH, clipped to [0, H); padding is -inf (never chosen); the
// output size is ops/pool_geometry.cpp's. max_pool2d_with_indices returns h W + w within the
// plane (PyTorch's return_indices). Scan is row-major and a value replaces the running max if
// greater or NaN: the first of equal maxima wins, NaN propagates. A window lying wholly in padding
// (possible only with a dilation larger than the input) gives -inf, index -1 and no tap (no gradient).
// Saved for backward: max_pool2d keeps its winning tap per output, never its input: 2 bits for
// windows of up to 4 taps that are never empty (a 2x2 window: 1 byte per 16 input values, 1/64 of
// their f32 bytes), else 1 byte (up to 255 taps) or 4 (ops/max_pool_taps.h's formats).
// Invariant: every path (the general loop, the 2x2 SSE2 and AVX-512 fast paths, f32 and BF16) picks
// the same tap for every window, so the forward value, the index and the tap code always agree.
// Numerics: 16-bit values are compared in f32 (f64 for f64 inputs) and stored exactly (a max is
// one of the inputs); 16-bit gradients accumulate in an f32 plane and are rounded once.
//
// Gradient ops, each the adjoint of its forward (so every backward is differentiable again):
//   max_pool2d_backward(g, idx):  zeros (N, C, H, W), plane[idx] += g   (scatter, accumulates
//                                 where windows overlap);  its backward: gather G at idx
//   max_pool2d_tap_backward(g, taps): the same scatter at the taps' pixels; its backward:
//                                 max_pool2d_tap_gather(G, taps), G at the taps' pixels
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <vector>

#include "autograd/grad_mode.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/isa.h"
#include "ops/cpu/kernel_table.h"
#include "ops/cpu/max_pool_2x2_avx512.h"
#include "ops/max_pool_taps.h"
#include "ops/op_def.h"
#include "ops/pool_geometry.h"
#include "ops/pool_planes.h"
#include "ops/pooling.h"

namespace mixtape {
using namespace pool_impl;  // the shared plane machinery (ops/pool_planes.h)
namespace {

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

// The 2x2, stride-2 window with every tap inside the plane (the fast paths below).
bool is_2x2_fast(const PoolGeom& g) {
  return g.kH == 2 && g.kW == 2 && g.sH == 2 && g.sW == 2 && g.pH == 0 && g.pW == 0 && g.dH == 1 && g.dW == 1 &&
         2 * g.OH <= g.H && 2 * g.OW <= g.W;
}

// ---- the kernel lists: op.pass max_pool2d.fwd (max_pool2d, max_pool2d_with_indices) and
// max_pool2d.bwd (max_pool2d_tap_backward), first entry that applies runs ----
//   f32, f16, bf16  2x2_avx512 (ops/cpu/max_pool_2x2_avx512.h) · 2x2_sse2 · generic
//   f64             2x2_scalar · generic
// f16 runs on planes widened to f32; bf16 too, but on 2x2_avx512, which reads and writes BF16 in
// registers. 2x2_sse2 is the SSE2 loop with a scalar tail (scalar alone where there is no SSE2).
// Every entry picks the generic loop's tap (the invariant above), so the choice changes speed only;
// no measured threshold: the 2x2 kernels win wherever the window allows them. The forward's
// 2x2_avx512 writes the 2-bit tap codes in its pass (16 codes, 4 bytes); the other entries derive
// them afterwards. The backward: 2x2_avx512 writes each window's four taps from the codes in one
// pass (f32, bf16), the other 2x2 entries scatter into a zeroed plane (taps decoded by shifts),
// generic decodes any window.
enum class PoolKernel { TwoByTwoAvx512, TwoByTwo, Generic };
struct PoolProblem {
  const PoolGeom& g;
  DType dt;
  bool ceil;
};
const char* two_by_two_declines(const PoolProblem& p) {
  return is_2x2_fast(p.g) ? nullptr : "not a 2x2 window of stride 2 without padding or dilation inside the plane";
}
const char* two_by_two_avx512_declines(const PoolProblem& p) {
  if (const char* why = two_by_two_declines(p)) return why;
  if (p.g.in_plane() >= (int64_t(1) << 31)) return "a plane of 2^31 values or more (its indices are 32-bit)";
  return cpu::max_pool_2x2_avx512_available() ? nullptr : "no AVX-512 F/BW/VL (isa_avx512)";
}
using PoolEntry = cpu::FixedKernelEntry<PoolProblem>;
const PoolEntry kPoolFloat[] = {{"2x2_avx512", two_by_two_avx512_declines},
                                {"2x2_sse2", two_by_two_declines},
                                {"generic", nullptr}};
const PoolEntry kPoolF64[] = {{"2x2_scalar", two_by_two_declines}, {"generic", nullptr}};
const bool kPoolRegistered =
    cpu::register_kernel_list("max_pool2d.fwd", kPoolFloat) && cpu::register_kernel_list("max_pool2d.fwd", kPoolF64) &&
    cpu::register_kernel_list("max_pool2d.bwd", kPoolFloat) && cpu::register_kernel_list("max_pool2d.bwd", kPoolF64);

PoolKernel pool_kernel(const char* op_pass, const PoolGeom& g, DType dt, bool ceil) {
  const PoolProblem p{g, dt, ceil};
  const bool f64 = dt == DType::Float64;
  const cpu::KernelPick k = f64 ? cpu::choose_kernel(op_pass, kPoolF64, p) : cpu::choose_kernel(op_pass, kPoolFloat, p);
  cpu::trace_kernel_choice(
      op_pass,
      [&] {
        auto two = [](const char* key, int64_t a, int64_t b) {
          std::string t = std::string(" ").append(key).append(std::to_string(a));
          if (a != b) t.append("x").append(std::to_string(b));
          return t;
        };
        return std::string(dtype_short(dt)) + " N=" + std::to_string(g.N) + " C=" + std::to_string(g.C) +
               " H=" + std::to_string(g.H) + " W=" + std::to_string(g.W) + two("k", g.kH, g.kW) +
               two("s", g.sH, g.sW) + two("p", g.pH, g.pW) + two("d", g.dH, g.dW) + " ceil=" + (ceil ? "1" : "0") +
               cpu::isa_tag();
      },
      k.name, k.skipped);
  return static_cast<PoolKernel>(k.index + (f64 ? 1 : 0));
}

template <typename A>
void max_pool_plane_2x2(const PoolGeom& g, const A* in, A* out, int64_t* idx, uint8_t* taps, PoolKernel k) {
  static_assert(std::is_same_v<A, float> || std::is_same_v<A, double>);
  if constexpr (std::is_same_v<A, float>)
    if (k == PoolKernel::TwoByTwoAvx512) {  // 16 windows at a time, same bits, the codes in the same pass
      return cpu::max_pool_plane_2x2_avx512(in, g.OH, g.OW, g.W, out, idx, taps);
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


template <typename T>
void max_pool_plane(const PoolGeom& g, const std::vector<Taps>& rows, const std::vector<Taps>& cols, const T* in,
                    T* out, int64_t* idx, uint8_t* taps, PoolKernel k) {
  using A = acc_t<T>;
  if (k != PoolKernel::Generic) {
    if constexpr (std::is_same_v<T, A>) return max_pool_plane_2x2<A>(g, in, out, idx, taps, k);
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

// One plane's tap codes from its flat argmax indices (any window).
template <typename C>
void taps_from_indices(const PoolGeom& g, const int64_t* idx, C* taps) {
  const TapWindow tw = tap_window(g);
  for (int64_t oh = 0; oh < g.OH; ++oh)
    for (int64_t ow = 0; ow < g.OW; ++ow) taps[oh * g.OW + ow] = tap_of<C>(tw, oh, ow, idx[oh * g.OW + ow]);
}
// The same as 2-bit codes (TapFormat::Packed2: every window has a winner, codes 0..3).
void packed_taps_from_indices(const PoolGeom& g, const int64_t* idx, uint8_t* taps) {
  const TapWindow tw = tap_window(g);
  const int64_t row = packed_tap_bytes(g.OW);
  for (int64_t oh = 0; oh < g.OH; ++oh)
    for (int64_t ow0 = 0; ow0 < g.OW; ow0 += 4) {
      unsigned byte = 0;
      for (int64_t ow = ow0; ow < std::min(ow0 + 4, g.OW); ++ow)
        byte |= (tap_of<unsigned>(tw, oh, ow, idx[oh * g.OW + ow]) & 3u) << (2 * (ow - ow0));
      taps[oh * row + ow0 / 4] = static_cast<uint8_t>(byte);
    }
}

// One 2x2 plane's tap codes (2-bit, packed) from its input and output, without indices (the
// 2x2_sse2 and 2x2_scalar entries; 2x2_avx512 writes them in its pass): the scan takes a tap only
// when greater or NaN, so the winner is the first tap equal to the output, or, for a NaN output,
// the last NaN tap (each NaN tap is taken).
template <typename T>
void taps_2x2_from_output(const PoolGeom& g, const T* in, const T* out, uint8_t* taps) {
  using A = acc_t<T>;
  const int64_t row = packed_tap_bytes(g.OW);
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    const T* r0 = in + 2 * oh * g.W;
    const T* r1 = r0 + g.W;
    uint8_t* trow = taps + oh * row;
    std::memset(trow, 0, static_cast<size_t>(row));  // the pad bits of a last partial byte
    for (int64_t ow = 0; ow < g.OW; ++ow) {
      const A t0 = static_cast<A>(r0[2 * ow]), t1 = static_cast<A>(r0[2 * ow + 1]);
      const A t2 = static_cast<A>(r1[2 * ow]), t3 = static_cast<A>(r1[2 * ow + 1]);
      const A o = static_cast<A>(out[oh * g.OW + ow]);
      // Branch-free (a branch per tap mispredicts on real activations, as in the forward loops):
      // eq counts the leading taps unequal to o; nan is the position of the last NaN tap.
      const int n0 = t0 != o, n1 = n0 & (t1 != o), n2 = n1 & (t2 != o);
      const int eq = n0 + n1 + n2;
      const int a3 = t3 != t3, a2 = !a3 & (t2 != t2), a1 = !a3 & !a2 & (t1 != t1);
      const int nan = 3 * a3 + 2 * a2 + a1;
      const int o_nan = o != o;
      trow[ow >> 2] |= static_cast<uint8_t>((eq ^ ((eq ^ nan) & -o_nan)) << (2 * (ow & 3)));
    }
  }
}

// What the forward returns besides its output: nothing, PyTorch's Int64 flat indices into each
// H*W plane (max_pool2d_with_indices), or the tap codes max_pool2d keeps for backward.
enum class Keep { Output, Indices, Taps };

TensorList max_pool2d_forward(const OpCall& call, Keep keep) {
  const Tensor& x = call.inputs[0];
  const WindowArgs a = WindowArgs::from(call.attrs);
  const PoolGeom g = window_geometry(call.name(), Shown::of(x), a);
  check_floating(call.name(), "input", x);
  Tensor xc = dense(x);
  Tensor out = Tensor::empty(g.out_sizes(), TensorOptions(x.dtype()));
  Tensor idx = keep == Keep::Indices ? Tensor::empty(g.out_sizes(), TensorOptions(DType::Int64)) : Tensor();
  const TapFormat tap_fmt = max_pool_tap_format(g);
  const int64_t tap_plane = g.OH * tap_row_length(tap_fmt, g.OW);  // code elements per plane
  Tensor taps = keep == Keep::Taps ? Tensor::empty({g.N, g.C, g.OH, tap_row_length(tap_fmt, g.OW)},
                                                   TensorOptions(tap_format_dtype(tap_fmt)))
                                   : Tensor();
  visit_floating(x.dtype(), call.name(), [&]<typename T>() {
    const T* in = static_cast<const T*>(xc.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    int64_t* ix = keep == Keep::Indices ? idx.data_ptr<int64_t>() : nullptr;
    const std::vector<Taps> rows = max_taps(g.OH, g.H, g.kH, g.sH, g.pH, g.dH);
    const std::vector<Taps> cols = max_taps(g.OW, g.W, g.kW, g.sW, g.pW, g.dW);
    using A = acc_t<T>;
    // Per-thread widened planes (16-bit only): input, output; and the plane's indices when only
    // its tap codes are kept (every kernel finds the flat index; the codes follow from it).
    std::vector<std::vector<A>> win(static_cast<size_t>(omp_get_max_threads())), wout(win.size());
    std::vector<std::vector<int64_t>> pidx(win.size());
    const PoolKernel k = pool_kernel("max_pool2d.fwd", g, x.dtype(), a.ceil_mode);
    const bool bf16_2x2 = std::is_same_v<T, BFloat16> && k == PoolKernel::TwoByTwoAvx512;
    for_each_plane(g.planes(), g.out_plane() * g.kH * g.kW, [&](int64_t p, int t) {
      int64_t* ixp = ix ? ix + p * g.out_plane() : nullptr;
      const bool two = k != PoolKernel::Generic;  // 2x2 codes come from the kernel or the output, no indices
      if (keep == Keep::Taps && !two) {
        std::vector<int64_t>& b = pidx[static_cast<size_t>(t)];
        b.resize(static_cast<size_t>(g.out_plane()));
        ixp = b.data();
      }
      // 2x2_avx512 writes the codes in its pass (Packed2: a 2x2 window inside the plane).
      uint8_t* kt =
          keep == Keep::Taps && k == PoolKernel::TwoByTwoAvx512 ? taps.data_ptr<uint8_t>() + p * tap_plane : nullptr;
      bool done = false;
      if constexpr (std::is_same_v<T, BFloat16>) {
        if (bf16_2x2) {  // widened in registers, the same bits as the widened plane's
          cpu::max_pool_plane_2x2_avx512(in + p * g.in_plane(), g.OH, g.OW, g.W, o + p * g.out_plane(), ixp, kt);
          done = true;
        }
      }
      if (!done) {
        const A* src = widen(in + p * g.in_plane(), g.in_plane(), win[static_cast<size_t>(t)]);
        if constexpr (std::is_same_v<T, A>) {
          max_pool_plane<A>(g, rows, cols, src, o + p * g.out_plane(), ixp, kt, k);
        } else {
          std::vector<A>& ob = wout[static_cast<size_t>(t)];
          ob.resize(static_cast<size_t>(g.out_plane()));
          max_pool_plane<A>(g, rows, cols, src, ob.data(), ixp, kt, k);
          narrow_into(ob.data(), o + p * g.out_plane(), g.out_plane());  // exact: values came from T
        }
      }
      if (keep == Keep::Taps && !kt) {
        if (two)  // a 2x2 window inside the plane: Packed2
          taps_2x2_from_output(g, in + p * g.in_plane(), o + p * g.out_plane(),
                               taps.data_ptr<uint8_t>() + p * tap_plane);
        else if (tap_fmt == TapFormat::Packed2)
          packed_taps_from_indices(g, ixp, taps.data_ptr<uint8_t>() + p * tap_plane);
        else if (tap_fmt == TapFormat::Byte)
          taps_from_indices(g, ixp, taps.data_ptr<uint8_t>() + p * tap_plane);
        else
          taps_from_indices(g, ixp, taps.data_ptr<int32_t>() + p * tap_plane);
      }
    });
  });
  if (keep == Keep::Indices) return {out, idx};
  return {out, taps};
}
// max_pool2d: the tap codes unless the call says "taps": false (max_pool2d() asks for them only
// when the call is recorded for backward, the autograd layer's rule).
TensorList max_pool2d_cpu(const OpCall& call) {
  const bool taps = !call.attrs.has("taps") || call.attrs.get<bool>("taps");
  return max_pool2d_forward(call, taps ? Keep::Taps : Keep::Output);
}
TensorList max_pool2d_with_indices_cpu(const OpCall& call) { return max_pool2d_forward(call, Keep::Indices); }

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

// Samples: random inputs have no ties within the gradcheck's step, so each window's argmax is
// stable. In 16 bits ties do occur; the CPU and CUDA kernels both take the first maximum in window
// order (PyTorch's rule), so they still agree.
const OpSchema& kMaxPoolBackward =
    define_op("max_pool2d_backward")
        .save({1})
        .grad(max_pool2d_backward_backward)
        .kernel(DeviceType::CPU, max_pool2d_backward_cpu)
        // The indices of max_pool2d_with_indices on a second, constant input.
        .sample("overlap", {arg({1, 2, 5, 5}), arg({1, 2, 5, 5}).constant()}, [](const TensorList& x) {
          Tensor idx = max_pool2d_with_indices(x[1], {3}, {1}, {1}).second;
          return TensorList{max_pool2d_backward(x[0], idx, {1, 2, 5, 5})};
        });

TensorList max_pool2d_with_indices_backward(BackwardContext& c) {
  return {dispatch1(kMaxPoolBackward, {c.grad(0), c.output(1)}, {{"input_size", c.input_sizes(0)}})};
}
const OpSchema& kMaxPoolWithIndices =
    define_op("max_pool2d_with_indices")
        .save({}, {1})
        .grad(max_pool2d_with_indices_backward)
        .kernel(DeviceType::CPU, max_pool2d_with_indices_cpu)
        .sample("overlap", {arg({1, 2, 5, 6})}, [](const TensorList& x) {
          auto [y, idx] = max_pool2d_with_indices(x[0], {3}, {1}, {1});
          return TensorList{y, idx};
        });

// ---- max_pool2d's own backward: the scatter from its tap codes (ops/max_pool_taps.h) ----
// max_pool2d keeps 2 bits per output (windows of up to 4 taps, never empty) or a UInt8 code
// (up to 255 taps) instead of its input or PyTorch's 8-byte indices; the gradient ops read the
// window arguments from their attrs and the input size from theirs (input_size, G's shape), which
// fix the codes' format (max_pool_tap_format).
//   max_pool2d_tap_backward(g, taps; window, input_size): zeros (N, C, H, W), pixel += g
//   max_pool2d_tap_gather(G, taps; window): (N, C, OH, OW), G at each winner (0 for none)
// Each is the other's adjoint in its first input (so every backward is differentiable again);
// the codes get no gradient. A code that is no tap of its window inside the plane (codes made by
// hand) is refused by name; the pad bits of a packed row are never read.
// Calls fn(codes) with a reader of the codes (ops/max_pool_taps.h's TapCodes, PackedTapCodes).
template <typename Fn>
void visit_taps(const PoolGeom& g, const Tensor& taps, Fn&& fn) {
  switch (max_pool_tap_format(g)) {
    case TapFormat::Packed2:
      return fn(PackedTapCodes{static_cast<const uint8_t*>(taps.data_ptr()), g.OH, packed_tap_bytes(g.OW)});
    case TapFormat::Byte: return fn(TapCodes<uint8_t>{static_cast<const uint8_t*>(taps.data_ptr()), g.OH, g.OW});
    case TapFormat::Int32: return fn(TapCodes<int32_t>{static_cast<const int32_t*>(taps.data_ptr()), g.OH, g.OW});
  }
}

// attrs: the window arguments and input_size (N, C, H, W)
TensorList max_pool2d_tap_backward_cpu(const OpCall& call) {
  const Tensor& grad = call.inputs[0];
  const Tensor& taps = call.inputs[1];
  const WindowArgs a = WindowArgs::from(call.attrs);
  const IntList& in_size = call.attrs.get<IntList>("input_size");
  check_planes(call.name(), Shown::shape(in_size));
  const PoolGeom g = window_geometry(call.name(), Shown::shape(in_size), a);
  check_floating(call.name(), "grad", grad);
  check_grad_shape(call.name(), g, grad);
  check_max_pool_taps(call.name(), g, taps);
  const Tensor gc = dense(grad), tc = dense(taps);
  Tensor out = Tensor::empty(in_size, TensorOptions(grad.dtype()));
  const int64_t plane = g.in_plane(), oplane = g.out_plane();
  const TapWindow tw = tap_window(g);
  const PoolKernel k = pool_kernel("max_pool2d.bwd", g, grad.dtype(), a.ceil_mode);
  std::atomic<int64_t> bad{-1};
  visit_floating(grad.dtype(), call.name(), [&]<typename T>() {
    using A = acc_t<T>;
    const T* gp = static_cast<const T*>(gc.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    GradPlanes<T> planes(plane);
    visit_taps(g, tc, [&]<typename R>(const R& codes) {
      for_each_plane(g.planes(), oplane + plane, [&](int64_t p, int t) {
        const T* gpl = gp + p * oplane;
        if constexpr (std::is_same_v<R, PackedTapCodes>) {
          if (k != PoolKernel::Generic) {
            // 2x2, stride 2, inside the plane (always Packed2): tap c is (c >> 1, c & 1), every
            // 2-bit code is one, and windows do not overlap, so each pixel gets at most one
            // gradient: written as 0 + g rounded once (the bits of the accumulation: -0 becomes
            // +0), straight into the output plane, no f32 scratch.
            T* gx = o + p * plane;
            if constexpr (std::is_same_v<T, float> || std::is_same_v<T, BFloat16>) {
              if (k == PoolKernel::TwoByTwoAvx512) {  // the windows' taps in one pass, 16 windows at a time
                cpu::max_pool_plane_2x2_tap_grad_avx512(codes.p + p * g.OH * codes.row, g.OH, g.OW, g.W, gpl, gx);
                // What the windows do not cover (an odd last row or column) gets +0 (all zero bits).
                if (g.W > 2 * g.OW)
                  for (int64_t h = 0; h < 2 * g.OH; ++h)
                    std::memset(static_cast<void*>(gx + h * g.W + 2 * g.OW), 0,
                                static_cast<size_t>(g.W - 2 * g.OW) * sizeof(T));
                std::memset(static_cast<void*>(gx + 2 * g.OH * g.W), 0,
                            static_cast<size_t>((g.H - 2 * g.OH) * g.W) * sizeof(T));
                return;
              }
            }
            std::memset(static_cast<void*>(gx), 0, static_cast<size_t>(plane) * sizeof(T));  // +0 is all zero bits
            for (int64_t oh = 0; oh < g.OH; ++oh)
              for (int64_t ow = 0; ow < g.OW; ++ow) {
                const int c = codes(p, oh, ow);
                gx[(2 * oh + (c >> 1)) * g.W + 2 * ow + (c & 1)] =
                    static_cast<T>(A(0) + static_cast<A>(gpl[oh * g.OW + ow]));
              }
            return;
          }
        }
        A* acc = planes.begin(o + p * plane, t);
        for (int64_t oh = 0; oh < g.OH; ++oh)
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            const auto c = codes(p, oh, ow);
            const int64_t pos = checked_position_of(tw, oh, ow, c);
            if (pos == -2) bad.store(static_cast<int64_t>(c), std::memory_order_relaxed);
            if (pos >= 0) acc[pos] += static_cast<A>(gpl[oh * g.OW + ow]);  // -1: a window wholly in padding
          }
        planes.finish(acc, o + p * plane);
      });
    });
  });
  MT_CHECK(bad.load() == -1, call.name(), ": tap code ", bad.load(), " is not a tap inside the plane of its ", g.kH,
           "x", g.kW, " window (codes must come from max_pool2d on input_size ", shape_str(in_size), ")");
  return {out};
}

// attrs: the window arguments
TensorList max_pool2d_tap_gather_cpu(const OpCall& call) {
  const Tensor& G = call.inputs[0];
  const Tensor& taps = call.inputs[1];
  const WindowArgs a = WindowArgs::from(call.attrs);
  const PoolGeom g = window_geometry(call.name(), Shown::of(G), a);
  check_floating(call.name(), "input", G);
  check_max_pool_taps(call.name(), g, taps);
  const Tensor Gc = dense(G), tc = dense(taps);
  Tensor out = Tensor::empty(g.out_sizes(), TensorOptions(G.dtype()));
  const int64_t plane = g.in_plane(), oplane = g.out_plane();
  const TapWindow tw = tap_window(g);
  std::atomic<int64_t> bad{-1};
  visit_floating(G.dtype(), call.name(), [&]<typename T>() {
    const T* src = static_cast<const T*>(Gc.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    visit_taps(g, tc, [&]<typename R>(const R& codes) {
      for_each_plane(g.planes(), oplane, [&](int64_t p, int) {
        for (int64_t oh = 0; oh < g.OH; ++oh)
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            const auto c = codes(p, oh, ow);
            const int64_t pos = checked_position_of(tw, oh, ow, c);
            if (pos == -2) bad.store(static_cast<int64_t>(c), std::memory_order_relaxed);
            o[p * oplane + oh * g.OW + ow] = pos >= 0 ? src[p * plane + pos] : static_cast<T>(acc_t<T>(0));
          }
      });
    });
  });
  MT_CHECK(bad.load() == -1, call.name(), ": tap code ", bad.load(), " is not a tap inside the plane of its ", g.kH,
           "x", g.kW, " window (codes must come from max_pool2d on input ", G.describe(), ")");
  return {out};
}

// The window arguments of a call's attrs (without max_pool2d's "taps" or a gradient's input_size).
Attrs window_attrs(const Attrs& a) {
  return {{"kernel_size", a.get<IntList>("kernel_size")},
          {"stride", a.get<IntList>("stride")},
          {"padding", a.get<IntList>("padding")},
          {"dilation", a.get<IntList>("dilation")},
          {"ceil_mode", a.get<bool>("ceil_mode")}};
}
const OpSchema& max_pool2d_tap_backward_op();
const OpSchema& max_pool2d_tap_gather_op();

TensorList max_pool2d_tap_backward_backward(BackwardContext& c) {
  return {dispatch1(max_pool2d_tap_gather_op(), {c.grad(), c.input(1)}, window_attrs(c.attrs)), Tensor()};
}
TensorList max_pool2d_tap_gather_backward(BackwardContext& c) {
  return {dispatch1(max_pool2d_tap_backward_op(), {c.grad(), c.input(1)},
                    window_attrs(c.attrs).set("input_size", c.input_sizes(0))),
          Tensor()};
}

// The codes of max_pool2d on a second, constant input (its window in the sample's attrs).
TensorList tap_sample(const OpSchema& op, const TensorList& x, const IntList& k, const IntList& s, const IntList& p,
                      const IntList& d, bool ceil, bool gather);
const OpSchema& kMaxPoolTapBackward =
    define_op("max_pool2d_tap_backward")
        .save({1})
        .grad(max_pool2d_tap_backward_backward)
        .kernel(DeviceType::CPU, max_pool2d_tap_backward_cpu)
        // stride 1 < kernel 3: windows overlap, a pixel's gradient accumulates; padding and ceil
        .sample("overlap", {arg({1, 2, 5, 5}), arg({1, 2, 5, 5}).constant()},
                [](const TensorList& x) {
                  return tap_sample(max_pool2d_tap_backward_op(), x, {3, 3}, {1, 1}, {1, 1}, {1, 1}, false, false);
                },
                sums_of(9))
        .sample("2x2", {arg({2, 3, 3, 3}), arg({2, 3, 6, 7}).constant()},
                [](const TensorList& x) {
                  return tap_sample(max_pool2d_tap_backward_op(), x, {2, 2}, {2, 2}, {0, 0}, {1, 1}, false, false);
                })
        // 3 taps, padding: 2-bit codes through the generic loop
        .sample("1x3-padding", {arg({1, 2, 3, 4}), arg({1, 2, 3, 7}).constant()},
                [](const TensorList& x) {
                  return tap_sample(max_pool2d_tap_backward_op(), x, {1, 3}, {1, 2}, {0, 1}, {1, 1}, false, false);
                })
        // 16 x 17 = 272 taps: Int32 codes
        .sample("wide-window", {arg({1, 2, 2, 2}), arg({1, 2, 18, 20}).constant()},
                [](const TensorList& x) {
                  return tap_sample(max_pool2d_tap_backward_op(), x, {16, 17}, {2, 2}, {0, 0}, {1, 1}, false, false);
                });
const OpSchema& kMaxPoolTapGather =
    define_op("max_pool2d_tap_gather")
        .save({1})
        .grad(max_pool2d_tap_gather_backward)
        .kernel(DeviceType::CPU, max_pool2d_tap_gather_cpu)
        .sample("dilation-ceil", {arg({1, 2, 9, 8}), arg({1, 2, 9, 8}).constant()},
                [](const TensorList& x) {
                  return tap_sample(max_pool2d_tap_gather_op(), x, {3, 2}, {2, 3}, {1, 1}, {2, 1}, true, true);
                })
        // 2x2, stride 1, padding: overlapping windows, 2-bit codes in 2 bytes a row
        .sample("2x2-padding", {arg({1, 2, 5, 7}), arg({1, 2, 5, 7}).constant()}, [](const TensorList& x) {
          return tap_sample(max_pool2d_tap_gather_op(), x, {2, 2}, {1, 1}, {1, 1}, {1, 1}, false, true);
        });
const OpSchema& max_pool2d_tap_backward_op() { return kMaxPoolTapBackward; }
const OpSchema& max_pool2d_tap_gather_op() { return kMaxPoolTapGather; }

TensorList max_pool2d_backward_fn(BackwardContext& c) {
  return {dispatch1(kMaxPoolTapBackward, {c.grad(0), c.output(1)},
                    window_attrs(c.attrs).set("input_size", c.input_sizes(0)))};
}

const OpSchema& kMaxPool =
    define_op("max_pool2d")
        .save({}, {1})
        .grad(max_pool2d_backward_fn)
        .backward_ignores_output_grads({1})  // the codes get none (no zeros made for them)
        .kernel(DeviceType::CPU, max_pool2d_cpu)
        .sample("2x2", {arg({2, 3, 6, 6})}, [](const TensorList& x) { return TensorList{max_pool2d(x[0], {2, 2})}; })
        // stride 1 < kernel 3: one input can win several windows, its gradient accumulates
        .sample("overlap-padding", {arg({1, 2, 5, 6})},
                [](const TensorList& x) { return TensorList{max_pool2d(x[0], {3}, {1}, {1})}; }, sums_of(9))
        .sample("dilation-ceil", {arg({1, 2, 9, 8})},
                [](const TensorList& x) { return TensorList{max_pool2d(x[0], {3, 2}, {2, 3}, {1, 1}, {2, 1}, true)}; })
        .sample("ceil", {arg({1, 2, 5, 7})},
                [](const TensorList& x) { return TensorList{max_pool2d(x[0], {2}, {2}, {0}, {1}, true)}; })
        .sample("unbatched-non-contiguous", {arg({5, 2, 5})},
                [](const TensorList& x) { return TensorList{max_pool2d(x[0].transpose(0, 1), {3}, {2})}; });

// The codes max_pool2d keeps for x (a sample's constant input) with the window of `attrs`.
Tensor taps_of(const Tensor& x, const Attrs& attrs) {
  return dispatch(kMaxPool, {x.detach()}, window_attrs(attrs).set("taps", true))[1];
}
TensorList tap_sample(const OpSchema& op, const TensorList& x, const IntList& k, const IntList& s, const IntList& p,
                      const IntList& d, bool ceil, bool gather) {
  Attrs a{{"kernel_size", k}, {"stride", s}, {"padding", p}, {"dilation", d}, {"ceil_mode", ceil}};
  const Tensor taps = taps_of(x[1], a);
  if (!gather) a.set("input_size", x[1].sizes());
  return {dispatch1(op, {x[0], taps}, a)};
}

// Checks x and the window, then calls `op` on x with a batch dimension (added when x is 3-D).
// max_pool2d's call says whether to keep its tap codes: only when the call is recorded for
// backward (the autograd layer's rule), so inference writes none.
TensorList call_max_pool(const OpSchema& op, const Tensor& x, const IntList& kernel_size, const IntList& stride,
                         const IntList& padding, const IntList& dilation, bool ceil_mode) {
  check_rank("max_pool2d", x);
  WindowArgs a = WindowArgs::normalise("max_pool2d", kernel_size, stride, padding, dilation, ceil_mode);
  Tensor xb = batched(x);
  window_geometry("max_pool2d", Shown{&x, xb.sizes()}, a);  // shape errors name the caller's tensor
  Attrs attrs{{"kernel_size", a.kernel},
              {"stride", a.stride},
              {"padding", a.padding},
              {"dilation", a.dilation},
              {"ceil_mode", a.ceil_mode}};
  if (&op == &kMaxPool) attrs.set("taps", autograd::GradMode::is_enabled() && x.requires_grad());
  TensorList r = dispatch(op, {xb}, attrs);
  if (x.dim() == 3)
    for (Tensor& t : r)
      if (t.defined()) t = t.squeeze(0);
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

}  // namespace mixtape
