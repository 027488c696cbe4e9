// ops/cpu/bf16_rows_avx512.cpp — see bf16_rows_avx512.h. Only the MT_TARGET_AVX512 functions hold
// AVX-512 instructions; they run only after bf16_rows_available().
#include "ops/cpu/bf16_rows_avx512.h"

#include "core/error.h"
#include "ops/cpu/cpu_features.h"

#include "ops/cpu/bf16_round_avx512.h"
#include "ops/cpu/isa.h"
MT_KERNELS_BEGIN

namespace mixtape::cpu {

bool bf16_rows_available() { return isa_avx512(); }

#if MIXTAPE_X86_KERNELS
namespace {

template <RowOp Op>
MT_TARGET_AVX512 inline __m512 apply(__m512 x, __m512 y) {
  if constexpr (Op == RowOp::Add) return _mm512_add_ps(x, y);
  if constexpr (Op == RowOp::Sub) return _mm512_sub_ps(x, y);
  if constexpr (Op == RowOp::Mul) return _mm512_mul_ps(x, y);
  if constexpr (Op == RowOp::Div) return _mm512_div_ps(x, y);
}

template <RowOp Op>
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

void bf16_binary_rows(RowOp op, int64_t n, char* out, const char* a, const char* b) {
  switch (op) {
    case RowOp::Add: return rows<RowOp::Add>(n, out, a, b);
    case RowOp::Sub: return rows<RowOp::Sub>(n, out, a, b);
    case RowOp::Mul: return rows<RowOp::Mul>(n, out, a, b);
    case RowOp::Div: return rows<RowOp::Div>(n, out, a, b);
    case RowOp::Generic: break;
  }
  MT_ERROR("bf16_binary_rows: no row operation given");
}

}  // namespace mixtape::cpu

MT_KERNELS_END
