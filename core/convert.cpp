// core/convert.cpp — the bulk converters and their run-time backend choice.
// Invariant: the SIMD loops produce the same bits as the scalar functions for every input.
// That holds because (a) vcvtps2ph with an immediate round-to-nearest-even ignores MXCSR's
// rounding mode and handles subnormals and NaNs exactly as float_to_half_bits is written to,
// (b) vcvtph2ps is exact and quiets NaNs as half_bits_to_float does, and (c) the bf16 loops are
// the scalar integer algorithm spelt in AVX2 lanes. tests/core/test_half_bfloat16.cpp and
// bench/exhaustive_convert.cpp check it; a new backend must pass both before it is selected.
//
// Only the functions marked target("avx2,f16c") contain those instructions, so the rest of the
// library is built for the baseline x86-64 ISA and never runs them on a CPU without them.
#include "core/convert.h"

#include <array>
#include <atomic>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define MIXTAPE_HAVE_X86_SIMD 1
#else
#define MIXTAPE_HAVE_X86_SIMD 0
#endif

namespace mixtape {
namespace {

std::atomic<bool> g_force_scalar{false};

bool cpu_has_f16c_avx2() {
#if MIXTAPE_HAVE_X86_SIMD
  // Asked once: the answer cannot change while the process runs. GCC's check includes the
  // OS's XSAVE support for YMM state, not just the CPUID bits.
  static const bool has = [] {
    __builtin_cpu_init();
#if defined(__clang__)
    // Older clang rejects the "f16c" feature name; CPUID leaf 1, ECX bit 29 is the same bit.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
#else
    const bool f16c = __builtin_cpu_supports("f16c");
#endif
    return f16c && __builtin_cpu_supports("avx2");
  }();
  return has;
#else
  return false;
#endif
}

bool use_simd() { return !g_force_scalar.load(std::memory_order_relaxed) && cpu_has_f16c_avx2(); }

// Scalar loops: the reference behaviour, and the tail of every SIMD loop.
void float_to_half_scalar(const float* src, Half* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i].bits = float_to_half_bits(src[i]);
}
void half_to_float_scalar(const Half* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = half_bits_to_float(src[i].bits);
}
void float_to_bfloat16_scalar(const float* src, BFloat16* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i].bits = float_to_bfloat16_bits(src[i]);
}
void bfloat16_to_float_scalar(const BFloat16* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bfloat16_bits_to_float(src[i].bits);
}

#if MIXTAPE_HAVE_X86_SIMD
#define MIXTAPE_TARGET_AVX2_F16C __attribute__((target("avx2,f16c")))
// Every SIMD loop below ends with _mm256_zeroupper() before its scalar tail. GCC 12 leaves it out
// when the tail is a sibling call (a jmp to the scalar function, seen in the fp16 loops), and the
// rest of the library is legacy-SSE code: with the upper YMM halves dirty every SSE instruction
// after a conversion paid the SSE/AVX transition cost.

MIXTAPE_TARGET_AVX2_F16C void float_to_half_f16c(const float* src, Half* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  _mm256_zeroupper();
  float_to_half_scalar(src + i, dst + i, n - i);
}

MIXTAPE_TARGET_AVX2_F16C void half_to_float_f16c(const Half* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  _mm256_zeroupper();
  half_to_float_scalar(src + i, dst + i, n - i);
}

// float_to_bfloat16_bits on 8 lanes, each result in the low 16 bits of its 32-bit lane.
MIXTAPE_TARGET_AVX2_F16C inline __m256i bf16_round_lanes(__m256i x) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i inf_bits = _mm256_set1_epi32(0x7F800000);
  const __m256i bias = _mm256_set1_epi32(0x7FFF);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i quiet = _mm256_set1_epi32(0x0040);

  const __m256i hi = _mm256_srli_epi32(x, 16);
  const __m256i lsb = _mm256_and_si256(hi, one);
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(bias, lsb)), 16);
  // |x| is non-negative as a signed int, so a signed compare against inf's bits finds NaNs.
  const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf_bits);
  const __m256i nan = _mm256_or_si256(hi, quiet);
  return _mm256_blendv_epi8(rounded, nan, is_nan);
}

