// ops/cuda/fp8_gemm.cpp — see ops/cuda/fp8_gemm.h: the cuBLASLt FP8 matmul (sm_89+) and its BF16
// emulation on older GPUs.
#include "ops/cuda/fp8_gemm.h"

#include <climits>
#include <cstdint>
#include <memory>

#include "core/cuda/handles.h"
#include "core/profiler.h"
#include "ops/cast.h"
#include "ops/creation.h"
#include "ops/cuda/tensor_iter.h"
#include "ops/pointwise.h"

namespace mixtape::cuda {
namespace {

constexpr const char* kOp = "fp8_gemm_nt";

cudaDataType_t lt_type(DType dt) {
  switch (dt) {
    case DType::Float8_e4m3fn: return CUDA_R_8F_E4M3;
    case DType::Float8_e5m2: return CUDA_R_8F_E5M2;
    case DType::BFloat16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

// RAII owners of the cuBLASLt descriptors of one call.
struct DescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLtMatmulDescDestroy(d); }
  void operator()(cublasLtMatrixLayoutOpaque_t* l) const { cublasLtMatrixLayoutDestroy(l); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};
template <typename T>
using Owned = std::unique_ptr<T, DescDeleter>;

cublasLtMatrixLayout_t layout(Owned<cublasLtMatrixLayoutOpaque_t>& owner, cudaDataType_t t, int64_t rows,
                              int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  MT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, t, uint64_t(rows), uint64_t(cols), ld), kOp);
  owner.reset(l);
  return l;
}

void lt_fp8_gemm(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b, const Tensor& out) {
  const int64_t m = a.size(0), n = b.size(0), k = a.size(1);
  cublasLtMatmulDesc_t op = nullptr;
  MT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), kOp);
  Owned<cublasLtMatmulDescOpaque_t> op_owner(op);
  const cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t), kOp);
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn), kOp);
  // cuBLASLt's A is b's buffer, its B is a's: the scales follow their operands.
  const void* sa = scale_b.data_ptr();
  const void* sb = scale_a.data_ptr();
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa), kOp);
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb), kOp);
  Owned<cublasLtMatrixLayoutOpaque_t> la, lb, lc;
  cublasLtMatrixLayout_t A = layout(la, lt_type(b.dtype()), k, n, k);
  cublasLtMatrixLayout_t B = layout(lb, lt_type(a.dtype()), k, m, k);
  cublasLtMatrixLayout_t C = layout(lc, lt_type(out.dtype()), n, m, n);
  cublasLtMatmulPreference_t pref = nullptr;
  MT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref), kOp);
  Owned<cublasLtMatmulPreferenceOpaque_t> pref_owner(pref);
  size_t ws_bytes = 0;
  void* ws = cublas_workspace(&ws_bytes);
  const uint64_t ws64 = ws_bytes;
  MT_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws64, sizeof ws64), kOp);
  cublasLtMatmulHeuristicResult_t algo{};
  int found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(cublaslt_handle(), op, A, B, C, C, pref, 1, &algo, &found);
  MT_CHECK(hs == CUBLAS_STATUS_SUCCESS && found > 0, kOp, ": cuBLASLt has no FP8 matmul for ", a.describe(), " @ ",
           b.describe(), "^T -> ", dtype_name(out.dtype()), " (", cublasGetStatusString(hs), ")");
  const float alpha = 1.0f, beta = 0.0f;
  profiler::count_library_call();
  MT_CUBLAS_CHECK(cublasLtMatmul(cublaslt_handle(), op, &alpha, b.data_ptr(), A, a.data_ptr(), B, &beta, out.data_ptr(),
                                 C, out.data_ptr(), C, &algo.algo, ws, ws_bytes, current_stream()),
                  kOp);
}

}  // namespace

