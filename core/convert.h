// core/convert.h — bulk fp32 <-> fp16 / bf16 conversion of contiguous arrays.
// Invariant: every function here gives, element for element, exactly the bits of the scalar
// conversion in core/half.h / core/bfloat16.h (NaN patterns included), whichever backend runs.
// The backend (x86 F16C + AVX2, or the portable scalar loop) is chosen at run time, so the
// library itself is built for the baseline ISA and still uses F16C where the CPU has it.
#pragma once
#include <cstddef>

#include "core/bfloat16.h"
#include "core/half.h"

namespace mixtape {

// src: (n,) f32, dst: (n,) f16. Arrays need no alignment; src and dst must not overlap.
void convert_float_to_half(const float* src, Half* dst, size_t n);
// src: (n,) f16, dst: (n,) f32.
void convert_half_to_float(const Half* src, float* dst, size_t n);
// src: (n,) f32, dst: (n,) bf16.
void convert_float_to_bfloat16(const float* src, BFloat16* dst, size_t n);
// src: (n,) bf16, dst: (n,) f32.
void convert_bfloat16_to_float(const BFloat16* src, float* dst, size_t n);

// The backend the calls above use now: "f16c+avx2" or "scalar". For logs and benchmarks.
const char* convert_backend();

// Test/benchmark knob: true makes every call above take the scalar loop even where F16C is
// available, so both paths can be compared on one machine. Process-wide, thread-safe.
void set_convert_force_scalar(bool force);

}  // namespace mixtape
