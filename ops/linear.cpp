// ops/linear.cpp — linear(x, w, b) = x @ w^T + b, the fully connected layer.
//   x: (*, in), at least 1-D;  w: (out, in);  b: (out) or undefined  ->  y: (*, out)
//   AMP: lower precision. x, w, b share one floating dtype (f32, f64, f16, bf16).
//
// CPU kernel: the leading dims of x are flattened to M rows, and the product is ONE GEMM
//   C (M, out) = x2 (M, in) @ w^T (in, out)    (sgemm for f32/f16, the BF16 GEMM for bf16, dgemm for f64)
// with the bias folded into it: C's rows are first set to b, then the GEMM runs with beta = 1,
// so BLAS adds the product onto the bias as it writes C (no broadcast add afterwards; the same
// trick as PyTorch's addmm). x and w are handed to BLAS in place when they are row- or
// column-major (w.t() views, transposed 2-D x); other layouts are copied once.
// 16-bit: f16 x and w are widened to f32, bf16 ones go to the BF16 GEMM as they are, b is widened;
// the f32 result (bias included) is rounded once on store — so an f16 linear (and a bf16 one on the
// emulated BF16 path) equals the f32 linear of the widened inputs, rounded, bit for bit.
//
// Backward, written with ops (so double backward works; g: (*, out)):
//   grad_x = g @ w                           (*, in)
//   grad_w = g2^T @ x2                       (out, in), g2/x2: g/x with leading dims flattened
//   grad_b = g2 summed over rows             (out)
#include "ops/linear.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "ops/cpu/blas.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/kernel_table.h"
#include "ops/linear_args.h"
#include "ops/matmul.h"
#include "ops/op_def.h"