MIXTAPE_TARGET_AVX2_F16C void float_to_bfloat16_avx2(const float* src, BFloat16* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = bf16_round_lanes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m256i b =
        bf16_round_lanes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 8)));
    // Every lane is <= 0xFFFF, so unsigned-saturating pack is a plain narrowing. The pack
    // works within 128-bit halves (a0-3 b0-3 | a4-7 b4-7); the permute restores a0-7 b0-7.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
  _mm256_zeroupper();
  float_to_bfloat16_scalar(src + i, dst + i, n - i);
}

MIXTAPE_TARGET_AVX2_F16C void bfloat16_to_float_avx2(const BFloat16* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256i f = _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), f);
  }
  _mm256_zeroupper();
  bfloat16_to_float_scalar(src + i, dst + i, n - i);
}
#endif  // MIXTAPE_HAVE_X86_SIMD

}  // namespace

void convert_float_to_half(const float* src, Half* dst, size_t n) {
#if MIXTAPE_HAVE_X86_SIMD
  if (use_simd()) return float_to_half_f16c(src, dst, n);
#endif
  float_to_half_scalar(src, dst, n);
}

void convert_half_to_float(const Half* src, float* dst, size_t n) {
#if MIXTAPE_HAVE_X86_SIMD
  if (use_simd()) return half_to_float_f16c(src, dst, n);
#endif
  half_to_float_scalar(src, dst, n);
}

void convert_float_to_bfloat16(const float* src, BFloat16* dst, size_t n) {
#if MIXTAPE_HAVE_X86_SIMD
  if (use_simd()) return float_to_bfloat16_avx2(src, dst, n);
#endif
  float_to_bfloat16_scalar(src, dst, n);
}

void convert_bfloat16_to_float(const BFloat16* src, float* dst, size_t n) {
#if MIXTAPE_HAVE_X86_SIMD
  if (use_simd()) return bfloat16_to_float_avx2(src, dst, n);
#endif
  bfloat16_to_float_scalar(src, dst, n);
}

namespace {
template <typename T, uint8_t (*Encode)(float, Fp8Saturation)>
void float_to_float8(const float* src, T* dst, size_t n, Float8Cast cast) {
  if (cast.scale == 1.0f) {
    for (size_t i = 0; i < n; ++i) dst[i].bits = Encode(src[i], cast.saturation);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i].bits = Encode(src[i] * cast.scale, cast.saturation);
  }
}
// Every pattern's float, from the scalar decoder, built once (thread-safe static init).
template <float (*Decode)(uint8_t)>
const float* float8_table() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (unsigned b = 0; b < 256; ++b) t[b] = Decode(static_cast<uint8_t>(b));
    return t;
  }();
  return table.data();
}
template <typename T, float (*Decode)(uint8_t)>
void float8_to_float(const T* src, float* dst, size_t n, float scale) {
  const float* table = float8_table<Decode>();
  if (scale == 1.0f) {
    for (size_t i = 0; i < n; ++i) dst[i] = table[src[i].bits];
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = table[src[i].bits] * scale;
  }
}
}  // namespace

void convert_float_to_e4m3fn(const float* src, Float8_e4m3fn* dst, size_t n, Float8Cast cast) {
  float_to_float8<Float8_e4m3fn, float_to_e4m3fn_bits>(src, dst, n, cast);
}
void convert_float_to_e5m2(const float* src, Float8_e5m2* dst, size_t n, Float8Cast cast) {
  float_to_float8<Float8_e5m2, float_to_e5m2_bits>(src, dst, n, cast);
}
void convert_e4m3fn_to_float(const Float8_e4m3fn* src, float* dst, size_t n, float scale) {
  float8_to_float<Float8_e4m3fn, e4m3fn_bits_to_float>(src, dst, n, scale);
}
void convert_e5m2_to_float(const Float8_e5m2* src, float* dst, size_t n, float scale) {
  float8_to_float<Float8_e5m2, e5m2_bits_to_float>(src, dst, n, scale);
}

const char* convert_backend() { return use_simd() ? "f16c+avx2" : "scalar"; }

void set_convert_force_scalar(bool force) {
  g_force_scalar.store(force, std::memory_order_relaxed);
}

}  // namespace mixtape
