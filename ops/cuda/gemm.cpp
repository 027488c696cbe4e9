// ops/cuda/gemm.cpp — matmul and linear on CUDA through cublasGemmEx / cublasGemmStridedBatchedEx,
// with the CPU ops' semantics (ops/matmul.cpp, ops/linear.cpp): f16/bf16 operands multiply on
// tensor cores with FP32 accumulation (CUBLAS_COMPUTE_32F, reduced-precision split-K reductions
// disallowed) and the FP32 result is rounded once to the output dtype; f32 is a plain SGEMM unless
// set_allow_tf32(true); f64 is a DGEMM. linear's bias is folded into the GEMM (C, of the output's
// dtype, starts as the bias rows, beta = 1): acc + bias is formed in the compute type, so a 16-bit
// linear rounds bias + product once, as the CPU.
// Row-major tensors meet column-major cuBLAS by computing C^T = B^T A^T (no copies); operands
// whose strides cuBLAS cannot take are made dense first.
#include "ops/cuda/gemm.h"

#include <algorithm>
#include <atomic>
#include <climits>

#include "core/cuda/handles.h"
#include "core/profiler.h"
#include "ops/creation.h"
#include "ops/cuda/tensor_iter.h"
#include "ops/linear_args.h"
#include "ops/matmul_args.h"

