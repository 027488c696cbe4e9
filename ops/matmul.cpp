// ops/matmul.cpp — the batched matrix product primitive.
//   matmul(a: (*A, n, k), b: (*B, k, m)) -> (broadcast(*A, *B), n, m)
//   backward: ga = g @ b^T summed to a's shape; gb = a^T @ g summed to b's shape.
// CPU kernel: cpu::gemm (ops/cpu/blas.h) per batch entry, f32 accumulation for 16-bit operands and
// the f32 result rounded once — the numbers a tensor core with f32 accumulation produces (a dot
// of 4096 f16 ones is 4096). f16 operands are widened to f32 with the bulk converter; bf16 ones go
// to the BF16 GEMM as they are (native vdpbf16ps, or widened there: docs/CPU.md, "BF16 GEMM").
#include "ops/matmul.h"

#include "core/convert.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/kernel_table.h"
#include "ops/matmul_args.h"
#include "ops/op_def.h"

namespace mixtape {

// Row-major (rows, cols) matrix with element strides (sr, sc): usable directly if one stride is 1.
bool blas_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc, BlasOperand& out) {
  if (sc == 1 && (sr >= std::max<int64_t>(cols, 1) || rows == 1)) {
    out = {false, std::max<int64_t>({sr, cols, 1})};
    return true;
  }
  if (sr == 1 && (sc >= std::max<int64_t>(rows, 1) || cols == 1)) {
    out = {true, std::max<int64_t>({sc, rows, 1})};
    return true;
  }
  return false;
}

MatmulShape check_matmul_args(const char* op, const Tensor& a, const Tensor& b) {
  MT_CHECK(a.dim() >= 2 && b.dim() >= 2, op, ": expected operands with at least 2 dims, got ", a.describe(), " and ",
           b.describe());
  MT_CHECK(is_floating(a.dtype()) && is_floating(b.dtype()), op, ": expected floating operands, got ", a.describe(),
           " and ", b.describe());
  MT_CHECK(a.dtype() == b.dtype(), op, ": expected both operands to have the same dtype, got ", a.describe(), " @ ",
           b.describe(), " (cast one, or run under autocast)");
  MatmulShape s;
  s.n = a.size(-2);
  s.k = a.size(-1);
  s.m = b.size(-1);
  MT_CHECK(b.size(-2) == s.k, op, ": inner dimensions must match, got ", shape_str(a.sizes()), " @ ",
           shape_str(b.sizes()));
  s.abatch = IntList(a.sizes().begin(), a.sizes().end() - 2);
  s.bbatch = IntList(b.sizes().begin(), b.sizes().end() - 2);
  s.batch = broadcast_shapes(s.abatch, s.bbatch, op);
  s.out_shape = s.batch;
  s.out_shape.push_back(s.n);
  s.out_shape.push_back(s.m);
  return s;
}

