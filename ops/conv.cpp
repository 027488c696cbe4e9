// ops/conv.cpp — conv2d and the two ops its backward is made of, their CPU kernel lists
// (conv2d.fwd, conv2d.dgrad, conv2d.wgrad; which kernel runs on which CPU, and why, is the table at
// the top of docs/CPU.md) and the generic im2col + GEMM path that ends every list.
//
//   conv2d(x: (N, C, H, W), w: (O, C/G, kH, kW), b: (O) or none; stride s, padding p,
//          dilation d, groups G) -> y: (N, O, OH, OW),  OH = (H + 2 pH - dH (kH - 1) - 1) / sH + 1
//     y[n, o, i, j] = b[o] + sum_{c', ki, kj} w[o, c', ki, kj] * x[n, c, i sH - pH + ki dH, j sW - pW + kj dW]
//     with c = (o / (O/G)) C/G + c' (the input channels of o's group) and x = 0 outside the image
//     (zero padding). A cross-correlation, as in PyTorch.
//   conv2d_input_grad(g: (N, O, OH, OW), w; input_size)  -> (N, C, H, W)       = J_x^T g
//   conv2d_weight_grad(x, g: (N, O, OH, OW); weight_size) -> (O, C/G, kH, kW)  = J_w^T g
// Invariants: a 16-bit conv equals the f32 conv of its widened operands (widened one image at a
// time, never the whole batch), rounded once, bit for bit — except BF16 on a native BF16 GEMM
// (MIXTAPE_CPU_BF16), which sums the same products in FP32 in another order (within FP32
// summation error). The kernel chosen depends on the shape and the steering, never on the thread
// count; the results depend on the thread count only through the im2col weight gradient's
// per-thread accumulators (summed in thread order).
//
// The generic path, one image per OpenMP thread with BLAS single-threaded inside
// (cpu::BlasSingleThreaded: OpenBLAS's pthread build serialises concurrent threaded GEMMs):
//   col: (K, L) row-major, K = C kH kW, L = OH OW. Row r = (c kH + ki) kW + kj, column l = i OW + j:
//        col[r, l] = x[n, c, i sH - pH + ki dH, j sW - pW + kj dW]  (0 where that is padding).
//   Row r's order is w's memory order, so group g's rows are the block [g K/G, (g+1) K/G) and
//   w_g = w[g O/G : (g+1) O/G] viewed as (O/G, K/G) multiplies it directly:
//     forward      y_n[g] (O/G, L) = w_g (O/G, K/G) @ col_g (K/G, L)   (y_n prefilled with b, beta = 1)
//     input grad   col_g = w_g^T @ g_n[g], then col2im (the adjoint of im2col) adds col into zeros;
//                  or, with unit strides and O <= C, the forward conv of g_n with w transposed
//                  and flipped (input_grad_is_a_conv, the "as_conv" entry)
//     weight grad  w_g += g_n[g] (O/G, L) @ col_g^T (L, K/G), summed over the images
//   1x1 kernels with stride 1 and no padding need no col: it is x_n itself, (C, H W).
//   Rows/columns of the image a window never reaches (stride > 1) get zero gradient.
//
// Backward: all three ops are bilinear, so each one's derivatives are the others:
//   conv2d:              dx = conv2d_input_grad(g, w),  dw = conv2d_weight_grad(x, g),  db = sum_{N,H,W} g
//   conv2d_input_grad:   d/dg = conv2d(G, w),           d/dw = conv2d_weight_grad(G, g)
//   conv2d_weight_grad:  d/dx = conv2d_input_grad(g, G), d/dg = conv2d(x, G)
// so conv2d is differentiable to any order (double backward for gradient penalties works).
#include "ops/conv.h"

#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/convert.h"
#include "ops/conv_args.h"
#include "ops/conv_scaled.h"
#include "ops/cpu/aligned_buffer.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/conv_direct_avx512.h"
#include "ops/cpu/conv_implicit_gemm.h"
#include "ops/cpu/conv_input_grad_avx512.h"
#include "ops/cpu/conv_weight_grad_avx512.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/im2col_avx512.h"
#include "ops/cpu/kernel_table.h"
#include "ops/op_def.h"

