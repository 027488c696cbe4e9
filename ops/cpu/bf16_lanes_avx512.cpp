// ops/cpu/bf16_lanes_avx512.cpp — see bf16_lanes_avx512.h. Only the MT_LANES functions hold
// AVX-512 instructions; they run only after bf16_lanes_available().
#include "ops/cpu/bf16_lanes_avx512.h"

#include "core/error.h"
#include "ops/cpu/cpu_features.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "ops/cpu/bf16_round_avx512.h"
#define MIXTAPE_HAVE_BF16_LANES 1
#define MT_LANES __attribute__((target("avx512f,avx512bw,avx512vl")))
// GCC 12's shift/convert intrinsics start from _mm512_undefined_*(); see ops/cpu/sgemm_avx512.cpp.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#else
#define MIXTAPE_HAVE_BF16_LANES 0
#endif

namespace mixtape::cpu {

bool bf16_lanes_available() {
  static const bool on = [] {
    const CpuFeatures& f = cpu_features();
    return MIXTAPE_HAVE_BF16_LANES && f.avx512f && f.avx512bw && f.avx512vl && f.os_zmm_state;
  }();
  return on;
}

#if MIXTAPE_HAVE_BF16_LANES
namespace {

MT_LANES inline __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

template <LaneOp Op>
MT_LANES inline __m512 apply(__m512 x, __m512 y) {
  if constexpr (Op == LaneOp::Add) return _mm512_add_ps(x, y);
  if constexpr (Op == LaneOp::Sub) return _mm512_sub_ps(x, y);
  if constexpr (Op == LaneOp::Mul) return _mm512_mul_ps(x, y);
  if constexpr (Op == LaneOp::Div) return _mm512_div_ps(x, y);
}

template <LaneOp Op>
MT_LANES void rows(int64_t n, char* out, const char* a, const char* b) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 2 * i)));
    const __m512 y = widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2 * i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * i), round_to_bf16(apply<Op>(x, y)));
  }
  if (i < n) {
    const auto m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512 x = widen(_mm256_maskz_loadu_epi16(m, a + 2 * i));
    const __m512 y = widen(_mm256_maskz_loadu_epi16(m, b + 2 * i));
    _mm256_mask_storeu_epi16(out + 2 * i, m, round_to_bf16(apply<Op>(x, y)));
  }
}

// ---- relu and its gradient on 32 BF16 bit patterns (fn::Relu::bf16_bits, fn::ReluGrad::bf16_bits) ----
// A NaN comes back quiet, as rounding a widened NaN makes it.
MT_LANES inline __m512i quieted(__m512i b) {
  const __mmask32 nan = _mm512_cmpgt_epu16_mask(_mm512_and_si512(b, _mm512_set1_epi16(0x7FFF)), _mm512_set1_epi16(0x7F80));
  return _mm512_mask_mov_epi16(b, nan, _mm512_or_si512(b, _mm512_set1_epi16(0x0040)));
}
// relu: a negative (sign set, not -0, not NaN) becomes +0, anything else is kept.
MT_LANES inline __m512i relu_bits(__m512i b) {
  const __m512i mag = _mm512_and_si512(b, _mm512_set1_epi16(0x7FFF));
  const __mmask32 negative = _mm512_test_epi16_mask(b, _mm512_set1_epi16(static_cast<short>(0x8000))) &
                             _mm512_test_epi16_mask(mag, mag) &
                             _mm512_cmple_epu16_mask(mag, _mm512_set1_epi16(0x7F80));
  return _mm512_maskz_mov_epi16(static_cast<__mmask32>(~negative), quieted(b));
}
// relu's gradient g where relu's output is positive (sign clear, not zero, not NaN), else +0.
MT_LANES inline __m512i relu_grad_bits(__m512i g, __m512i out) {
  const __mmask32 positive = _mm512_test_epi16_mask(out, out) & _mm512_cmple_epu16_mask(out, _mm512_set1_epi16(0x7F80));
  return _mm512_maskz_mov_epi16(positive, quieted(g));
}
MT_LANES inline __mmask32 first32(int64_t n) { return n >= 32 ? ~__mmask32(0) : (__mmask32(1) << n) - 1u; }

MT_LANES void relu_rows(int64_t n, char* out, const char* a) {
  for (int64_t i = 0; i < n; i += 32) {
    const __mmask32 m = first32(n - i);
    _mm512_mask_storeu_epi16(out + 2 * i, m, relu_bits(_mm512_maskz_loadu_epi16(m, a + 2 * i)));
  }
}
MT_LANES void relu_grad_rows(int64_t n, char* out, const char* g, const char* y) {
  for (int64_t i = 0; i < n; i += 32) {
    const __mmask32 m = first32(n - i);
    _mm512_mask_storeu_epi16(out + 2 * i, m,
                             relu_grad_bits(_mm512_maskz_loadu_epi16(m, g + 2 * i), _mm512_maskz_loadu_epi16(m, y + 2 * i)));
  }
}

}  // namespace

void bf16_binary_lanes(LaneOp op, int64_t n, char* out, const char* a, const char* b) {
  switch (op) {
    case LaneOp::Add: return rows<LaneOp::Add>(n, out, a, b);
    case LaneOp::Sub: return rows<LaneOp::Sub>(n, out, a, b);
    case LaneOp::Mul: return rows<LaneOp::Mul>(n, out, a, b);
    case LaneOp::Div: return rows<LaneOp::Div>(n, out, a, b);
    case LaneOp::ReluGrad: return relu_grad_rows(n, out, a, b);
    default: break;
  }
  MT_ERROR("bf16_binary_lanes: not a binary lane operation");
}

void bf16_unary_lanes(LaneOp op, int64_t n, char* out, const char* a) {
  if (op == LaneOp::Relu) return relu_rows(n, out, a);
  MT_ERROR("bf16_unary_lanes: not a unary lane operation");
}
#else
void bf16_binary_lanes(LaneOp, int64_t, char*, const char*, const char*) {
  MT_ERROR("bf16_binary_lanes: not built for this target");
}
void bf16_unary_lanes(LaneOp, int64_t, char*, const char*) { MT_ERROR("bf16_unary_lanes: not built for this target"); }
#endif

}  // namespace mixtape::cpu
