// ops/cuda/fp8_gemm.h — the FP8 GEMM on CUDA: out = s * a @ b^T with FP8 operands, FP32
// accumulation, s = f32(scale_a * scale_b) applied once to the FP32 result (the CPU's contract,
// amp/fp8_gemm.h), out BF16 or F32. CUDA builds only; no CUDA headers.
//
// Why "a @ b^T" with both operands [rows, k] row-major: it is the one layout Ada and Hopper FP8
// tensor cores take ("TN": both operands K-major). Row-major out[m, n] is column-major out^T, and
// out^T = b a^T is cuBLASLt's D (n x m) = op(A) op(B) with A = b's buffer (k x n column-major,
// transposed) and B = a's buffer (k x m column-major, not transposed): TN, no copies. A caller
// with another product makes the K-major copies it needs when it quantizes (a transposed FP8
// tensor is a cast of the transposed high-precision tensor, as Transformer Engine does on Hopper).
//
// Where it runs: compute capability 8.9 and later use cuBLASLt's FP8 matmul (A/B scale pointers
// read on the device, CUBLAS_COMPUTE_32F); older GPUs widen both operands to BF16 (exact: every
// FP8 value is a BF16 value), run cublasGemmEx with an F32 result and multiply by s on the device.
// Both paths compute f32(acc * s) rounded once to the output type, so they differ only by the
// order of the FP32 accumulation. cuBLASLt requires k, and both operands' rows, to be multiples of
// 16 bytes: k % 16 == 0 (refused otherwise, naming the sizes; pad k with zeros). An output row
// that is not a 16-byte multiple, or an operand not starting on a 16-byte boundary, takes the
// widened path on any GPU.
#pragma once
#include "core/tensor.h"

namespace mixtape::cuda {

// a: [m, k], b: [n, k], both contiguous FP8 (any mix but E5M2 x E5M2, which no FP8 GEMM takes) on
// one CUDA device; scale_a, scale_b: contiguous one-element f32 tensors there (the dequantising
// factors, 1 / the cast's scale). out_dtype: BFloat16 or Float32. Returns a contiguous [m, n].
Tensor fp8_gemm_nt(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b, DType out_dtype);
// op(a) @ op(b) in FP32 from two BF16 matrices (op: transposed when trans_*), a cublasGemmEx with
// FP32 compute and an F32 result, (m, n) contiguous: the widened FP8 GEMM above and MXFP8's GEMMs
// on the block-scaled BF16 operands (amp/cuda/mx_autocast_cuda.cpp), which any GPU runs.
Tensor bf16_gemm_f32(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b);
// True when `device` has FP8 tensor cores (compute capability >= 8.9), i.e. fp8_gemm_nt runs on
// cuBLASLt's FP8 matmul rather than the BF16 emulation.
bool fp8_gemm_native(int device);

}  // namespace mixtape::cuda