namespace mixtape {

ConvGeom check_conv_geometry(const char* op, const Shown& x, const Shown& w, const IntList& stride,
                             const IntList& padding, const IntList& dilation, int64_t groups) {
  const IntList& xs = x.sizes;
  const IntList& ws = w.sizes;
  MT_CHECK(xs.size() == 4, op, ": expected a 4-D input (N, C, H, W), got ", x.str());
  MT_CHECK(ws.size() == 4, op, ": weight must be 4-D (O, C/groups, kH, kW), got ", w.str());
  MT_CHECK(stride.size() == 2 && stride[0] > 0 && stride[1] > 0, op, ": stride must be positive, got ",
           shape_str(stride));
  MT_CHECK(dilation.size() == 2 && dilation[0] > 0 && dilation[1] > 0, op, ": dilation must be positive, got ",
           shape_str(dilation));
  MT_CHECK(padding.size() == 2 && padding[0] >= 0 && padding[1] >= 0, op, ": padding must be non-negative, got ",
           shape_str(padding));
  MT_CHECK(groups > 0, op, ": groups must be positive, got ", groups);
  MT_CHECK(ws[0] % groups == 0, op, ": groups ", groups, " must divide the output channels, got weight ", w.str());
  MT_CHECK(xs[1] % groups == 0, op, ": groups ", groups, " must divide the input channels, got ", x.str());
  MT_CHECK(ws[1] * groups == xs[1], op, ": expected input with ", ws[1] * groups, " channels (weight ", w.str(),
           ", groups ", groups, "), got ", x.str());
  MT_CHECK(ws[2] > 0 && ws[3] > 0, op, ": weight must have a non-empty kernel, got ", w.str());
  ConvGeom g{xs[0],     xs[1],     xs[2],       xs[3],       ws[0],       ws[2],  ws[3], stride[0], stride[1],
             padding[0], padding[1], dilation[0], dilation[1], groups, 0,     0};
  const int64_t eh = g.dH * (g.kH - 1) + 1, ew = g.dW * (g.kW - 1) + 1;
  MT_CHECK(eh <= g.H + 2 * g.pH && ew <= g.W + 2 * g.pW, op, ": kernel ", g.kH, "x", g.kW, " (dilation ",
           shape_str(dilation), ", spanning ", eh, "x", ew, ") is larger than the padded input ", g.H + 2 * g.pH, "x",
           g.W + 2 * g.pW, " (input ", x.str(), ", padding ", shape_str(padding), ")");
  g.OH = (g.H + 2 * g.pH - eh) / g.sH + 1;
  g.OW = (g.W + 2 * g.pW - ew) / g.sW + 1;
  return g;
}

void check_conv_dtypes(const char* op, const char* an, const Tensor& a, const char* bn, const Tensor& b,
                       const Tensor& bias) {
  MT_CHECK(is_floating(a.dtype()), op, ": expected a floating ", an, ", got ", a.describe());
  MT_CHECK(b.dtype() == a.dtype(), op, ": expected ", an, " and ", bn, " of the same dtype, got ", a.describe(),
           " and ", b.describe(), " (cast one, or run under autocast)");
  if (bias.defined())
    MT_CHECK(bias.dtype() == a.dtype(), op, ": expected bias of the ", an, "'s dtype, got ", bias.describe(), " for ",
             an, " ", a.describe(), " (cast one, or run under autocast)");
}

namespace {

// ---- geometry and checks ----
IntList pair_arg(const char* op, const char* what, const IntList& v) {
  MT_CHECK(v.size() == 1 || v.size() == 2, op, ": ", what, " must have 1 or 2 values, got ", shape_str(v));
  return v.size() == 1 ? IntList{v[0], v[0]} : v;
}

// check_conv_geometry (ops/conv_args.h), then BLAS's int range.
ConvGeom conv_geometry(const char* op, const Shown& x, const Shown& w, const IntList& stride, const IntList& padding,
                       const IntList& dilation, int64_t groups) {
  const ConvGeom g = check_conv_geometry(op, x, w, stride, padding, dilation, groups);
  MT_CHECK(g.L() <= INT_MAX && g.K() <= INT_MAX && g.O <= INT_MAX, op, ": BLAS takes int dimensions; got ", g.O,
           " output channels, ", g.K(), " taps, ", g.L(), " output pixels per image");
  return g;
}

void check_grad_shape(const char* op, const ConvGeom& g, const Tensor& grad) {
  MT_CHECK(grad.sizes() == g.out_sizes(), op, ": expected grad of shape ", shape_str(g.out_sizes()),
           " (the conv2d output for this input, weight and geometry), got ", grad.describe());
}

// ---- CPU building blocks (T = float or double) ----
Tensor dense(const Tensor& t, DType ct) {
  if (t.dtype() == ct && t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.sizes(), TensorOptions(ct));
  cpu::copy_into(out, t);
  return out;
}
DType compute_type(DType dt) { return dt == DType::Float64 ? DType::Float64 : DType::Float32; }

// Threads for a loop over the batch: all of OpenMP's when there are images to share and work
// to pay for them, else 1 (then BLAS keeps its own threading).
int batch_threads(const ConvGeom& g) {
  if (g.N < 2 || omp_in_parallel() || g.N * g.K() * g.L() < cpu::kParallelGrain) return 1;
  return static_cast<int>(std::min<int64_t>(omp_get_max_threads(), g.N));
}

// Output positions [lo, hi) along one dim whose input index  pos * stride + off  is in [0, size).
void valid_range(int64_t off, int64_t stride, int64_t size, int64_t out, int64_t& lo, int64_t& hi) {
  lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
  hi = size - off <= 0 ? 0 : (size - off + stride - 1) / stride;
  hi = std::min(hi, out);
  lo = std::min(lo, hi);
}

// Unit strides, unit column dilation and OW == W ("same" padding, every 3x3 conv of the zoo): a
// row (c, ki, kj) of col is then the channel's plane shifted by s = offh W + offw, read as one
// contiguous run (one memcpy, not one per output row), with the rows outside the image and the
// columns whose source fell into the neighbouring row set to zero afterwards. Measured on
// ResNet-8 (2 threads), the per-row copies of the general loops were ~30% of a training step.
bool plane_shift(const ConvGeom& g) { return g.sH == 1 && g.sW == 1 && g.dW == 1 && g.OW == g.W; }

// For plane_shift geometry and kernel offsets (offh, offw): rows [i0, i1) and columns [j0, j1)
// of the output read inside the image; l in [lo, hi) reads plane[l + s] inside the plane.
struct Shift {
  int64_t s, i0, i1, j0, j1, lo, hi;
};
Shift shift_of(const ConvGeom& g, int64_t offh, int64_t offw) {
  Shift r{};
  r.s = offh * g.W + offw;
  valid_range(offh, 1, g.H, g.OH, r.i0, r.i1);
  valid_range(offw, 1, g.W, g.OW, r.j0, r.j1);
  // Clamped to L: with no valid row (a 1-row image under a 3-row kernel) -s can exceed it.
  r.lo = std::min(std::max(r.i0 * g.W, -r.s), g.L());
  r.hi = std::max(r.lo, std::min(r.i1 * g.W, g.H * g.W - r.s));
  return r;
}
// Calls fn(c, shift, row) for every row (c, ki, kj) of a plane_shift col (K, L) whose rows are ld
// apart, in w's order.
template <typename T, typename F>
void for_each_shifted_row(const ConvGeom& g, T* col, int64_t ld, F&& fn) {
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t ki = 0; ki < g.kH; ++ki)
      for (int64_t kj = 0; kj < g.kW; ++kj)
        fn(c, shift_of(g, ki * g.dH - g.pH, kj - g.pW), col + ((c * g.kH + ki) * g.kW + kj) * ld);
}
// Sets the entries of valid rows whose column is outside [j0, j1) to v.
template <typename T>
void set_border_columns(const ConvGeom& g, const Shift& sh, T v, T* row) {
  for (int64_t i = sh.i0; i < sh.i1; ++i) {
    for (int64_t j = 0; j < sh.j0; ++j) row[i * g.OW + j] = v;
    for (int64_t j = sh.j1; j < g.OW; ++j) row[i * g.OW + j] = v;
  }
}

cpu::Im2colRows im2col_rows_of(const ConvGeom& g) {
  return {g.C, g.H, g.W, g.OH, g.OW, g.kH, g.kW, g.sH, g.sW, g.pH, g.pW, g.dH};
}

// x: (C, H, W) -> col: (K, L), layout in the header comment, rows ld >= L apart (the weight
// gradient pads them to whole cache lines).
template <typename T>
void im2col(const T* x, const ConvGeom& g, T* col, int64_t ld) {
  const int64_t L = g.L();
  if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, float>) {
    if (plane_shift(g) && cpu::im2col_avx512_available())  // the same bits, 16 or 32 columns a load
      return cpu::im2col_plane_shift_avx512(x, g.C, g.H, g.W, g.OH, g.kH, g.kW, g.pH, g.pW, g.dH, col, ld);
    // Every other geometry with column stride 1 or 2 and unit column dilation (strided convs,
    // "valid" or wide padding): the row kernel.
    if (cpu::im2col_rows_applies(g.sW, g.dW) && cpu::im2col_avx512_available())
      return cpu::im2col_rows_avx512(x, im2col_rows_of(g), col, ld);
  }
  if (plane_shift(g)) {
    for_each_shifted_row(g, col, ld, [&](int64_t c, const Shift& sh, T* row) {
      std::fill(row, row + sh.lo, T(0));
      std::memcpy(row + sh.lo, x + c * g.H * g.W + sh.lo + sh.s, sizeof(T) * static_cast<size_t>(sh.hi - sh.lo));
      std::fill(row + sh.hi, row + L, T(0));
      set_border_columns(g, sh, T(0), row);
    });
    return;
  }
  for (int64_t c = 0; c < g.C; ++c) {
    const T* xc = x + c * g.H * g.W;
    for (int64_t ki = 0; ki < g.kH; ++ki) {
      const int64_t offh = ki * g.dH - g.pH;
      int64_t i0, i1;
      valid_range(offh, g.sH, g.H, g.OH, i0, i1);
      for (int64_t kj = 0; kj < g.kW; ++kj) {
        const int64_t offw = kj * g.dW - g.pW;
        int64_t j0, j1;
        valid_range(offw, g.sW, g.W, g.OW, j0, j1);
        T* row = col + ((c * g.kH + ki) * g.kW + kj) * ld;
        std::fill(row, row + i0 * g.OW, T(0));
        for (int64_t i = i0; i < i1; ++i) {
          T* r = row + i * g.OW;
          const T* src = xc + (i * g.sH + offh) * g.W + j0 * g.sW + offw;
          std::fill(r, r + j0, T(0));
          if (g.sW == 1)
            std::memcpy(r + j0, src, sizeof(T) * static_cast<size_t>(j1 - j0));
          else
            for (int64_t j = j0; j < j1; ++j) r[j] = src[(j - j0) * g.sW];
          std::fill(r + j1, r + g.OW, T(0));
        }
        std::fill(row + i1 * g.OW, row + L, T(0));
      }
    }
  }
}

// The adjoint of im2col: x (C, H, W) += col (K, L) scattered back to the pixels it came from.
// col is scratch and may be overwritten: with plane_shift geometry a row is added as one
// contiguous run, its border columns first set to -0, the exact identity of +, so the pixels
// they land on (in the neighbouring row) keep their bits. Every pixel still receives its
// contributions in (c, ki, kj) order, the general loop's: the same sums, bit for bit.
template <typename T>
void col2im(T* col, const ConvGeom& g, T* x) {
  const int64_t L = g.L();
  if constexpr (std::is_same_v<T, float>) {
    if (!plane_shift(g) && cpu::im2col_rows_applies(g.sW, g.dW) && cpu::im2col_avx512_available())
      return cpu::col2im_rows_avx512(col, im2col_rows_of(g), x);  // the same sums, 16 pixels a vector
  }
  if (plane_shift(g)) {
    for_each_shifted_row(g, col, L, [&](int64_t c, const Shift& sh, T* row) {
      set_border_columns(g, sh, T(-0.0), row);
      T* dst = x + c * g.H * g.W + sh.lo + sh.s;  // the pixel of row[lo]
      const T* src = row + sh.lo;
      for (int64_t l = 0; l < sh.hi - sh.lo; ++l) dst[l] += src[l];
    });
    return;
  }
  for (int64_t c = 0; c < g.C; ++c) {
    T* xc = x + c * g.H * g.W;
    for (int64_t ki = 0; ki < g.kH; ++ki) {
      const int64_t offh = ki * g.dH - g.pH;
      int64_t i0, i1;
      valid_range(offh, g.sH, g.H, g.OH, i0, i1);
      for (int64_t kj = 0; kj < g.kW; ++kj) {
        const int64_t offw = kj * g.dW - g.pW;
        int64_t j0, j1;
        valid_range(offw, g.sW, g.W, g.OW, j0, j1);
        const T* row = col + ((c * g.kH + ki) * g.kW + kj) * L;
        for (int64_t i = i0; i < i1; ++i) {
          const T* r = row + i * g.OW;
          T* dst = xc + (i * g.sH + offh) * g.W + j0 * g.sW + offw;
          if (g.sW == 1)
            for (int64_t j = j0; j < j1; ++j) dst[j - j0] += r[j];
          else
            for (int64_t j = j0; j < j1; ++j) dst[(j - j0) * g.sW] += r[j];
        }
      }
    }
  }
}

