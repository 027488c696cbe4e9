// ops/cpu/bf16_rows_avx512.h — contiguous BF16 rows of add, sub, mul and div on 16 AVX-512 lanes:
// widen (exact), one vaddps / vsubps / vmulps / vdivps (each lane rounded as the scalar operation),
// round once as core/bfloat16.h rounds. The same bits as the generic block loop of
// ops/cpu/elementwise.h (NaN payloads aside: where two NaNs meet, which one x86 hands on follows
// the operand order, which is the compiler's in the scalar loop), which is bound by its
// conversions rather than by memory: 2.7-3.5x faster on ResNet-8's tensors (docs/CPU.md, "16-bit
// storage").
// Invariant: bf16_binary_rows runs only where bf16_rows_available() (AVX-512 F/BW/VL and the OS
// saving ZMM state); the rest of the library stays baseline x86-64.
#pragma once
#include <cstdint>

#include "ops/functors.h"

namespace mixtape::cpu {

// Generic: the functor runs on the generic loops.
enum class RowOp { Generic, Add, Sub, Mul, Div };

// The lane operation that computes functor F's operator() bit for bit, or Generic.
template <typename F>
inline constexpr RowOp row_op_v = RowOp::Generic;
template <>
inline constexpr RowOp row_op_v<fn::Add> = RowOp::Add;
template <>
inline constexpr RowOp row_op_v<fn::Sub> = RowOp::Sub;
template <>
inline constexpr RowOp row_op_v<fn::Mul> = RowOp::Mul;
template <>
inline constexpr RowOp row_op_v<fn::Div> = RowOp::Div;

// isa_avx512() (the elementwise lists, ops/cpu/elementwise_kernels.cpp, ask isa_avx512() themselves).
bool bf16_rows_available();

// out[i] = a[i] op b[i] for i < n: BF16 rows, 2-byte strides; op is not Generic.
void bf16_binary_rows(RowOp op, int64_t n, char* out, const char* a, const char* b);

}  // namespace mixtape::cpu
