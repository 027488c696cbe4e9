// core/convert.h — bulk fp32 <-> fp16 / bf16 / fp8 conversion of contiguous arrays.
// Invariant: every function here gives, element for element, exactly the bits of the scalar
// conversion in core/half.h / core/bfloat16.h (NaN patterns included), whichever backend runs.
// The backend (x86 F16C + AVX2, or the portable scalar loop) is chosen at run time, so the
// library itself is built for the baseline ISA and still uses F16C where the CPU has it.
#pragma once
#include <cstddef>

#include "core/bfloat16.h"
#include "core/float8.h"
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

// fp32 <-> FP8, the casts FP8 scaling recipes make (docs/FP8.md): narrowing computes
// dst[i] = fp8(src[i] * scale), the product rounded to f32 first (as Transformer Engine's cast
// kernels compute it) and then to FP8 by core/float8.h's scalar function with `saturation`;
// scale == 1 skips the multiply, so the result is exactly the scalar conversion of src[i].
// Widening computes dst[i] = float(src[i]) * scale (exact when scale is a power of two and
// the product stays normal). The fp8 paths have no SIMD backend: narrowing is the scalar loop,
// widening a 256-entry table built from the scalar function, so both are bit-identical to it.
struct Float8Cast {
  float scale = 1.0f;
  Fp8Saturation saturation = Fp8Saturation::None;
};
void convert_float_to_e4m3fn(const float* src, Float8_e4m3fn* dst, size_t n, Float8Cast cast = {});
void convert_float_to_e5m2(const float* src, Float8_e5m2* dst, size_t n, Float8Cast cast = {});
void convert_e4m3fn_to_float(const Float8_e4m3fn* src, float* dst, size_t n, float scale = 1.0f);
void convert_e5m2_to_float(const Float8_e5m2* src, float* dst, size_t n, float scale = 1.0f);

// The backend the calls above use now: "f16c+avx2" or "scalar". For logs and benchmarks.
const char* convert_backend();

// Test/benchmark knob: true makes every call above take the scalar loop even where F16C is
// available, so both paths can be compared on one machine. Process-wide, thread-safe.
void set_convert_force_scalar(bool force);

}  // namespace mixtape
