// amp/fp8_gemm.cpp — see amp/fp8_gemm.h.
#include "amp/fp8_gemm.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

#include "core/error.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/kernel_table.h"
#include "ops/cpu/loops.h"

namespace mixtape::amp {

Tensor fp8_gemm(const Fp8Operand& a, bool ta, const Fp8Operand& b, bool tb, const char* who, float* post_out,
                const char* op_pass) {
  // The matrices the GEMM reads: the operands' data, or their pre-widened BF16 form.
  const Tensor& am = a.widened.defined() ? a.widened : a.data;
  const Tensor& bm = b.widened.defined() ? b.widened : b.data;
  // In terms of the stored matrices: a transposed widened operand flips its op.
  ta = ta != (a.widened.defined() && a.widened_transposed);
  tb = tb != (b.widened.defined() && b.widened_transposed);
  MT_CHECK(am.dim() == 2 && bm.dim() == 2, who, ": FP8 GEMM operands must be 2-D, got ", am.describe(), " and ",
           bm.describe());
  const int64_t m = ta ? am.size(1) : am.size(0), k = ta ? am.size(0) : am.size(1);
  const int64_t kb = tb ? bm.size(1) : bm.size(0), n = tb ? bm.size(0) : bm.size(1);
  MT_CHECK(k == kb, who, ": FP8 GEMM inner dimensions differ: ", k, " and ", kb);
  MT_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX, who, ": BLAS takes int dimensions; got ", m, " x ", k,
           " @ ", k, " x ", n);
  Tensor c = Tensor::empty({m, n}, TensorOptions(DType::Float32));
  float* cp = c.data_ptr<float>();
  if (post_out != nullptr) *post_out = 1.0f;  // for the early returns: nothing to scale
  if (m == 0 || n == 0) return c;
  if (k == 0) {
    std::fill(cp, cp + m * n, 0.0f);
    return c;
  }
  const Tensor aw = widen_to_bf16(a), bw = widen_to_bf16(b);
  const cpu::KernelPick pick = cpu::gemm_pick(DType::BFloat16, m, n, op_pass);
  cpu::gemm(ta, tb, m, n, k, aw.data_ptr<BFloat16>(), std::max<int64_t>(aw.size(1), 1), bw.data_ptr<BFloat16>(),
            std::max<int64_t>(bw.size(1), 1), 0.0f, cp, n, pick.index);
  cpu::trace_kernel_choice(
      op_pass,
      [&] {
        const bool lin = std::strcmp(op_pass, "linear.fwd") == 0;
        return std::string("bf16") + (lin ? "" : " B=1") + " M=" + std::to_string(m) + " K=" + std::to_string(k) +
               " N=" + std::to_string(n) + cpu::steering_tags(true, false) + " fp8";
      },
      pick.name, pick.skipped);
  const float post = a.scale_inv * b.scale_inv;  // one f32 factor, as cuBLASLt's scale_a * scale_b
  if (post_out != nullptr) {
    *post_out = post;
    return c;
  }
  if (post != 1.0f) {
#pragma omp parallel for if (m * n >= cpu::kParallelGrain) schedule(static)
    for (int64_t i = 0; i < m * n; ++i) cp[i] *= post;
  }
  return c;
}

bool fp8_gemm_layout_free(int64_t m, int64_t n, const char* op_pass) {
  const cpu::KernelPick pick = cpu::gemm_pick(DType::BFloat16, m, n, op_pass);
  return pick.name != nullptr && std::strcmp(pick.name, "blas_sgemm") != 0;
}

}  // namespace mixtape::amp