namespace mixtape::cuda {

namespace {
std::atomic<bool> g_allow_tf32{false};
}
void set_allow_tf32(bool allow) { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }

namespace {

cudaDataType_t cuda_type(DType dt, const char* op) {
  switch (dt) {
    case DType::Float16: return CUDA_R_16F;
    case DType::BFloat16: return CUDA_R_16BF;
    case DType::Float32: return CUDA_R_32F;
    case DType::Float64: return CUDA_R_64F;
    default: MT_ERROR(op, ": cuBLAS GEMMs take f16, bf16, f32 or f64, got ", dtype_name(dt));
  }
}

// The operands' BLAS layouts: ops/matmul_args.h's test, shared with the CPU.
using Layout = BlasOperand;

// Row-major C (n, m) [batch] = A (n, k) @ B (k, m) [+ beta C], A/B of dtype ab_dt, C of c_dt.
// Pointers are to batch 0; stride_* are element strides between batches (0: broadcast).
struct GemmArgs {
  DType ab_dt, c_dt;
  bool ta, tb;
  int64_t n, m, k, lda, ldb, ldc;
  const void* a;
  const void* b;
  void* c;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
  double beta = 0.0;
};

void gemm(const GemmArgs& g, const char* op) {
  MT_CHECK(g.n <= INT_MAX && g.m <= INT_MAX && g.k <= INT_MAX && g.lda <= INT_MAX && g.ldb <= INT_MAX &&
               g.ldc <= INT_MAX && g.batch <= INT_MAX,
           op, ": cuBLAS takes int dimensions; got n=", g.n, " m=", g.m, " k=", g.k, " batch=", g.batch);
  cublasHandle_t h = cublas_handle();
  const bool f64 = g.ab_dt == DType::Float64;
  cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  if (g.ab_dt == DType::Float32 && allow_tf32()) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  // FP32 accumulation all the way: no split-K partial sums rounded to a 16-bit output type.
  MT_CUBLAS_CHECK(cublasSetMathMode(h, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                                                 CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
                  op);
  const float alpha_f = 1.0f, beta_f = static_cast<float>(g.beta);
  const double alpha_d = 1.0, beta_d = g.beta;
  const void* alpha = f64 ? static_cast<const void*>(&alpha_d) : static_cast<const void*>(&alpha_f);
  const void* beta = f64 ? static_cast<const void*>(&beta_d) : static_cast<const void*>(&beta_f);
  // Column-major C^T (m, n) = op(B)^T (m, k) @ op(A)^T (k, n): B's buffer goes first.
  const cublasOperation_t opb = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N, opa = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cudaDataType_t abt = cuda_type(g.ab_dt, op), ct = cuda_type(g.c_dt, op);
  profiler::count_library_call();
  if (g.batch == 1) {
    MT_CUBLAS_CHECK(cublasGemmEx(h, opb, opa, int(g.m), int(g.n), int(g.k), alpha, g.b, abt, int(g.ldb), g.a, abt,
                                 int(g.lda), beta, g.c, ct, int(g.ldc), compute, CUBLAS_GEMM_DEFAULT),
                    op);
  } else {
    MT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, opb, opa, int(g.m), int(g.n), int(g.k), alpha, g.b, abt, int(g.ldb),
                                               g.stride_b, g.a, abt, int(g.lda), g.stride_a, beta, g.c, ct, int(g.ldc),
                                               g.stride_c, int(g.batch), compute, CUBLAS_GEMM_DEFAULT),
                    op);
  }
}

// ---- matmul(a: (*A, n, k), b: (*B, k, m)) -> (broadcast(*A, *B), n, m) ----
TensorList matmul_cuda(const OpCall& call) {
  Tensor a = call.inputs[0], b = call.inputs[1];
  const MatmulShape sh = check_matmul_args(call.name(), a, b);
  const int64_t n = sh.n, k = sh.k, m = sh.m;
  const IntList &abatch = sh.abatch, &bbatch = sh.bbatch, &batch = sh.batch, &out_shape = sh.out_shape;
  const DType dt = a.dtype();
  DeviceGuard guard(a.device().index());
  Tensor out = empty_on(out_shape, dt, a.device());
  if (out.numel() == 0) return {out};
  if (k == 0) {  // an empty sum
    fill_(out, 0.0);
    return {out};
  }
  Layout la{}, lb{};
  if (!blas_layout(n, k, a.stride(-2), a.stride(-1), la)) {
    a = dense(a, call.name());
    blas_layout(n, k, a.stride(-2), a.stride(-1), la);
  }
  if (!blas_layout(k, m, b.stride(-2), b.stride(-1), lb)) {
    b = dense(b, call.name());
    blas_layout(k, m, b.stride(-2), b.stride(-1), lb);
  }
  // Element offsets of each batch entry (broadcast dims have stride 0).
  const int64_t nb = numel_of(batch);
  auto batch_strides = [&](const Tensor& t, const IntList& tb) {
    IntList s(batch.size(), 0);
    const size_t lead = batch.size() - tb.size();
    for (size_t d = 0; d < tb.size(); ++d)
      if (tb[d] != 1) s[lead + d] = t.stride(static_cast<int64_t>(d));
    return s;
  };
  const IntList as = batch_strides(a, abatch), bs = batch_strides(b, bbatch);
  std::vector<int64_t> aoff(static_cast<size_t>(nb)), boff(static_cast<size_t>(nb));
  for (int64_t i = 0; i < nb; ++i) {
    int64_t rem = i, ao = 0, bo = 0;
    for (size_t d = batch.size(); d-- > 0;) {
      const int64_t idx = rem % batch[d];
      rem /= batch[d];
      ao += idx * as[d];
      bo += idx * bs[d];
    }
    aoff[static_cast<size_t>(i)] = ao;
    boff[static_cast<size_t>(i)] = bo;
  }
  // One strided-batched call when the offsets are arithmetic progressions, else one GEMM per entry.
  bool uniform = true;
  for (int64_t i = 1; i < nb && uniform; ++i)
    uniform = aoff[static_cast<size_t>(i)] == i * aoff[1] && boff[static_cast<size_t>(i)] == i * boff[1];
  const size_t es = element_size(dt);
  GemmArgs g{dt, dt, la.trans, lb.trans, n, m, k, la.ld, lb.ld, m, a.data_ptr(), b.data_ptr(), out.data_ptr()};
  if (uniform) {
    g.batch = nb;
    g.stride_a = nb > 1 ? aoff[1] : 0;
    g.stride_b = nb > 1 ? boff[1] : 0;
    g.stride_c = n * m;
    gemm(g, call.name());
  } else {
    for (int64_t i = 0; i < nb; ++i) {
      GemmArgs gi = g;
      gi.a = static_cast<const char*>(a.data_ptr()) + aoff[static_cast<size_t>(i)] * static_cast<int64_t>(es);
      gi.b = static_cast<const char*>(b.data_ptr()) + boff[static_cast<size_t>(i)] * static_cast<int64_t>(es);
      gi.c = static_cast<char*>(out.data_ptr()) + i * n * m * static_cast<int64_t>(es);
      gemm(gi, call.name());
    }
  }
  return {out};
}

// ---- linear(x: (*, in), w: (out, in), b: (out) or undefined) -> (*, out) ----
TensorList linear_cuda(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& w = call.inputs[1];
  const Tensor bias = call.inputs.size() > 2 ? call.inputs[2] : Tensor();
  check_linear(call.name(), x, w, bias, true);
  const int64_t in = w.size(1), out_f = w.size(0);
  IntList out_shape = x.sizes();
  out_shape.back() = out_f;
  const DType dt = x.dtype();
  DeviceGuard guard(x.device().index());
  Tensor out = empty_on(out_shape, dt, x.device());
  if (out.numel() == 0) return {out};
  const int64_t rows = out.numel() / out_f;
  // The bias is added by the GEMM itself: the output starts as the bias rows and beta = 1, so
  // cuBLAS forms acc + bias in the compute type (f32 for 16-bit: the bias, of the output's dtype,
  // is exact there) and rounds once on store — no f32 buffer and cast after.
  if (bias.defined()) copy_into(out, bias, call.name());  // every row = bias (broadcast)
  if (in == 0) {
    if (!bias.defined()) fill_(out, 0.0);
    return {out};
  }
  // x as an (rows, in) matrix: 1-D/2-D x keep their layout when cuBLAS can read it.
  Tensor x2 = x;
  if (x.dim() != 2) {
    const Tensor xd = dense(x, call.name());
    x2 = xd.as_strided_alias({rows, in}, {in, 1}, xd.storage_offset());
  }
  Layout lx{}, lw{};
  if (!blas_layout(rows, in, x2.stride(0), x2.stride(1), lx)) {
    x2 = dense(x2, call.name());
    blas_layout(rows, in, x2.stride(0), x2.stride(1), lx);
  }
  Tensor wd = w;
  if (!blas_layout(out_f, in, wd.stride(0), wd.stride(1), lw)) {
    wd = dense(wd, call.name());
    blas_layout(out_f, in, wd.stride(0), wd.stride(1), lw);
  }
  // y = x2 @ w^T: w^T is w with its transposition flag flipped.
  GemmArgs g{dt, dt, lx.trans, !lw.trans, rows, out_f, in, lx.ld, lw.ld, out_f, x2.data_ptr(), wd.data_ptr(),
             out.data_ptr()};
  g.beta = bias.defined() ? 1.0 : 0.0;
  gemm(g, call.name());
  return {out};
}

const bool kRegistered = [] {
  register_kernel("matmul", DeviceType::CUDA, matmul_cuda);
  register_kernel("linear", DeviceType::CUDA, linear_cuda);
  return true;
}();

}  // namespace
}  // namespace mixtape::cuda