// x (N, C, H, W), w (O, K/G), b (O) or null -> y (N, O, L)
// Types: storage S (the tensors' dtype), compute T (the GEMM's accumulator and result: float for
// f32/f16/bf16, double for f64) and GEMM operand A (T, or BFloat16 itself on the native BF16 GEMM:
// then x, gy, w and col stay BF16 and half the bytes move). With A != S each thread widens one
// image at a time into its own buffer; with T != S it rounds each output image once on store
// (F16C where available): 16-bit tensors are never widened whole, so a 16-bit conv needs no
// full-size f32 copy, and (A = T) computes exactly what the f32 conv of the widened tensors does.
template <typename S, typename T>
void load(const S* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<S, Half>)
    convert_half_to_float(src, dst, static_cast<size_t>(n));
  else if constexpr (std::is_same_v<S, BFloat16>)
    convert_bfloat16_to_float(src, dst, static_cast<size_t>(n));
  else
    std::copy(src, src + n, dst);
}
template <typename S, typename T>
void store(const T* src, S* dst, int64_t n) {
  if constexpr (std::is_same_v<S, Half>)
    convert_float_to_half(src, dst, static_cast<size_t>(n));
  else if constexpr (std::is_same_v<S, BFloat16>)
    convert_float_to_bfloat16(src, dst, static_cast<size_t>(n));
  else
    std::copy(src, src + n, dst);
}
// Per-thread images of S seen as T: the S data itself when S == T, else widened (or rounded) into
// this thread's buffer of `per_thread` elements.
template <typename S, typename T>
struct Staging {
  static constexpr bool needed = !std::is_same_v<S, T>;
  std::vector<T> data;
  int64_t per_thread;
  Staging(int nt, int64_t n) : data(needed ? static_cast<size_t>(nt * n) : 0), per_thread(n) {}
  T* of(int t) { return data.data() + static_cast<int64_t>(t) * per_thread; }
  // The n elements at src as T (read-only).
  const T* read(int t, const S* src, int64_t n) {
    if constexpr (!needed) {
      return src;
    } else {
      load(src, of(t), n);
      return of(t);
    }
  }
  // Where to compute an output that ends at dst: dst itself, or this thread's buffer (then store).
  T* write_to(int t, S* dst) {
    if constexpr (!needed)
      return dst;
    else
      return of(t);
  }
  void store_back(int t, S* dst, int64_t n) {
    if constexpr (needed) store(of(t), dst, n);  // the one rounding
  }
};

// The implicit-GEMM kernel (ops/cpu/conv_implicit_gemm.h) takes plane-shift geometry with one
// group and an FP32 accumulator: FP32 and BF16 storage directly, FP16 widened a few images at a
// time (conv_forward), so that every 16-bit conv stays the FP32 conv of its widened operands.
// MIXTAPE_GEMM=blas (cpu::own_kernels_enabled() false) keeps convs on im2col + OpenBLAS.
std::string implicit_gemm_declines(const ConvGeom& g) {
  if (!plane_shift(g)) return "not plane-shift geometry (unit strides, dW 1, OW == W)";
  if (g.G != 1) return "groups " + std::to_string(g.G);
  if (g.C == 0 || g.O == 0) return "no channels";
  if (!cpu::own_kernels_enabled()) return "own GEMM off (MIXTAPE_GEMM=blas or no AVX-512)";
  if (!cpu::conv_kernels_enabled()) return "conv kernels off (MIXTAPE_CPU_CONV=im2col or no AVX-512)";
  return "";
}
bool implicit_gemm_applies(const ConvGeom& g, DType dt) {
  return (dt == DType::Float32 || dt == DType::BFloat16 || dt == DType::Float16) && implicit_gemm_declines(g).empty();
}
cpu::ImplicitConvShape implicit_shape(const ConvGeom& g) {
  return {g.N, g.C, g.H, g.W, g.O, g.kH, g.kW, g.pH, g.pW, g.dH, g.OH};
}

cpu::ConvShape conv_shape(const ConvGeom& g) {
  return {g.N, g.C, g.H, g.W, g.O, g.kH, g.kW, g.sH, g.sW, g.pH, g.pW, g.dH, g.dW, g.OH, g.OW};
}

// ---- the forward's kernel lists, one per storage/operand type, first match runs ----
using ConvEntry = cpu::KernelEntry<ConvGeom>;

// FP32 convs with a kernel 3 columns wide run on the direct kernel (ops/cpu/conv_direct_avx512.h)
// — strided ones instead of im2col + GEMM (1.65-1.8x on ResNet-8's stride-2 layers), "same" ones
// instead of the implicit GEMM where output rows are at least 16 pixels wide (1.37x on ResNet-8's
// 28x28 layer; level at 14x14, 0.79x at 7x7, where the implicit GEMM's panels span rows and
// images) and the input has more than one channel (the first layers' 9-deep sums: 0.88x). On
// plane-shift geometry both kernels compute the same bits (the same FMA chain per output), so
// this choice changes speed only.
std::string direct_f32_declines(const ConvGeom& g) {
  if (g.G != 1) return "groups " + std::to_string(g.G);
  if (!cpu::own_kernels_enabled()) return "own kernels off (MIXTAPE_GEMM=blas or no AVX-512)";
  if (!cpu::conv_direct_applies(conv_shape(g)))
    return "needs kW 3, dW 1, column stride 1 or 2 and the conv kernels on (conv_direct_applies)";
  if (!implicit_gemm_applies(g, DType::Float32)) return "";
  if (g.OW < 16) return "OW " + std::to_string(g.OW) + " < 16: the implicit GEMM is as fast or faster";
  if (g.C < 2) return "C 1: the implicit GEMM is faster on 9-deep sums";
  return "";
}

// BF16 on vdpbf16ps (native, both operands BF16): the direct kernel on channel pairs where the
// FP32 rule picks it (measured in docs/CPU.md, "Direct BF16 convolution on vdpbf16ps": 14x14 and
// 7x7 "same" layers stay on the implicit GEMM).
std::string pairs_bf16_declines(const ConvGeom& g) {
  if (g.G != 1) return "groups " + std::to_string(g.G);
  if (g.C < 2) return "C " + std::to_string(g.C) + " < 2 (channel pairs)";
  if (!cpu::own_kernels_enabled()) return "own kernels off (MIXTAPE_GEMM=blas or no AVX-512)";
  if (!cpu::conv_pairs_applies(conv_shape(g)))
    return "needs kW 3, dW 1, column stride 1 or 2 and BF16 GEMMs on vdpbf16ps (conv_pairs_applies)";
  if (implicit_gemm_applies(g, DType::BFloat16) && g.OW < 16)
    return "OW " + std::to_string(g.OW) + " < 16: the implicit GEMM is as fast or faster";
  return "";
}
std::string implicit_amx_declines(const ConvGeom& g) {
  if (cpu::bf16_gemm_kernel() != cpu::Bf16Kernel::Amx) return "BF16 GEMMs not on AMX";
  return implicit_gemm_declines(g);
}

const ConvEntry kForwardF32[] = {{"direct_avx512", direct_f32_declines},
                                 {"implicit_gemm_avx512", implicit_gemm_declines},
                                 {"im2col_gemm", nullptr}};
const ConvEntry kForwardBf16[] = {{"pairs_avx512bf16", pairs_bf16_declines},
                                  {"implicit_gemm_amx", implicit_amx_declines},
                                  {"implicit_gemm_avx512bf16", implicit_gemm_declines},
                                  {"im2col_gemm", nullptr}};
// FP16, and BF16 widened to FP32 (MIXTAPE_CPU_BF16=emulated).
const ConvEntry kForwardWidened[] = {{"implicit_gemm_avx512", implicit_gemm_declines}, {"im2col_gemm", nullptr}};
const ConvEntry kForwardF64[] = {{"im2col_gemm", nullptr}};
// For MIXTAPE_CPU_KERNEL's checks (ops/cpu/kernel_table.h).
const bool kForwardRegistered = cpu::register_kernel_list("conv2d.fwd", kForwardF32) &&
                                cpu::register_kernel_list("conv2d.fwd", kForwardBf16) &&
                                cpu::register_kernel_list("conv2d.fwd", kForwardWidened) &&
                                cpu::register_kernel_list("conv2d.fwd", kForwardF64);

