// amp/cuda/mx_block_kernels.h — MXFP8's block casts on the device (amp/cuda/mx_block.cu), for
// Fp8Autocast(CUDA) under MXFP8BlockScaling (amp/cuda/mx_autocast_cuda.cpp): a tensor seen as
// (outer, len, inner), blocks of k consecutive indices along len at each (outer, inner), each
// block one E8M0 code from its amax and its elements cast to FP8 and widened to BF16 with the
// block scale applied. Plain pointers, C++17, no Tensor.
// Invariant: every code, FP8 element and BF16 widening comes from amp/mx_scale_rule.h, the rule
// the CPU's mx_quantize_widened (amp/mx_block.cpp) runs, so both devices give the same bits.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace mixtape::amp::cuda {

struct MxBlocks {
  int64_t outer, len, inner, k;  // nb = ceil(len / k) blocks along len; the last may be shorter
  bool e5m2;                     // the elements' format: E5M2, else E4M3
  bool spec;                     // MxScaleRounding::Spec, else Up
};

// x: (outer, len, inner) contiguous, of dtype src (Float32, BFloat16 or Float16). Writes, each
// when not null: data (FP8 codes, x's layout), codes ((outer, nb, inner) E8M0 codes), widened
// (BF16 bits, x's layout). One thread per block; no host synchronisation.
cudaError_t launch_mx_quantize(DType src, const void* x, MxBlocks b, uint8_t* data, uint8_t* codes,
                               uint16_t* widened, cudaStream_t s);
// The BF16 widening of a saved MX operand: widened[i] = mx_widen(decode(data[i]), 2^e of its block).
cudaError_t launch_mx_widen(const uint8_t* data, const uint8_t* codes, MxBlocks b, uint16_t* widened, cudaStream_t s);

}  // namespace mixtape::amp::cuda