namespace mixtape {

// Shapes (and, in the kernel, dtypes) of a linear call; every message names the op.
void check_linear(const char* op, const Tensor& x, const Tensor& w, const Tensor& b, bool dtypes) {
  MT_CHECK(x.defined() && w.defined(), op, ": input and weight must be defined");
  MT_CHECK(x.dim() >= 1, op, ": expected an input with at least 1 dim (*, in), got ", x.describe());
  MT_CHECK(w.dim() == 2, op, ": weight must be 2-D (out, in), got ", w.describe());
  MT_CHECK(x.size(-1) == w.size(1), op, ": expected input with ", w.size(1), " features in its last dim (weight ",
           w.describe(), "), got ", x.describe());
  if (b.defined())
    MT_CHECK(b.dim() == 1 && b.size(0) == w.size(0), op, ": bias must be 1-D with ", w.size(0), " elements (weight ",
             w.describe(), "), got ", b.describe());
  if (!dtypes) return;
  MT_CHECK(is_floating(x.dtype()), op, ": expected a floating input, got ", x.describe());
  MT_CHECK(w.dtype() == x.dtype() && (!b.defined() || b.dtype() == x.dtype()), op,
           ": expected input, weight and bias of one dtype, got ", x.describe(), ", ", w.describe(), " and ",
           b.defined() ? b.describe() : std::string("no bias"), " (cast one, or run under autocast)");
}

namespace {

// t as a contiguous tensor of dtype ct (t itself when it already is one).
Tensor dense(const Tensor& t, DType ct) {
  if (t.dtype() == ct && t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.sizes(), TensorOptions(ct));
  cpu::copy_into(out, t);
  return out;
}

// A 2-D (rows, cols) operand in the compute type as BLAS takes it: row-major (trans = false)
// or column-major (trans = true) with leading dimension ld. Other layouts are copied.
struct BlasMatrix {
  Tensor t;
  bool trans;
  int64_t ld;
};
BlasMatrix blas_matrix(const Tensor& m, DType ct) {
  Tensor t = m.dtype() == ct ? m : dense(m, ct);
  const int64_t r = t.size(0), c = t.size(1), sr = t.stride(0), sc = t.stride(1);
  if (sc == 1 && (sr >= std::max<int64_t>(c, 1) || r == 1)) return {t, false, std::max<int64_t>({sr, c, 1})};
  if (sr == 1 && (sc >= std::max<int64_t>(r, 1) || c == 1)) return {t, true, std::max<int64_t>({sc, r, 1})};
  Tensor d = dense(t, ct);
  return {d, false, std::max<int64_t>(c, 1)};
}

TensorList linear_cpu(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& w = call.inputs[1];
  const Tensor b = call.inputs.size() > 2 ? call.inputs[2] : Tensor();
  check_linear(call.name(), x, w, b, true);
  const int64_t in = w.size(1), out_f = w.size(0);
  IntList out_shape = x.sizes();
  out_shape.back() = out_f;
  const DType dt = x.dtype();
  Tensor out = Tensor::empty(out_shape, TensorOptions(dt));
  if (out.numel() == 0) return {out};
  const int64_t m = out.numel() / out_f;
  MT_CHECK(m <= INT_MAX && in <= INT_MAX && out_f <= INT_MAX, call.name(), ": BLAS takes int dimensions; got ", m,
           " rows of ", in, " -> ", out_f, " features");

  const DType ct = dt == DType::Float64 ? DType::Float64 : DType::Float32;
  // Operands: bf16 stays bf16 on the native BF16 GEMM; else (and f16) widened, as matmul does.
  const DType ot = dt == DType::BFloat16 && cpu::bf16_native_gemm() ? dt : ct;
  Tensor oc = ct == dt ? out : Tensor::empty(out_shape, TensorOptions(ct));
  // x as an (M, in) matrix: a 1-D or 2-D x keeps its layout when BLAS can read it.
  Tensor x2;
  if (x.dim() <= 2) {
    x2 = x.dim() == 2 ? x : x.as_strided_alias({1, in}, {x.stride(0) * std::max<int64_t>(in, 1), x.stride(0)},
                                                 x.storage_offset());
  } else {
    Tensor xd = dense(x, ot);
    x2 = xd.as_strided_alias({m, in}, {in, 1}, xd.storage_offset());
  }
  Tensor bc = b.defined() ? dense(b, ct) : Tensor();
  // Chosen here, on the calling thread: a forced kernel that declines throws before the GEMM runs.
  const cpu::KernelPick pick = in == 0 ? cpu::KernelPick{} : cpu::gemm_pick(ot, m, out_f, "linear.fwd");
  visit_floating(ct, call.name(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      T* c = static_cast<T*>(oc.data_ptr());
      if (bc.defined()) {
        const T* bp = static_cast<const T*>(bc.data_ptr());
        for (int64_t i = 0; i < m; ++i) std::memcpy(c + i * out_f, bp, sizeof(T) * static_cast<size_t>(out_f));
      }
      if (in == 0) {  // an empty sum: y = b (or 0)
        if (!bc.defined()) std::fill(c, c + m * out_f, T(0));
        return;
      }
      BlasMatrix xa = blas_matrix(x2, ot), wa = blas_matrix(w, ot);
      // y = x2 @ w^T: w^T is w with its transposition flag flipped.
      if constexpr (std::is_same_v<T, float>) {
        if (ot == DType::BFloat16) {
          cpu::gemm(xa.trans, !wa.trans, m, out_f, in, static_cast<const BFloat16*>(xa.t.data_ptr()), xa.ld,
                    static_cast<const BFloat16*>(wa.t.data_ptr()), wa.ld, bc.defined() ? 1.0f : 0.0f, c, out_f,
                    pick.index);
          return;
        }
      }
      cpu::gemm(xa.trans, !wa.trans, m, out_f, in, static_cast<const T*>(xa.t.data_ptr()), xa.ld,
                static_cast<const T*>(wa.t.data_ptr()), wa.ld, bc.defined() ? T(1) : T(0), c, out_f, pick.index);
    }
  });
  if (!oc.is_same(out)) cpu::copy_into(out, oc);  // the one rounding to f16/bf16
  cpu::trace_kernel_choice(
      "linear.fwd",
      [&] {
        return std::string(dtype_short(dt)) + " M=" + std::to_string(m) + " K=" + std::to_string(in) +
               " N=" + std::to_string(out_f) + cpu::steering_tags(dt == DType::BFloat16, false);
      },
      in == 0 ? "bias_fill" : pick.name, in == 0 ? std::string() : pick.skipped);
  return {out};
}

TensorList linear_backward(BackwardContext& c) {
  const Tensor& g = c.grad();  // (*, out)
  const int64_t out_f = c.input_sizes(1)[0], in = c.input_sizes(1)[1];
  Tensor gx, gw, gb;
  if (c.needs_input_grad(0)) gx = matmul(g, c.input(1));
  if (c.needs_input_grad(1) || c.needs_input_grad(2)) {
    Tensor g2 = g.reshape({-1, out_f});
    if (c.needs_input_grad(1)) gw = matmul(g2.t(), c.input(0).reshape({-1, in}));
    if (c.needs_input_grad(2)) gb = sum(g2, {0});
  }
  return {gx, gw, gb};
}

const OpSchema& kLinear =
    define_op("linear")
        .args({"input", "weight", "bias"})
        .policy(AmpPolicy::LowerPrecision)
        .save({0, 1})
        .grad(linear_backward)
        .kernel(DeviceType::CPU, linear_cpu)
        .sample("1d", {arg({4}), arg({3, 4}), arg({3})},
                [](const TensorList& x) { return TensorList{linear(x[0], x[1], x[2])}; })
        .sample("2d", {arg({5, 4}), arg({3, 4}), arg({3})},
                [](const TensorList& x) { return TensorList{linear(x[0], x[1], x[2])}; }, sums_of(5))
        .sample("3d", {arg({2, 3, 4}), arg({5, 4}), arg({5})},
                [](const TensorList& x) { return TensorList{linear(x[0], x[1], x[2])}; }, sums_of(6))
        .sample("no-bias", {arg({5, 4}), arg({3, 4})},
                [](const TensorList& x) { return TensorList{linear(x[0], x[1])}; }, sums_of(5))
        .sample("transposed-operands", {arg({4, 5}), arg({4, 3})},
                [](const TensorList& x) { return TensorList{linear(x[0].t(), x[1].t())}; }, sums_of(5))
        .sample("3d-non-contiguous", {arg({4, 3, 2}), arg({3, 4})},
                [](const TensorList& x) { return TensorList{linear(x[0].permute({2, 1, 0}), x[1])}; }, sums_of(6));

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  check_linear("linear", x, w, b, false);
  return dispatch1(kLinear, {x, w, b});
}

}  // namespace mixtape