template <typename S, typename A>
cpu::KernelPick forward_pick(const ConvGeom& g) {
  if constexpr (std::is_same_v<S, float>) return cpu::choose_kernel("conv2d.fwd", kForwardF32, g);
  else if constexpr (std::is_same_v<A, BFloat16>) return cpu::choose_kernel("conv2d.fwd", kForwardBf16, g);
  else if constexpr (std::is_same_v<S, double>) return cpu::choose_kernel("conv2d.fwd", kForwardF64, g);
  else return cpu::choose_kernel("conv2d.fwd", kForwardWidened, g);
}

// alpha: the BF16 storages' epilogue factor on each FP32 sum before the bias (conv2d_bf16_scaled);
// 1 skips it, and every other storage takes only 1.
template <typename S, typename T, typename A>
cpu::KernelPick conv_forward(const ConvGeom& g, const S* x, const A* w, const T* b, S* y, float alpha = 1.0f) {
  const cpu::KernelPick k = forward_pick<S, A>(g);
  const std::string_view name = k.name;
  if constexpr (std::is_same_v<S, float> && std::is_same_v<A, float>) {
    if (name == "direct_avx512") return cpu::conv_direct_forward(conv_shape(g), x, w, b, y), k;
  }
  if constexpr (std::is_same_v<S, BFloat16> && std::is_same_v<A, BFloat16> && std::is_same_v<T, float>) {
    if (name == "pairs_avx512bf16") return cpu::conv_pairs_forward(conv_shape(g), x, w, b, y, alpha), k;
  }
  if constexpr ((std::is_same_v<S, float> || std::is_same_v<S, BFloat16>) && std::is_same_v<T, float>) {
    if (name.rfind("implicit_gemm", 0) == 0) {
      // The entry's name says which BF16 GEMM runs inside, also where it was forced (a forced
      // implicit_gemm_avx512bf16 on an AMX machine runs vdpbf16ps, as its name says).
      if constexpr (std::is_same_v<A, BFloat16>)
        return cpu::conv_implicit_gemm(implicit_shape(g), x, w, b, y,
                                       name == "implicit_gemm_amx" ? cpu::Bf16Kernel::Amx
                                                                   : cpu::Bf16Kernel::Avx512Bf16,
                                       alpha),
               k;
      else if constexpr (std::is_same_v<S, BFloat16>)
        return cpu::conv_implicit_gemm(implicit_shape(g), x, w, b, y, alpha), k;
      else
        return cpu::conv_implicit_gemm(implicit_shape(g), x, w, b, y), k;
    }
  }
  if constexpr (std::is_same_v<S, Half>) {
    // Each output element of the kernel is its own sum, whatever images share its panel, so
    // chunks of the batch widened to FP32 give the FP32 conv's bits, rounded once.
    if (name == "implicit_gemm_avx512") {
      const int64_t nb = std::min<int64_t>(g.N, 16), L = g.L();
      std::vector<float> xf(static_cast<size_t>(nb * g.image())), yf(static_cast<size_t>(nb * g.O * L));
      for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
        const int64_t m = std::min(nb, g.N - n0);
        cpu::ImplicitConvShape s = implicit_shape(g);
        s.N = m;
        load(x + n0 * g.image(), xf.data(), m * g.image());
        cpu::conv_implicit_gemm(s, xf.data(), w, b, yf.data());
        store(yf.data(), y + n0 * g.O * L, m * g.O * L);
      }
      return k;
    }
  }
  const int nt = batch_threads(g);
  cpu::BlasSingleThreaded blas1(nt > 1);
  const int64_t K = g.K(), Kg = g.Kg(), L = g.L(), Og = g.Og();
  std::vector<A> cols(g.direct() ? 0 : static_cast<size_t>(nt * K * L));
  Staging<S, A> xbuf(nt, g.image());
  Staging<S, T> ybuf(nt, g.O * L);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t n = 0; n < g.N; ++n) {
    const int t = omp_get_thread_num();
    const A* src = xbuf.read(t, x + n * g.image(), g.image());
    T* yn = ybuf.write_to(t, y + n * g.O * L);
    if (!g.direct()) {
      A* col = cols.data() + static_cast<int64_t>(t) * K * L;
      im2col(src, g, col, L);
      src = col;
    }
    // With alpha the sums come first (beta 0), then * alpha + bias, as the kernels' epilogues do.
    const bool prefill = b && alpha == 1.0f;
    if (prefill)
      for (int64_t o = 0; o < g.O; ++o) std::fill(yn + o * L, yn + (o + 1) * L, b[o]);
    else if (Kg == 0)
      std::fill(yn, yn + g.O * L, T(0));
    if (Kg != 0 && Og != 0)
      for (int64_t gr = 0; gr < g.G; ++gr)
        cpu::gemm(false, false, Og, L, Kg, w + gr * Og * Kg, Kg, src + gr * Kg * L, L, prefill ? T(1) : T(0),
                  yn + gr * Og * L, L);
    if (!prefill && (b || alpha != 1.0f))
      for (int64_t o = 0; o < g.O; ++o)
        for (int64_t l = 0; l < L; ++l) {
          T v = yn[o * L + l];
          if (alpha != 1.0f) v *= static_cast<T>(alpha);
          if (b) v += b[o];
          yn[o * L + l] = v;
        }
    ybuf.store_back(t, y + n * g.O * L, g.O * L);
  }
  return k;
}

// ---- the input gradient's kernel lists (after "as_conv", which conv2d_input_grad_cpu runs) ----
struct ConvProblem {
  ConvGeom g;
  DType dt;
};
using GradEntry = cpu::KernelEntry<ConvProblem>;
bool input_grad_is_a_conv(const ConvGeom& g, DType dt);
std::string as_conv_declines(const ConvProblem& p) {
  return input_grad_is_a_conv(p.g, p.dt)
             ? ""
             : "needs unit strides, padding within the kernel's reach and im2col(gy) no larger than col (O <= C)";
}
// Native BF16 on vdpbf16ps: the direct kernel on output-channel pairs.
std::string dgrad_pairs_declines(const ConvProblem& p) {
  if (p.g.G != 1) return "groups " + std::to_string(p.g.G);
  if (p.g.O < 2) return "O " + std::to_string(p.g.O) + " < 2 (channel pairs)";
  if (!cpu::own_kernels_enabled()) return "own kernels off (MIXTAPE_GEMM=blas or no AVX-512)";
  if (!cpu::conv_input_grad_pairs_applies(conv_shape(p.g)))
    return "needs kW 3, dW 1, column stride 1 or 2 and BF16 GEMMs on vdpbf16ps (conv_input_grad_pairs_applies)";
  return "";
}
// FP32 accumulation, 3 columns wide (the strided convs; unit-stride ones mostly run as a forward
// conv): no col, no col2im (ops/cpu/conv_input_grad_avx512.h). BF16 on AMX too (and one output
// channel on vdpbf16ps): its products are exact in FP32, and this kernel measured faster than the
// AMX GEMM + col2im.
std::string dgrad_direct_declines(const ConvProblem& p) {
  if (p.g.G != 1) return "groups " + std::to_string(p.g.G);
  if (!cpu::own_kernels_enabled()) return "own kernels off (MIXTAPE_GEMM=blas or no AVX-512)";
  if (!cpu::conv_input_grad_direct_applies(conv_shape(p.g)))
    return "needs kW 3, dW 1, column stride 1 or 2 and the conv kernels on (conv_input_grad_direct_applies)";
  return "";
}
const GradEntry kInputGradFloat[] = {{"as_conv", as_conv_declines},  // f32, f16, BF16 widened
                                     {"direct_avx512", dgrad_direct_declines},
                                     {"gemm_col2im", nullptr}};
const GradEntry kInputGradBf16[] = {{"as_conv", as_conv_declines},
                                    {"pairs_avx512bf16", dgrad_pairs_declines},
                                    {"direct_avx512", dgrad_direct_declines},
                                    {"gemm_col2im", nullptr}};
const GradEntry kInputGradF64[] = {{"as_conv", as_conv_declines}, {"gemm_col2im", nullptr}};
const bool kInputGradRegistered = cpu::register_kernel_list("conv2d.dgrad", kInputGradFloat) &&
                                  cpu::register_kernel_list("conv2d.dgrad", kInputGradBf16) &&
                                  cpu::register_kernel_list("conv2d.dgrad", kInputGradF64);
