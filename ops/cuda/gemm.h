// ops/cuda/gemm.h — the user switch of the CUDA GEMMs (CUDA builds only; no CUDA headers).
// FP32 matmul/linear on CUDA are exact-FP32 SGEMMs by default; set_allow_tf32(true) lets cuBLAS
// use TF32 tensor cores for them (10-bit mantissa products, FP32 accumulation), as PyTorch's
// torch.backends.cuda.matmul.allow_tf32 (default off). 16-bit GEMMs always run on tensor cores
// with FP32 accumulation; f64 GEMMs are DGEMMs. Process-wide, thread-safe.
#pragma once

namespace mixtape::cuda {
void set_allow_tf32(bool allow);
bool allow_tf32();
}  // namespace mixtape::cuda