Tensor bf16_gemm_f32(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b) {
  constexpr const char* who = "bf16_gemm_f32";
  MT_CHECK(a.defined() && b.defined() && a.dim() == 2 && b.dim() == 2 && a.dtype() == DType::BFloat16 &&
               b.dtype() == DType::BFloat16 && a.device().is_cuda() && b.device() == a.device(),
           who, ": expected two 2-D BFloat16 tensors on one CUDA device, got ", a.describe(), " and ", b.describe());
  const int64_t m = trans_a ? a.size(1) : a.size(0), k = trans_a ? a.size(0) : a.size(1);
  const int64_t n = trans_b ? b.size(0) : b.size(1), kb = trans_b ? b.size(1) : b.size(0);
  MT_CHECK(k == kb, who, ": inner dimensions differ: ", a.describe(), trans_a ? "^T" : "", " @ ", b.describe(),
           trans_b ? "^T" : "");
  MT_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX, who, ": sizes beyond int: m=", m, " n=", n, " k=", k);
  DeviceGuard guard(a.device().index());
  const Tensor ac = dense(a, who), bc = dense(b, who);
  if (k == 0) return zeros({m, n}, TensorOptions(DType::Float32).with_device(a.device()));
  Tensor acc = empty_on({m, n}, DType::Float32, a.device());
  if (m == 0 || n == 0) return acc;
  // Row-major out (m, n) is column-major out^T = op(b)^T op(a)^T: cuBLAS's A is b's buffer (read
  // as it is when b is not transposed), its B is a's.
  cublasHandle_t h = cublas_handle();
  MT_CUBLAS_CHECK(cublasSetMathMode(h, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                                                 CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
                  who);
  const float alpha = 1.0f, beta = 0.0f;
  profiler::count_library_call();
  MT_CUBLAS_CHECK(cublasGemmEx(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, int(n),
                               int(m), int(k), &alpha, bc.data_ptr(), CUDA_R_16BF, int(b.size(1)), ac.data_ptr(),
                               CUDA_R_16BF, int(a.size(1)), &beta, acc.data_ptr(), CUDA_R_32F, int(n),
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  who);
  return acc;
}

bool fp8_gemm_native(int device) {
  int major = 0, minor = 0;
  MT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), kOp);
  MT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), kOp);
  return major * 10 + minor >= 89;
}

Tensor fp8_gemm_nt(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b, DType out_dtype) {
  MT_CHECK(a.defined() && b.defined() && a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(1), kOp,
           ": expected a [m, k] and b [n, k], got ", a.describe(), " and ", b.describe());
  MT_CHECK(is_float8(a.dtype()) && is_float8(b.dtype()), kOp, ": expected FP8 operands, got ", a.describe(), " and ",
           b.describe());
  MT_CHECK(!(a.dtype() == DType::Float8_e5m2 && b.dtype() == DType::Float8_e5m2), kOp,
           ": E5M2 x E5M2 has no FP8 GEMM (cuBLASLt refuses it); quantize one operand to E4M3");
  MT_CHECK(out_dtype == DType::BFloat16 || out_dtype == DType::Float32, kOp, ": the output is BFloat16 or Float32, got ",
           dtype_name(out_dtype));
  MT_CHECK(a.device().is_cuda() && b.device() == a.device() && scale_a.device() == a.device() &&
               scale_b.device() == a.device(),
           kOp, ": every operand must be on one CUDA device, got ", a.device(), ", ", b.device(), ", ", scale_a.device(),
           ", ", scale_b.device());
  for (const Tensor* s : {&scale_a, &scale_b})
    MT_CHECK(s->dtype() == DType::Float32 && s->numel() == 1 && s->is_contiguous(), kOp,
             ": a scale is a contiguous f32 tensor of one element, got ", s->describe());
  const int64_t m = a.size(0), n = b.size(0), k = a.size(1);
  MT_CHECK(k % 16 == 0, kOp, ": k must be a multiple of 16 (FP8 rows of 16-byte multiples), got k=", k,
           "; pad the reduction dimension with zeros");
  MT_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX, kOp, ": sizes beyond int: m=", m, " n=", n, " k=", k);
  DeviceGuard guard(a.device().index());
  const Tensor ac = dense(a, kOp), bc = dense(b, kOp);
  if (fp8_gemm_native(a.device().index())) {
    // cuBLASLt's FP8 output rows must be 16-byte multiples too (F32 n % 4, BF16 n % 8), and every
    // operand must start on a 16-byte boundary (a view at an odd offset may not).
    const int64_t per16 = out_dtype == DType::Float32 ? 4 : 8;
    const bool aligned = reinterpret_cast<uintptr_t>(ac.data_ptr()) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(bc.data_ptr()) % 16 == 0;
    if (n % per16 == 0 && aligned) {
      Tensor out = empty_on({m, n}, out_dtype, a.device());
      if (m > 0 && n > 0) lt_fp8_gemm(ac, bc, scale_a, scale_b, out);
      return out;
    }
    // else: the widened path below (same contract).
  }
  // Emulated FP8 (pre-Ada GPUs): exact widening to BF16, an FP32-accumulated GEMM to F32, then
  // s = f32(scale_a * scale_b) applied once, and one rounding to out_dtype.
  const Tensor acc = bf16_gemm_f32(to_dtype(ac, DType::BFloat16), false, to_dtype(bc, DType::BFloat16), true);
  const Tensor out = mul(acc, mul(scale_a, scale_b));
  return out_dtype == DType::Float32 ? out : to_dtype(out, out_dtype);
}

}  // namespace mixtape::cuda