template <typename S, typename A>
cpu::KernelPick input_grad_pick(const ConvProblem& p) {
  if constexpr (std::is_same_v<A, BFloat16>) return cpu::choose_kernel("conv2d.dgrad", kInputGradBf16, p);
  else if constexpr (std::is_same_v<S, double>) return cpu::choose_kernel("conv2d.dgrad", kInputGradF64, p);
  else return cpu::choose_kernel("conv2d.dgrad", kInputGradFloat, p);
}

// gy (N, O, L), w (O, K/G) -> gx (N, C, H, W), on kernel k of input_grad_pick (not "as_conv").
// alpha as conv_forward's (BF16 storage only; 1 skips it).
template <typename S, typename T, typename A>
void conv_input_grad(const cpu::KernelPick& k, const ConvGeom& g, const S* gy, const A* w, S* gx, float alpha = 1.0f) {
  const std::string_view name = k.name;
  if constexpr (std::is_same_v<S, BFloat16> && std::is_same_v<A, BFloat16> && std::is_same_v<T, float>) {
    if (name == "pairs_avx512bf16") return cpu::conv_input_grad_pairs(conv_shape(g), gy, w, gx, alpha);
  }
  if constexpr (std::is_same_v<S, BFloat16> && std::is_same_v<T, float>) {
    if (name == "direct_avx512") return cpu::conv_input_grad_direct(conv_shape(g), gy, w, gx, alpha);
  } else if constexpr (std::is_same_v<T, float>) {
    if (name == "direct_avx512") return cpu::conv_input_grad_direct(conv_shape(g), gy, w, gx);
  }
  const int nt = batch_threads(g);
  cpu::BlasSingleThreaded blas1(nt > 1);
  const int64_t K = g.K(), Kg = g.Kg(), L = g.L(), Og = g.Og();
  std::vector<T> cols(g.direct() ? 0 : static_cast<size_t>(nt * K * L));
  Staging<S, A> gybuf(nt, g.O * L);
  Staging<S, T> gxbuf(nt, g.image());
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t n = 0; n < g.N; ++n) {
    const int t = omp_get_thread_num();
    const A* gyn = gybuf.read(t, gy + n * g.O * L, g.O * L);
    T* gxn = gxbuf.write_to(t, gx + n * g.image());
    if (Og == 0 || Kg == 0) {
      std::fill(gxn, gxn + g.image(), T(0));
    } else {
      // Direct: col is the image gradient itself, (C, H W); else col2im it into zeros.
      T* col = g.direct() ? gxn : cols.data() + static_cast<int64_t>(t) * K * L;
      for (int64_t gr = 0; gr < g.G; ++gr)
        cpu::gemm(true, false, Kg, L, Og, w + gr * Og * Kg, Kg, gyn + gr * Og * L, L, T(0), col + gr * Kg * L, L);
      if (!g.direct()) {
        std::fill(gxn, gxn + g.image(), T(0));
        col2im(col, g, gxn);
      }
      if (alpha != 1.0f)
        for (int64_t i = 0; i < g.image(); ++i) gxn[i] *= static_cast<T>(alpha);
    }
    gxbuf.store_back(t, gx + n * g.image(), g.image());
  }
}

// ---- the weight gradient's kernel lists ----
// FP32 arithmetic (f32, FP16, emulated BF16) on AVX-512: outer products straight from the padded
// input, no col (ops/cpu/conv_weight_grad_avx512.h).
std::string wgrad_direct_declines(const ConvProblem& p) {
  if (p.g.G != 1) return "groups " + std::to_string(p.g.G);
  if (!cpu::own_kernels_enabled()) return "own kernels off (MIXTAPE_GEMM=blas or no AVX-512)";
  if (!cpu::conv_weight_grad_direct_applies(conv_shape(p.g)))
    return "needs kW 3, dW 1 and the conv kernels on (conv_weight_grad_direct_applies)";
  return "";
}
// Native BF16 on vdpbf16ps: the same kernel on image pairs.
std::string wgrad_pairs_declines(const ConvProblem& p) {
  if (p.g.G != 1) return "groups " + std::to_string(p.g.G);
  if (!cpu::own_kernels_enabled()) return "own kernels off (MIXTAPE_GEMM=blas or no AVX-512)";
  if (!cpu::conv_weight_grad_pairs_applies(conv_shape(p.g)))
    return "needs kW 3, dW 1 and BF16 GEMMs on vdpbf16ps (conv_weight_grad_pairs_applies)";
  return "";
}
const GradEntry kWeightGradFloat[] = {{"direct_avx512", wgrad_direct_declines}, {"im2col_gemm", nullptr}};
const GradEntry kWeightGradBf16[] = {{"pairs_avx512bf16", wgrad_pairs_declines}, {"im2col_gemm", nullptr}};
const GradEntry kWeightGradF64[] = {{"im2col_gemm", nullptr}};
const bool kWeightGradRegistered = cpu::register_kernel_list("conv2d.wgrad", kWeightGradFloat) &&
                                   cpu::register_kernel_list("conv2d.wgrad", kWeightGradBf16) &&
                                   cpu::register_kernel_list("conv2d.wgrad", kWeightGradF64);

// x (N, C, H, W), gy (N, O, L) -> gw (O, K/G), summed over n
template <typename S, typename T, typename A>
cpu::KernelPick conv_weight_grad(const ConvGeom& g, const S* x, const S* gy, T* gw) {
  cpu::KernelPick k;
  if constexpr (std::is_same_v<A, BFloat16>) k = cpu::choose_kernel("conv2d.wgrad", kWeightGradBf16, ConvProblem{g, DType::BFloat16});
  else if constexpr (std::is_same_v<T, double>) k = cpu::choose_kernel("conv2d.wgrad", kWeightGradF64, ConvProblem{g, DType::Float64});
  else k = cpu::choose_kernel("conv2d.wgrad", kWeightGradFloat, ConvProblem{g, DType::Float32});
  const std::string_view name = k.name;
  if constexpr (std::is_same_v<T, float> && std::is_same_v<A, float>) {
    if (name == "direct_avx512") return cpu::conv_weight_grad_direct(conv_shape(g), x, gy, gw), k;
  }
  if constexpr (std::is_same_v<S, BFloat16> && std::is_same_v<A, BFloat16> && std::is_same_v<T, float>) {
    if (name == "pairs_avx512bf16") return cpu::conv_weight_grad_pairs(conv_shape(g), x, gy, gw), k;
  }
  const int nt = batch_threads(g);
  cpu::BlasSingleThreaded blas1(nt > 1);
  const int64_t K = g.K(), Kg = g.Kg(), L = g.L(), Og = g.Og(), wsize = g.O * Kg;
  // col's rows start on cache lines (ld: L rounded up to 64 bytes), so im2col's stores do not
  // straddle two lines.
  constexpr int64_t line = 64 / static_cast<int64_t>(sizeof(A));
  const int64_t ld = (L + line - 1) / line * line;
  MT_CHECK(ld <= INT_MAX, "conv2d_weight_grad: BLAS takes int dimensions; got ", L, " output pixels per image");
  cpu::AlignedBuffer<A> cols;
  if (!g.direct()) cols.get(nt * K * ld);
  Staging<S, A> xbuf(nt, g.image()), gybuf(nt, g.O * L);
  // Thread t accumulates into acc[t]; with one thread that is gw itself.
  std::vector<T> acc(nt > 1 ? static_cast<size_t>(nt * wsize) : 0, T(0));
  std::fill(gw, gw + wsize, T(0));
  if (Og == 0 || Kg == 0 || L == 0) return k;
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int t = omp_get_thread_num();
    T* mine = nt > 1 ? acc.data() + t * wsize : gw;
    A* col = g.direct() ? nullptr : cols.data.get() + static_cast<int64_t>(t) * K * ld;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g.N; ++n) {
      const A* src = xbuf.read(t, x + n * g.image(), g.image());
      const A* gyn = gybuf.read(t, gy + n * g.O * L, g.O * L);
      int64_t lds = L;
      if (!g.direct()) {
        im2col(src, g, col, ld);
        src = col, lds = ld;
      }
      for (int64_t gr = 0; gr < g.G; ++gr)
        cpu::gemm(false, true, Og, Kg, L, gyn + gr * Og * L, L, src + gr * Kg * lds, lds, T(1), mine + gr * Og * Kg,
                  Kg);
    }
  }
  if (nt > 1)
    for (int t = 0; t < nt; ++t)
      for (int64_t i = 0; i < wsize; ++i) gw[i] += acc[static_cast<size_t>(t * wsize + i)];
  return k;
}

