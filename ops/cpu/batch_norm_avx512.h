// ops/cpu/batch_norm_avx512.h — batch norm's passes over f32 and BF16 data in AVX-512.
//
// The per-channel sums follow ops/cpu/row_lane_sum.h's order (32 float partials in two
// registers, flushed into 32 f64 lanes every 32 chunks; BF16 widened exactly in registers), and
// the per-row maps compute what the generic loops of ops/normalization.cpp compute (float
// multiply, then add: never a fused multiply-add) and round once to BF16 in registers, as
// core/bfloat16.h rounds (ties to even, NaN kept quiet, subnormals kept). Invariant: every
// function equals the generic loop bit for bit (tests/ops/test_batch_norm_avx512.cpp), so a CPU
// without AVX-512 gets the same results. Run them only after batch_norm_avx512_available().
#pragma once
#include <cstdint>

#include "core/bfloat16.h"

namespace mixtape::cpu {

// True when this CPU (and OS) has AVX-512 F, BW and VL.
bool batch_norm_avx512_available();

// Over `rows` rows of S values, row r at x + r * stride (one channel of an (N, C, S) tensor:
// stride C S), in RowLaneSum<float>'s order, each term computed in float:
//   bn_sum_avx512        sum x
//   bn_dev_sums_avx512   sum d -> *sum_d and sum d d -> *sum_d2, d = x - shift
//   bn_grad_sums_avx512  sum g -> *sum_g and sum g (x - shift) -> *sum_gd (g and x share the layout)
double bn_sum_avx512(const float* x, int64_t rows, int64_t stride, int64_t S);
double bn_sum_avx512(const BFloat16* x, int64_t rows, int64_t stride, int64_t S);
void bn_dev_sums_avx512(const float* x, int64_t rows, int64_t stride, int64_t S, float shift, double* sum_d,
                        double* sum_d2);
void bn_dev_sums_avx512(const BFloat16* x, int64_t rows, int64_t stride, int64_t S, float shift, double* sum_d,
                        double* sum_d2);
void bn_grad_sums_avx512(const float* g, const float* x, int64_t rows, int64_t stride, int64_t S, float shift,
                         double* sum_g, double* sum_gd);
void bn_grad_sums_avx512(const BFloat16* g, const BFloat16* x, int64_t rows, int64_t stride, int64_t S, float shift,
                         double* sum_g, double* sum_gd);

// One row of n values: out = x * a + b (the forward), and out = (a * g + bx * x) + d (the input
// gradient), in float, rounded once to the element type.
void bn_affine_row_avx512(const float* x, int64_t n, float a, float b, float* out);
void bn_affine_row_avx512(const BFloat16* x, int64_t n, float a, float b, BFloat16* out);
void bn_grad_row_avx512(const float* g, const float* x, int64_t n, float a, float bx, float d, float* out);
void bn_grad_row_avx512(const BFloat16* g, const BFloat16* x, int64_t n, float a, float bx, float d,
                        BFloat16* out);

}  // namespace mixtape::cpu
