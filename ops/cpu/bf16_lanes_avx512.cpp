// ops/cpu/bf16_lanes_avx512.cpp — see bf16_lanes_avx512.h. Only the MT_TARGET_AVX512 functions hold
// AVX-512 instructions; they run only after bf16_lanes_available().
#include "ops/cpu/bf16_lanes_avx512.h"

#include "core/error.h"
#include "ops/cpu/cpu_features.h"

#include "ops/cpu/bf16_round_avx512.h"
#include "ops/cpu/isa.h"
MT_KERNELS_BEGIN

namespace mixtape::cpu {

bool bf16_lanes_available() { return isa_avx512(); }

#if MIXTAPE_X86_KERNELS
namespace {

template <LaneOp Op>
MT_TARGET_AVX512 inline __m512 apply(__m512 x, __m512 y) {
  if constexpr (Op == LaneOp::Add) return _mm512_add_ps(x, y);
  if constexpr (Op == LaneOp::Sub) return _mm512_sub_ps(x, y);
  if constexpr (Op == LaneOp::Mul) return _mm512_mul_ps(x, y);
  if constexpr (Op == LaneOp::Div) return _mm512_div_ps(x, y);
}

template <LaneOp Op>
MT_TARGET_AVX512 void rows(int64_t n, char* out, const char* a, const char* b) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = widen_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 2 * i)));
    const __m512 y = widen_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2 * i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * i), round_to_bf16(apply<Op>(x, y)));
  }
  if (i < n) {
    const auto m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512 x = widen_bf16(_mm256_maskz_loadu_epi16(m, a + 2 * i));
    const __m512 y = widen_bf16(_mm256_maskz_loadu_epi16(m, b + 2 * i));
    _mm256_mask_storeu_epi16(out + 2 * i, m, round_to_bf16(apply<Op>(x, y)));
  }
}

}  // namespace
#endif  // MIXTAPE_X86_KERNELS

void bf16_binary_lanes(LaneOp op, int64_t n, char* out, const char* a, const char* b) {
  switch (op) {
    case LaneOp::Add: return rows<LaneOp::Add>(n, out, a, b);
    case LaneOp::Sub: return rows<LaneOp::Sub>(n, out, a, b);
    case LaneOp::Mul: return rows<LaneOp::Mul>(n, out, a, b);
    case LaneOp::Div: return rows<LaneOp::Div>(n, out, a, b);
    case LaneOp::NotLanewise: break;
  }
  MT_ERROR("bf16_binary_lanes: no lane operation given");
}

}  // namespace mixtape::cpu

MT_KERNELS_END