// With unit strides and padding within the kernel's reach, the input gradient is itself a
// convolution: gx[c, h, w] = sum_{o, ki, kj} gy[o, h + pH - ki dH, w + pW - kj dW] w[o, c, ki, kj]
// is conv2d(gy, w^T flipped) with padding (k - 1) d - p, whose output is H x W again. As a forward
// conv it is one GEMM of depth O/G kH kW on im2col(gy) (O kH kW rows, in the operand type) instead
// of a GEMM of depth O/G into an FP32 col of C kH kW rows that col2im scatter-adds into zeros.
// (Like the forward's im2col, it multiplies gy's zero padding by the weights, so an infinite or NaN
// weight makes NaN gradients at the border where col2im left them finite.)
// Taken when it copies no more rows than it saves (O <= C: ResNet's 3x3 convs, where it measured
// 1.12-1.30x faster at 16 and 32 channels, FP32 and BF16, and level at 64 on 7x7, batch 128, 2
// threads); SmallCNN's conv2 (32 -> 64) measured no gain in BF16 and 8% slower in FP32 that way.
ConvGeom input_grad_conv_geometry(const ConvGeom& g);
bool input_grad_is_a_conv(const ConvGeom& g, DType dt) {
  // im2col(gy) is (O kH kW, H W), the old col (C kH kW, OH OW): the new one must be no larger. With
  // little padding H W exceeds OH OW (a 7x7 kernel on a 7x7 input without padding: 49x), and the
  // extra columns would be GEMM work on padding zeros. "Same" convolutions have H W == OH OW.
  // On the implicit-GEMM kernel there is no im2col(gy) to copy: the conv form is one GEMM of the
  // same multiply-adds as col2im's, without the scatter, whatever O and C.
  const bool reach = g.sH == 1 && g.sW == 1 && g.pH <= (g.kH - 1) * g.dH && g.pW <= (g.kW - 1) * g.dW &&
                     g.Og() > 0 && g.Kg() > 0 && !g.direct() && g.H * g.W <= INT_MAX;
  if (!reach) return false;
  return g.O * g.H * g.W <= g.C * g.OH * g.OW || implicit_gemm_applies(input_grad_conv_geometry(g), dt);
}
// The geometry of that conv: input gy (N, O, OH, OW), weight (C, O/G, kH, kW), output (N, C, H, W).
ConvGeom input_grad_conv_geometry(const ConvGeom& g) {
  ConvGeom t = g;
  t.C = g.O, t.H = g.OH, t.W = g.OW, t.O = g.C;
  t.pH = (g.kH - 1) * g.dH - g.pH, t.pW = (g.kW - 1) * g.dW - g.pW;
  t.OH = g.H, t.OW = g.W;
  return t;
}
// Its weight: wt[gr C/G + c, o, kH - 1 - ki, kW - 1 - kj] = w[gr O/G + o, c, ki, kj] (in group gr).
template <typename A>
void flip_transpose_weight(const ConvGeom& g, const A* w, A* wt) {
  const int64_t Og = g.Og(), Cg = g.C / g.G;
  for (int64_t gr = 0; gr < g.G; ++gr)
    for (int64_t o = 0; o < Og; ++o)
      for (int64_t c = 0; c < Cg; ++c)
        for (int64_t ki = 0; ki < g.kH; ++ki)
          for (int64_t kj = 0; kj < g.kW; ++kj)
            wt[(((gr * Cg + c) * Og + o) * g.kH + (g.kH - 1 - ki)) * g.kW + (g.kW - 1 - kj)] =
                w[(((gr * Og + o) * Cg + c) * g.kH + ki) * g.kW + kj];
}

// Runs fn<S, T, A>() for storage S, compute T and GEMM operand A: (float, float, float),
// (double, double, double), (Half, float, float), and for BFloat16 (BFloat16, float, BFloat16)
// on the native BF16 GEMM (`native_bf16`: cpu::bf16_native_gemm(), read once per call by the
// caller, which also gave w that dtype), else (BFloat16, float, float).
template <typename F>
void visit_types(DType dt, bool native_bf16, F&& fn) {
  switch (dt) {
    case DType::Float64: fn.template operator()<double, double, double>(); break;
    case DType::Float16: fn.template operator()<Half, float, float>(); break;
    case DType::BFloat16:
      if (native_bf16)
        fn.template operator()<BFloat16, float, BFloat16>();
      else
        fn.template operator()<BFloat16, float, float>();
      break;
    default: fn.template operator()<float, float, float>(); break;
  }
}
// The GEMM operand dtype visit_types picks for storage dt.
DType operand_type(DType dt, bool native_bf16) {
  return dt == DType::BFloat16 && native_bf16 ? dt : compute_type(dt);
}

// The weight gradient in the compute type: `out` itself, or a (small) f32 buffer rounded into it.
Tensor compute_buffer(const Tensor& out, DType ct) {
  return out.dtype() == ct ? out : Tensor::empty(out.sizes(), TensorOptions(ct));
}

// What the kernel trace prints for a conv problem: dtype, sizes, geometry (one value where both
// dims agree), and the steering that shaped the choice.
std::string conv_problem(DType dt, const ConvGeom& g) {
  auto two = [](const char* k, int64_t a, int64_t b) {
    std::string t = std::string(" ").append(k).append(std::to_string(a));
    if (a != b) t.append("x").append(std::to_string(b));  // appends: GCC 12's -Wrestrict misfires on "x" + string
    return t;
  };
  std::string s = std::string(dtype_short(dt)) + " N=" + std::to_string(g.N) + " C=" + std::to_string(g.C) +
                  " H=" + std::to_string(g.H) + " W=" + std::to_string(g.W) + " O=" + std::to_string(g.O) +
                  two("k", g.kH, g.kW) + two("s", g.sH, g.sW) + two("p", g.pH, g.pW) + two("d", g.dH, g.dW) +
                  " g" + std::to_string(g.G);
  return s + cpu::steering_tags(dt == DType::BFloat16, true);
}

// ---- conv2d ----
Tensor forward_cpu(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeom& g, float alpha, const char* tag);
Tensor input_grad_cpu(const Tensor& gy, const Tensor& w, const IntList& in_size, const ConvGeom& g, float alpha,
                      const char* tag);
Tensor weight_grad_cpu(const Tensor& x, const Tensor& gy, const IntList& w_size, const ConvGeom& g, DType out_dtype,
                       const char* tag);

TensorList conv2d_cpu(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& w = call.inputs[1];
  const Tensor b = call.inputs.size() > 2 ? call.inputs[2] : Tensor();
  ConvArgs a = ConvArgs::from(call.attrs);
  ConvGeom g = conv_geometry(call.name(), Shown::of(x), Shown::of(w), a.stride, a.padding, a.dilation, a.groups);
  if (b.defined())
    MT_CHECK(b.dim() == 1 && b.size(0) == g.O, call.name(), ": bias must be 1-D with ", g.O, " elements (weight ",
             w.describe(), "), got ", b.describe());
  check_conv_dtypes(call.name(), "input", x, "weight", w, b);
  return {forward_cpu(x, w, b, g, 1.0f, "")};
}

// The three passes' bodies, shared by the ops and conv2d_bf16_scaled & co (ops/conv_scaled.h):
// `alpha` for the BF16 storages' epilogue (1: none), `tag` appended to the kernel trace's problem.
Tensor forward_cpu(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeom& g, float alpha,
                   const char* tag) {
  Tensor out = Tensor::empty(g.out_sizes(), TensorOptions(x.dtype()));
  if (out.numel() == 0) return out;
  const DType ct = compute_type(x.dtype());
  const bool native = cpu::bf16_native_gemm();
  Tensor xc = dense(x, x.dtype()), wc = dense(w, operand_type(x.dtype(), native));
  Tensor bc = b.defined() ? dense(b, ct) : Tensor();
  cpu::KernelPick ran;
  visit_types(x.dtype(), native, [&]<typename S, typename T, typename A>() {
    ran = conv_forward<S, T, A>(g, static_cast<const S*>(xc.data_ptr()), static_cast<const A*>(wc.data_ptr()),
                                bc.defined() ? static_cast<const T*>(bc.data_ptr()) : nullptr,
                                static_cast<S*>(out.data_ptr()), alpha);
  });
  cpu::trace_kernel_choice("conv2d.fwd", [&] { return conv_problem(x.dtype(), g) + tag; }, ran.name, ran.skipped);
  return out;
}

