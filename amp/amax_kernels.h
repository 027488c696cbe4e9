// amp/amax_kernels.h — max |v| over a contiguous f32 or BF16 array, the pass current scaling makes
// over each FP8 operand before its cast (amp/fp8_scaling.h's amax_of splits a tensor over threads).
// Invariant: NaNs are dropped, an inf is kept, 0 for n == 0; AVX-512 and the plain loop give the
// same value (max is exact and order-free).
#pragma once
#include <cstdint>

#include "core/bfloat16.h"

namespace mixtape::amp {

float amax_f32(const float* p, int64_t n);
float amax_bf16(const BFloat16* p, int64_t n);

}  // namespace mixtape::amp