namespace {

TensorList matmul_cpu(const OpCall& call) {
  Tensor a = call.inputs[0], b = call.inputs[1];
  const MatmulShape sh = check_matmul_args(call.name(), a, b);
  const int64_t n = sh.n, k = sh.k, m = sh.m;
  const IntList &abatch = sh.abatch, &bbatch = sh.bbatch, &batch = sh.batch, &out_shape = sh.out_shape;
  const DType dt = a.dtype();
  Tensor out = Tensor::empty(out_shape, TensorOptions(dt));
  int64_t nb = numel_of(batch);
  if (out.numel() == 0) return {out};

  // Compute type: f64 stays f64, everything else accumulates in f32. Operands: BF16 stays BF16
  // on the native BF16 GEMM (cpu::gemm's BF16 overload), else (and f16) is widened to f32.
  const DType ct = dt == DType::Float64 ? DType::Float64 : DType::Float32;
  // (Emulated BF16 widens here, as always: cpu::gemm's BF16 overload would keep transposed
  // layouts, which can change OpenBLAS's small-matrix kernel and so the last bits.)
  const DType ot = dt == DType::BFloat16 && cpu::bf16_native_gemm() ? dt : ct;
  Tensor ac = cpu::cast_to(a, ot), bc = cpu::cast_to(b, ot);
  Tensor oc = ct == dt ? out : Tensor::empty(out_shape, TensorOptions(ct));
  // Matrices whose strides BLAS can't take are made contiguous first.
  BlasOperand la{}, lb{};
  if (!blas_layout(n, k, ac.stride(-2), ac.stride(-1), la)) {
    ac = cpu::cast_to(clone(ac.detach()), ot);
    blas_layout(n, k, ac.stride(-2), ac.stride(-1), la);
  }
  if (!blas_layout(k, m, bc.stride(-2), bc.stride(-1), lb)) {
    bc = cpu::cast_to(clone(bc.detach()), ot);
    blas_layout(k, m, bc.stride(-2), bc.stride(-1), lb);
  }
  IntList as = cpu::broadcast_byte_strides(ac.as_strided_alias(abatch, IntList(ac.strides().begin(), ac.strides().end() - 2),
                                                               ac.storage_offset()),
                                           batch);
  IntList bs = cpu::broadcast_byte_strides(bc.as_strided_alias(bbatch, IntList(bc.strides().begin(), bc.strides().end() - 2),
                                                               bc.storage_offset()),
                                           batch);
  // Chosen here, on the calling thread: a forced kernel that declines throws before any GEMM runs.
  const cpu::KernelPick pick = cpu::gemm_pick(ot, n, m, "matmul.fwd");
  visit_floating(ct, call.name(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      const char* ap = static_cast<const char*>(ac.data_ptr());
      const char* bp = static_cast<const char*>(bc.data_ptr());
      T* op = static_cast<T*>(oc.data_ptr());
      for (int64_t i = 0; i < nb; ++i) {
        int64_t rem = i, aoff = 0, boff = 0;
        for (size_t d = batch.size(); d-- > 0;) {
          int64_t idx = rem % batch[d];
          rem /= batch[d];
          aoff += idx * as[d];
          boff += idx * bs[d];
        }
        if constexpr (std::is_same_v<T, float>) {
          if (ot == DType::BFloat16) {
            cpu::gemm(la.trans, lb.trans, n, m, k, reinterpret_cast<const BFloat16*>(ap + aoff), la.ld,
                      reinterpret_cast<const BFloat16*>(bp + boff), lb.ld, 0.0f, op + i * n * m, m, pick.index);
            continue;
          }
        }
        cpu::gemm(la.trans, lb.trans, n, m, k, reinterpret_cast<const T*>(ap + aoff), la.ld,
                  reinterpret_cast<const T*>(bp + boff), lb.ld, T(0), op + i * n * m, m, pick.index);
      }
    }
  });
  if (!oc.is_same(out)) cpu::copy_into(out, oc);  // one rounding to f16/bf16
  cpu::trace_kernel_choice(
      "matmul.fwd",
      [&] {
        return std::string(dtype_short(dt)) + " B=" + std::to_string(nb) + " M=" + std::to_string(n) +
               " K=" + std::to_string(k) + " N=" + std::to_string(m) + cpu::steering_tags(dt == DType::BFloat16, false);
      },
      pick.name, pick.skipped);
  return {out};
}

Tensor mT(const Tensor& x) { return transpose(x, -1, -2); }

TensorList matmul_backward(BackwardContext& c) {
  const Tensor& g = c.grad();
  return {c.needs_input_grad(0) ? sum_to(matmul(g, mT(c.input(1))), c.input_sizes(0)) : Tensor(),
          c.needs_input_grad(1) ? sum_to(matmul(mT(c.input(0)), g), c.input_sizes(1)) : Tensor()};
}

const OpSchema& kMatmul =
    define_op("matmul")
        .args({"self", "other"})
        .policy(AmpPolicy::LowerPrecision)
        .grad(matmul_backward)
        .kernel(DeviceType::CPU, matmul_cpu)
        .sample("batched-broadcast", {arg({2, 1, 3, 4}), arg({3, 4, 2})},
                [](const TensorList& x) { return TensorList{matmul(x[0], x[1])}; })
        .sample("2d", {arg({4, 5}), arg({5, 3})}, [](const TensorList& x) { return TensorList{matmul(x[0], x[1])}; },
                sums_of(5))
        .sample("transposed-operand", {arg({5, 4}), arg({5, 3})},
                [](const TensorList& x) { return TensorList{matmul(x[0].t(), x[1])}; }, sums_of(5))
        .sample("vectors", {arg({4}), arg({4, 3}), arg({3})},
                [](const TensorList& x) { return TensorList{matmul(matmul(x[0], x[1]), x[2])}; }, sums_of(4));

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  MT_CHECK(a.defined() && b.defined(), "matmul: undefined operand");
  MT_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need at least 1 dimension, got ", a.describe(),
           " and ", b.describe());
  if (a.dim() == 1 && b.dim() == 1) {
    MT_CHECK(a.size(0) == b.size(0), "matmul: 1-D tensors must have the same size for a dot product, got ",
             a.describe(), " and ", b.describe());
    return reshape(dispatch1(kMatmul, {unsqueeze(a, 0), unsqueeze(b, 1)}), {});
  }
  if (a.dim() == 1) return squeeze(dispatch1(kMatmul, {unsqueeze(a, 0), b}), -2);
  if (b.dim() == 1) return squeeze(dispatch1(kMatmul, {a, unsqueeze(b, 1)}), -1);
  return dispatch1(kMatmul, {a, b});
}

Tensor mm(const Tensor& a, const Tensor& b) {
  MT_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expected 2-D matrices, got ", a.describe(), " and ", b.describe());
  return dispatch1(kMatmul, {a, b});
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  MT_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0), "bmm: expected (B, n, k) and (B, k, m) with the "
           "same B, got ", a.describe(), " and ", b.describe());
  return dispatch1(kMatmul, {a, b});
}

}  // namespace mixtape