TensorList conv2d_input_grad_cpu(const OpCall& call) {
  const Tensor& gy = call.inputs[0];
  const Tensor& w = call.inputs[1];
  ConvArgs a = ConvArgs::from(call.attrs);
  const IntList& in_size = call.attrs.get<IntList>("input_size");
  ConvGeom g = conv_geometry(call.name(), Shown::shape(in_size), Shown::of(w), a.stride, a.padding, a.dilation,
                             a.groups);
  check_grad_shape(call.name(), g, gy);
  check_conv_dtypes(call.name(), "grad", gy, "weight", w);
  return {input_grad_cpu(gy, w, in_size, g, 1.0f, "")};
}

Tensor input_grad_cpu(const Tensor& gy, const Tensor& w, const IntList& in_size, const ConvGeom& g, float alpha,
                      const char* tag) {
  Tensor out = Tensor::empty(in_size, TensorOptions(gy.dtype()));
  if (out.numel() == 0) return out;
  const bool native = cpu::bf16_native_gemm();
  Tensor gc = dense(gy, gy.dtype()), wc = dense(w, operand_type(gy.dtype(), native));
  const bool as_conv = input_grad_is_a_conv(g, gy.dtype());
  Tensor wt = as_conv ? Tensor::empty({g.C, g.Og(), g.kH, g.kW}, TensorOptions(wc.dtype())) : Tensor();
  std::string ran, skipped;
  visit_types(gy.dtype(), native, [&]<typename S, typename T, typename A>() {
    const S* gp = static_cast<const S*>(gc.data_ptr());
    const A* wp = static_cast<const A*>(wc.data_ptr());
    const cpu::KernelPick k = input_grad_pick<S, A>(ConvProblem{g, gy.dtype()});
    skipped = k.skipped;
    if (std::string_view(k.name) == "as_conv") {
      // The forward conv of gy with w flipped and transposed, on the forward's own list.
      flip_transpose_weight(g, wp, static_cast<A*>(wt.data_ptr()));
      const cpu::KernelPick f = conv_forward<S, T, A>(input_grad_conv_geometry(g), gp,
                                                      static_cast<const A*>(wt.data_ptr()), nullptr,
                                                      static_cast<S*>(out.data_ptr()), alpha);
      ran = std::string("as_conv.") + f.name;
      if (!f.skipped.empty()) skipped.append(skipped.empty() ? "" : "; ").append(f.skipped);
    } else {
      conv_input_grad<S, T, A>(k, g, gp, wp, static_cast<S*>(out.data_ptr()), alpha);
      ran = k.name;
    }
  });
  cpu::trace_kernel_choice("conv2d.dgrad", [&] { return conv_problem(gy.dtype(), g) + tag; }, ran.c_str(), skipped);
  return out;
}

TensorList conv2d_weight_grad_cpu(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& gy = call.inputs[1];
  ConvArgs a = ConvArgs::from(call.attrs);
  const IntList& w_size = call.attrs.get<IntList>("weight_size");
  ConvGeom g = conv_geometry(call.name(), Shown::of(x), Shown::shape(w_size), a.stride, a.padding, a.dilation,
                             a.groups);
  check_grad_shape(call.name(), g, gy);
  check_conv_dtypes(call.name(), "input", x, "grad", gy);
  return {weight_grad_cpu(x, gy, w_size, g, x.dtype(), "")};
}

// out_dtype: x's (the op), or the compute type itself (the FP32 sums, unrounded).
Tensor weight_grad_cpu(const Tensor& x, const Tensor& gy, const IntList& w_size, const ConvGeom& g, DType out_dtype,
                       const char* tag) {
  Tensor out = Tensor::empty(w_size, TensorOptions(out_dtype));
  if (out.numel() == 0) return out;
  const DType ct = compute_type(x.dtype());
  Tensor xc = dense(x, x.dtype()), gc = dense(gy, gy.dtype());
  Tensor oc = compute_buffer(out, ct);
  cpu::KernelPick ran;
  visit_types(x.dtype(), cpu::bf16_native_gemm(), [&]<typename S, typename T, typename A>() {
    ran = conv_weight_grad<S, T, A>(g, static_cast<const S*>(xc.data_ptr()), static_cast<const S*>(gc.data_ptr()),
                                    static_cast<T*>(oc.data_ptr()));
  });
  cpu::trace_kernel_choice("conv2d.wgrad", [&] { return conv_problem(x.dtype(), g) + tag; }, ran.name, ran.skipped);
  if (!oc.is_same(out)) cpu::copy_into(out, oc);  // the one rounding to f16/bf16
  return out;
}

// ---- backward formulas (see the header comment) ----
TensorList conv2d_backward(BackwardContext& c) {
  ConvArgs a = ConvArgs::from(c.attrs);
  const Tensor& g = c.grad();
  Tensor gx, gw, gb;
  if (c.needs_input_grad(0))
    gx = conv2d_input_grad(g, c.input(1), c.input_sizes(0), a.stride, a.padding, a.dilation, a.groups);
  if (c.needs_input_grad(1))
    gw = conv2d_weight_grad(c.input(0), g, c.input_sizes(1), a.stride, a.padding, a.dilation, a.groups);
  if (c.needs_input_grad(2)) gb = sum(g, {0, 2, 3});
  return {gx, gw, gb};
}

TensorList conv2d_input_grad_backward(BackwardContext& c) {
  ConvArgs a = ConvArgs::from(c.attrs);
  const Tensor& G = c.grad();  // (N, C, H, W)
  Tensor dg, dw;
  if (c.needs_input_grad(0)) dg = conv2d(G, c.input(1), Tensor(), a.stride, a.padding, a.dilation, a.groups);
  if (c.needs_input_grad(1))
    dw = conv2d_weight_grad(G, c.input(0), c.input_sizes(1), a.stride, a.padding, a.dilation, a.groups);
  return {dg, dw};
}

TensorList conv2d_weight_grad_backward(BackwardContext& c) {
  ConvArgs a = ConvArgs::from(c.attrs);
  const Tensor& G = c.grad();  // (O, C/G, kH, kW)
  Tensor dx, dg;
  if (c.needs_input_grad(0))
    dx = conv2d_input_grad(c.input(1), G, c.input_sizes(0), a.stride, a.padding, a.dilation, a.groups);
  if (c.needs_input_grad(1)) dg = conv2d(c.input(0), G, Tensor(), a.stride, a.padding, a.dilation, a.groups);
  return {dx, dg};
}

// Samples: sums_of(K) bounds the CPU/cuDNN difference by the longest sum (K = C/G kH kW for an
// output; the gradients sum over N OH OW or O/G kH kW terms); with a bias, cuDNN rounds a 16-bit
// convolution before adding it, the CPU once after (with_bias).
SampleChecks with_bias(double terms) {
  SampleChecks c = sums_of(terms);
  c.storage_roundings = 1;
  return c;
}
const OpSchema& kConv2d =
    define_op("conv2d")
        .args({"input", "weight", "bias"})
        .policy(AmpPolicy::LowerPrecision)
        .save({0, 1})
        .grad(conv2d_backward)
        .kernel(DeviceType::CPU, conv2d_cpu)
        .sample("bias", {arg({2, 3, 5, 5}), arg({4, 3, 3, 3}), arg({4})},
                [](const TensorList& x) { return TensorList{conv2d(x[0], x[1], x[2])}; }, with_bias(50))
        .sample("stride-padding", {arg({1, 2, 7, 6}), arg({3, 2, 3, 2})},
                [](const TensorList& x) { return TensorList{conv2d(x[0], x[1], Tensor(), {2, 1}, {1, 2})}; },
                sums_of(42))
        .sample("dilation", {arg({1, 2, 7, 7}), arg({2, 2, 3, 3}), arg({2})},
                [](const TensorList& x) { return TensorList{conv2d(x[0], x[1], x[2], {1, 1}, {2, 1}, {2, 1})}; },
                with_bias(35))
        .sample("groups", {arg({2, 4, 5, 5}), arg({6, 2, 3, 3}), arg({6})},
                [](const TensorList& x) { return TensorList{conv2d(x[0], x[1], x[2], {1}, {1}, {1}, 2)}; },
                with_bias(50))
        // stride 3: rows 6-7 and column 6 are never read, their gradient is 0.
        .sample("depthwise-stride-unread-rows", {arg({1, 3, 8, 7}), arg({3, 1, 3, 3})},
                [](const TensorList& x) {
                  return TensorList{conv2d(x[0], x[1], Tensor(), {3, 3}, {0, 0}, {1, 1}, 3)};
                },
                sums_of(9))
        .sample("non-contiguous", {arg({2, 3, 6, 5}), arg({3, 4, 3, 3})},
                [](const TensorList& x) {
                  return TensorList{conv2d(x[0].transpose(2, 3), x[1].transpose(0, 1), Tensor(), {1, 1}, {1, 0})};
                },
                sums_of(60))
        .sample("1x1", {arg({2, 3, 4, 4}), arg({5, 3, 1, 1}), arg({5})},
                [](const TensorList& x) { return TensorList{conv2d(x[0], x[1], x[2])}; }, with_bias(32))
        .sample("1x1-stride2-groups", {arg({1, 4, 5, 5}), arg({2, 2, 1, 1})},
                [](const TensorList& x) { return TensorList{conv2d(x[0], x[1], Tensor(), {2}, {0}, {1}, 2)}; },
                sums_of(9))
        .sample("unbatched", {arg({2, 5, 4}), arg({3, 2, 3, 3})},
                [](const TensorList& x) { return TensorList{conv2d(x[0], x[1], Tensor(), {1}, {1})}; }, sums_of(27));
// The gradient ops on their own: their backward formulas are conv2d's double backward.
const OpSchema& kConv2dInputGrad =
    define_op("conv2d_input_grad")
        .save({0, 1})
        .grad(conv2d_input_grad_backward)
        .kernel(DeviceType::CPU, conv2d_input_grad_cpu)
        .sample("stride", {arg({2, 4, 2, 2}), arg({4, 3, 3, 3})},
                [](const TensorList& x) { return TensorList{conv2d_input_grad(x[0], x[1], {2, 3, 7, 7}, {3, 3})}; },
                sums_of(36))
        .sample("groups-dilation-padding", {arg({1, 4, 6, 6}), arg({4, 2, 2, 2})},
                [](const TensorList& x) {
                  return TensorList{conv2d_input_grad(x[0], x[1], {1, 4, 6, 6}, {1, 1}, {1, 1}, {2, 2}, 2)};
                },
                sums_of(36))
        // "Same" padding, O <= C, a non-square kernel, groups and dilation: run as the forward conv
        // of the gradient with the flipped, transposed weight (input_grad_is_a_conv).
        .sample("as-a-conv-non-square-groups", {arg({1, 4, 6, 7}), arg({4, 2, 3, 5})},
                [](const TensorList& x) {
                  return TensorList{conv2d_input_grad(x[0], x[1], {1, 4, 6, 7}, {1, 1}, {2, 2}, {2, 1}, 2)};
                },
                sums_of(30));
const OpSchema& kConv2dWeightGrad =
    define_op("conv2d_weight_grad")
        .save({0, 1})
        .grad(conv2d_weight_grad_backward)
        .kernel(DeviceType::CPU, conv2d_weight_grad_cpu)
        .sample("stride", {arg({2, 3, 7, 7}), arg({2, 4, 2, 2})},
                [](const TensorList& x) { return TensorList{conv2d_weight_grad(x[0], x[1], {4, 3, 3, 3}, {3, 3})}; },
                sums_of(36))
        .sample("groups-dilation-padding", {arg({1, 4, 6, 6}), arg({1, 4, 6, 6})},
                [](const TensorList& x) {
                  return TensorList{conv2d_weight_grad(x[0], x[1], {4, 2, 2, 2}, {1, 1}, {1, 1}, {2, 2}, 2)};
                },
                sums_of(36));

ConvArgs public_args(const char* op, const IntList& stride, const IntList& padding, const IntList& dilation,
                     int64_t groups) {
  return {pair_arg(op, "stride", stride), pair_arg(op, "padding", padding), pair_arg(op, "dilation", dilation),
          groups};
}

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const IntList& stride,
              const IntList& padding, const IntList& dilation, int64_t groups) {
  MT_CHECK(input.defined() && weight.defined(), "conv2d: input and weight must be defined");
  MT_CHECK(input.dim() == 3 || input.dim() == 4, "conv2d: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got ",
           input.describe());
  ConvArgs a = public_args("conv2d", stride, padding, dilation, groups);
  const bool unbatched = input.dim() == 3;
  Tensor x = unbatched ? input.unsqueeze(0) : input;
  // Shapes are checked here, on the caller's tensors, and again by the kernel (dtypes only there:
  // autocast may still cast them).
  conv_geometry("conv2d", Shown{&input, x.sizes()}, Shown::of(weight), a.stride, a.padding, a.dilation, a.groups);
  Tensor y = dispatch1(kConv2d, {x, weight, bias}, a.attrs());
  return unbatched ? y.squeeze(0) : y;
}

Tensor conv2d_input_grad(const Tensor& grad, const Tensor& weight, const IntList& input_size, const IntList& stride,
                         const IntList& padding, const IntList& dilation, int64_t groups) {
  MT_CHECK(grad.defined() && weight.defined(), "conv2d_input_grad: grad and weight must be defined");
  ConvArgs a = public_args("conv2d_input_grad", stride, padding, dilation, groups);
  Attrs attrs = a.attrs();
  attrs.set("input_size", input_size);
  return dispatch1(kConv2dInputGrad, {grad, weight}, std::move(attrs));
}

Tensor conv2d_weight_grad(const Tensor& input, const Tensor& grad, const IntList& weight_size, const IntList& stride,
                          const IntList& padding, const IntList& dilation, int64_t groups) {
  MT_CHECK(input.defined() && grad.defined(), "conv2d_weight_grad: input and grad must be defined");
  ConvArgs a = public_args("conv2d_weight_grad", stride, padding, dilation, groups);
  Attrs attrs = a.attrs();
  attrs.set("weight_size", weight_size);
  return dispatch1(kConv2dWeightGrad, {input, grad}, std::move(attrs));
}

// ---- Fp8Autocast's entry points (ops/conv_scaled.h) ----
namespace {
constexpr const char* kFp8Tag = " fp8";
void check_scaled(const char* who, const Tensor& a, const Tensor& b, const ConvGeom& g) {
  MT_CHECK(a.device().is_cpu() && b.device().is_cpu() && a.dtype() == DType::BFloat16 && b.dtype() == DType::BFloat16,
           who, ": expected BFloat16 CPU operands, got ", a.describe(), " and ", b.describe());
  MT_CHECK(g.G == 1, who, ": groups 1 only, got ", g.G);
  MT_CHECK(g.L() <= INT_MAX && g.K() <= INT_MAX && g.O <= INT_MAX, who, ": BLAS takes int dimensions; got ", g.O,
           " output channels, ", g.K(), " taps, ", g.L(), " output pixels per image");
}
}  // namespace

Tensor conv2d_bf16_scaled(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvGeom& g, float alpha) {
  check_scaled("conv2d_bf16_scaled", x, w, g);
  MT_CHECK(x.sizes() == IntList({g.N, g.C, g.H, g.W}) && w.sizes() == IntList({g.O, g.C, g.kH, g.kW}),
           "conv2d_bf16_scaled: expected input (", g.N, ", ", g.C, ", ", g.H, ", ", g.W, ") and weight (", g.O, ", ",
           g.C, ", ", g.kH, ", ", g.kW, "), got ", x.describe(), " and ", w.describe());
  MT_CHECK(!bias.defined() || (bias.dtype() == DType::Float32 && bias.numel() == g.O),
           "conv2d_bf16_scaled: expected a Float32 bias of ", g.O, " elements, got ", bias.describe());
  return forward_cpu(x, w, bias, g, alpha, kFp8Tag);
}

Tensor conv2d_input_grad_bf16_scaled(const Tensor& gy, const Tensor& w, const ConvGeom& g, float alpha) {
  check_scaled("conv2d_input_grad_bf16_scaled", gy, w, g);
  MT_CHECK(gy.sizes() == g.out_sizes() && w.sizes() == IntList({g.O, g.C, g.kH, g.kW}),
           "conv2d_input_grad_bf16_scaled: expected grad ", shape_str(g.out_sizes()), " and weight (", g.O, ", ", g.C,
           ", ", g.kH, ", ", g.kW, "), got ", gy.describe(), " and ", w.describe());
  return input_grad_cpu(gy, w, {g.N, g.C, g.H, g.W}, g, alpha, kFp8Tag);
}

Tensor conv2d_weight_grad_bf16_sums(const Tensor& x, const Tensor& gy, const ConvGeom& g) {
  check_scaled("conv2d_weight_grad_bf16_sums", x, gy, g);
  MT_CHECK(x.sizes() == IntList({g.N, g.C, g.H, g.W}) && gy.sizes() == g.out_sizes(),
           "conv2d_weight_grad_bf16_sums: expected input (", g.N, ", ", g.C, ", ", g.H, ", ", g.W, ") and grad ",
           shape_str(g.out_sizes()), ", got ", x.describe(), " and ", gy.describe());
  return weight_grad_cpu(x, gy, {g.O, g.C, g.kH, g.kW}, g, DType::Float32, kFp8Tag);
}

}  // namespace mixtape
