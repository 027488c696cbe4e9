// ops/cpu/conv_input_grad_avx512.cpp — see conv_input_grad_avx512.h. Only the functions marked
// MT_TARGET_AVX512_FMA (MT_TARGET_AVX512BF16) hold AVX-512 (AVX512-BF16) instructions; they run only after
// conv_input_grad_direct_applies() (conv_input_grad_pairs_applies()), which checks the CPU, said yes.
#include "ops/cpu/conv_input_grad_avx512.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <utility>

#include "core/convert.h"
#include "core/error.h"
#include "ops/cpu/aligned_buffer.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/conv_implicit_gemm.h"
#include "ops/cpu/tile_threads.h"

#include "ops/cpu/bf16_round_avx512.h"
#include "ops/cpu/transpose_avx512.h"
#include "ops/cpu/isa.h"
MT_KERNELS_BEGIN

namespace mixtape::cpu {
namespace {

constexpr int kAccumulators = 24;                    // P pixels x 3 taps x V vectors
constexpr int kMaxV = 2;                             // + 3 V weight vectors: at most 30 zmm live

#if MIXTAPE_X86_KERNELS

struct Plan {
  ConvShape s;
  PaddedPlanes pp;
  int64_t L, Cpad;
  int V;             // a block: the pixels of one of the row's blocks x 3 taps x V vectors of 16 channels
  RowBlocks row;
  int64_t cblocks;
  int64_t depth;     // depth steps per tap: O, or (O + 1) / 2 output-channel pairs
};

Plan plan_of(const ConvShape& s, bool pairs = false) {
  Plan p{};
  p.s = s;
  p.depth = pairs ? (s.O + 1) / 2 : s.O;
  p.pp = PaddedPlanes::of(s);
  p.L = s.OH * s.OW;
  p.Cpad = (s.C + 15) / 16 * 16;
  const int64_t vectors = p.Cpad / 16;
  p.V = vectors % kMaxV == 0 ? kMaxV : 1;
  p.row = RowBlocks::of(s.OW, kAccumulators / (kPaddedTaps * p.V));
  p.cblocks = vectors / p.V;
  return p;
}

// wt[((o kH + ki) 3 + kj) Cpad + c] = w[o, c, ki, kj] (widened exactly), zero for c >= C.
template <typename W>
void pack_weights(const Plan& p, const W* w, float* wt) {
  const ConvShape& s = p.s;
  std::fill(wt, wt + s.O * s.kH * kPaddedTaps * p.Cpad, 0.0f);
  for (int64_t o = 0; o < s.O; ++o)
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t t = 0; t < s.kH * kPaddedTaps; ++t)
        wt[(o * s.kH * kPaddedTaps + t) * p.Cpad + c] = static_cast<float>(w[(o * s.C + c) * s.kH * kPaddedTaps + t]);
}

// BF16 pairs: wt[((o2 kH + ki) 3 + kj) Cpad + c] = w[2 o2, c, ki, kj] | w[2 o2 + 1, c, ki, kj] << 16,
// the high half zero past O, both zero for c >= C.
void pack_weights(const Plan& p, const BFloat16* w, uint32_t* wt) {
  const ConvShape& s = p.s;
  const int64_t taps = s.kH * kPaddedTaps;
  std::fill(wt, wt + p.depth * taps * p.Cpad, 0u);
  for (int64_t o = 0; o < s.O; ++o)
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t t = 0; t < taps; ++t)
        wt[((o / 2) * taps + t) * p.Cpad + c] |= uint32_t(w[(o * s.C + c) * taps + t].bits) << (16 * (o % 2));
}

// One image's gy (O, L) BF16 -> words gp[o2 L + l] = gy[2 o2, l] | gy[2 o2 + 1, l] << 16 (the high
// half zero past O).
MT_TARGET_AVX512_FMA void stage_gy_pairs(const Plan& p, const BFloat16* gy, uint32_t* gp) {
  const int64_t O = p.s.O, L = p.L;
  for (int64_t o2 = 0; o2 < p.depth; ++o2) {
    const BFloat16* lo = gy + 2 * o2 * L;
    const BFloat16* hi = 2 * o2 + 1 < O ? lo + L : nullptr;
    for (int64_t l = 0; l < L; l += 16) {
      const int64_t n = std::min<int64_t>(16, L - l);
      const __mmask16 m = static_cast<__mmask16>(n == 16 ? 0xFFFF : (1u << n) - 1);
      __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, lo + l));
      if (hi) w = _mm512_or_si512(w, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, hi + l)), 16));
      _mm512_mask_storeu_epi32(gp + o2 * L + l, m, w);
    }
  }
}

// Output pixels [ow0, ow0 + P) of row oh, kernel row ki, channels [c0, c0 + 16 V) of one image:
// gxt[(oh sH + ki dH, (ow0 + j) SW + kj), c] += sum over o of wt[o, ki, kj, c] gy[o, pixel j].
// A block's accumulators (pixel j, tap k at acc[3 j + k]): zeroed, and at the end added into gxt
// from `row` (pixel j, tap k to padded column j SW + k). Shared by both blocks, inlined (the BF16
// one's target includes this one's); unrolled so acc stays in registers.
template <int V, int P>
MT_TARGET_AVX512_FMA __attribute__((always_inline)) inline void zero_block(__m512 (&acc)[P * kPaddedTaps][V]) {
#pragma GCC unroll 24
  for (int a = 0; a < P * kPaddedTaps; ++a)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[a][v] = _mm512_setzero_ps();
}
template <int V, int P, int SW>
MT_TARGET_AVX512_FMA __attribute__((always_inline)) inline void add_block(const Plan& p, const __m512 (&acc)[P * kPaddedTaps][V],
                                                              float* row) {
#pragma GCC unroll 24
  for (int j = 0; j < P; ++j)
#pragma GCC unroll 3
    for (int k = 0; k < kPaddedTaps; ++k) {
      float* d = row + (j * SW + k) * p.Cpad;
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v)
        _mm512_store_ps(d + 16 * v, _mm512_add_ps(_mm512_load_ps(d + 16 * v), acc[j * kPaddedTaps + k][v]));
    }
}

// Every loop over acc's indices is unrolled (#pragma GCC unroll) so acc lives in registers; see
// the comment above ops/cpu/conv_direct_avx512.cpp's block: 12-17% of this kernel's time on stride 2.
template <int V, int P, int SW>
MT_TARGET_AVX512_FMA void block(const Plan& p, const float* gy, const float* wt, int64_t oh, int64_t ki, int64_t ow0, int64_t c0,
                    float* gxt) {
  const ConvShape& s = p.s;
  __m512 acc[P * kPaddedTaps][V];
  zero_block<V, P>(acc);
  const int64_t L = p.L, Cpad = p.Cpad, wstep = s.kH * kPaddedTaps * Cpad;
  const float* g = gy + oh * s.OW + ow0;
  const float* w = wt + ki * kPaddedTaps * Cpad + c0;
  for (int64_t o = 0; o < s.O; ++o, g += L, w += wstep) {
    __m512 wv[kPaddedTaps][V];
#pragma GCC unroll 3
    for (int k = 0; k < kPaddedTaps; ++k)
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) wv[k][v] = _mm512_load_ps(w + k * Cpad + 16 * v);
#pragma GCC unroll 24
    for (int j = 0; j < P; ++j) {
      const __m512 b = _mm512_set1_ps(g[j]);
#pragma GCC unroll 3
      for (int k = 0; k < kPaddedTaps; ++k)
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) {
          __m512& a = acc[j * kPaddedTaps + k][v];
          a = _mm512_fmadd_ps(wv[k][v], b, a);
        }
    }
  }
  add_block<V, P, SW>(p, acc, gxt + ((oh * s.sH + ki * s.dH) * p.pp.Wp + ow0 * SW) * Cpad + c0);
}

// block's BF16 twin on output-channel pairs: per depth step one vdpbf16ps per pixel, tap and vector
// adds both channels' products (exact in FP32) to the FP32 sum, the pair's gy word broadcast.
template <int V, int P, int SW>
MT_TARGET_AVX512BF16 void block_pairs(const Plan& p, const uint32_t* gy, const uint32_t* wt, int64_t oh, int64_t ki,
                               int64_t ow0, int64_t c0, float* gxt) {
  const ConvShape& s = p.s;
  __m512 acc[P * kPaddedTaps][V];
  zero_block<V, P>(acc);
  const int64_t L = p.L, Cpad = p.Cpad, wstep = s.kH * kPaddedTaps * Cpad;
  const uint32_t* g = gy + oh * s.OW + ow0;
  const uint32_t* w = wt + ki * kPaddedTaps * Cpad + c0;
  for (int64_t o2 = 0; o2 < p.depth; ++o2, g += L, w += wstep) {
    __m512bh wv[kPaddedTaps][V];
#pragma GCC unroll 3
    for (int k = 0; k < kPaddedTaps; ++k)
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) wv[k][v] = (__m512bh)_mm512_load_si512(w + k * Cpad + 16 * v);
#pragma GCC unroll 24
    for (int j = 0; j < P; ++j) {
      const __m512bh b = (__m512bh)_mm512_set1_epi32(static_cast<int>(g[j]));
#pragma GCC unroll 3
      for (int k = 0; k < kPaddedTaps; ++k)
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) {
          __m512& a = acc[j * kPaddedTaps + k][v];
          a = _mm512_dpbf16_ps(a, wv[k][v], b);
        }
    }
  }
  add_block<V, P, SW>(p, acc, gxt + ((oh * s.sH + ki * s.dH) * p.pp.Wp + ow0 * SW) * Cpad + c0);
}

// The block function for (column stride, V, P): E float runs block, E uint32_t (BF16 pairs) block_pairs.
template <typename E>
using BlockFn = void (*)(const Plan&, const E*, const E*, int64_t, int64_t, int64_t, int64_t, float*);
template <typename E, int V, int SW, int... Ps>
constexpr std::array<BlockFn<E>, sizeof...(Ps)> blocks_of(std::integer_sequence<int, Ps...>) {
  if constexpr (std::is_same_v<E, float>)
    return {&block<V, Ps + 1, SW>...};
  else
    return {&block_pairs<V, Ps + 1, SW>...};
}
template <typename E, int SW>
BlockFn<E> block_for(int V, int P) {
  static constexpr auto v1 = blocks_of<E, 1, SW>(std::make_integer_sequence<int, kAccumulators / kPaddedTaps>{});
  static constexpr auto v2 = blocks_of<E, 2, SW>(std::make_integer_sequence<int, kAccumulators / kPaddedTaps / 2>{});
  const size_t i = static_cast<size_t>(P - 1);
  return V == 2 ? v2[i] : v1[i];
}
template <typename E>
BlockFn<E> block_fn(int sW, int V, int P) {
  return sW == 2 ? block_for<E, 2>(V, P) : block_for<E, 1>(V, P);
}

// gxt (Hp, Wp, Cpad) -> gx (C, H, W): gx[c, h, w] = gxt[h + pH, w + pW, c], 0 where that is past the
// padded plane (input pixels no tap reads). 16 columns x 16 channels transposed in registers.
// Each value times alpha (skipped at 1: Fp8Autocast's dequantising scales) before it is stored.
MT_TARGET_AVX512_FMA void store_image(const Plan& p, const float* gxt, float alpha, float* gx) {
  const ConvShape& s = p.s;
  const __m512 a = _mm512_set1_ps(alpha);
  const int64_t Hp = p.pp.Hp, Wp = p.pp.Wp, HW = s.H * s.W;
  for (int64_t h = 0; h < s.H; ++h) {
    const int64_t r = h + s.pH;
    for (int64_t w0 = 0; w0 < s.W; w0 += 16) {
      const int64_t n = std::min<int64_t>(16, s.W - w0);
      const __mmask16 m = static_cast<__mmask16>(n == 16 ? 0xFFFF : (1u << n) - 1);
      for (int64_t c0 = 0; c0 < s.C; c0 += 16) {
        __m512 v[16];
        for (int64_t q = 0; q < 16; ++q) {
          const int64_t col = w0 + q + s.pW;
          v[q] = q < n && r < Hp && col < Wp ? _mm512_load_ps(gxt + (r * Wp + col) * p.Cpad + c0) : _mm512_setzero_ps();
        }
        transpose16x16(v);
        for (int64_t q = 0; q < 16 && c0 + q < s.C; ++q)
          _mm512_mask_storeu_ps(gx + (c0 + q) * HW + h * s.W + w0, m, alpha != 1.0f ? _mm512_mul_ps(v[q], a) : v[q]);
      }
    }
  }
}

// One image: gy (O, L) and gx (C, H, W) of storage E; 16-bit ones widened into / rounded once from
// this thread's FP32 scratch (gys: O L floats, gxf: C H W floats). X the staged element: float,
// or uint32_t BF16 output-channel pairs (gys: (O + 1) / 2 L words).
template <typename E, typename X>
void image(const Plan& p, const E* gy_e, const X* wt, float alpha, E* gx_e, float* gxt, X* gys, float* gxf) {
  const ConvShape& s = p.s;
  const X* gy;
  float* gx;
  if constexpr (std::is_same_v<X, uint32_t>) {
    stage_gy_pairs(p, gy_e, gys);
    gy = gys, gx = gxf;
  } else if constexpr (std::is_same_v<E, float>) {
    gy = gy_e, gx = gx_e;
  } else {
    if constexpr (std::is_same_v<E, Half>)
      convert_half_to_float(gy_e, gys, static_cast<size_t>(s.O * p.L));
    else
      convert_bfloat16_to_float(gy_e, gys, static_cast<size_t>(s.O * p.L));
    gy = gys, gx = gxf;
  }
  std::memset(gxt, 0, static_cast<size_t>(p.pp.Hp * p.pp.Wp * p.Cpad) * sizeof(float));
  const int sW = static_cast<int>(s.sW);
  const BlockFn<X> full = block_fn<X>(sW, p.V, p.row.size), last = block_fn<X>(sW, p.V, p.row.last);
  for (int64_t ki = 0; ki < s.kH; ++ki)
    for (int64_t oh = 0; oh < s.OH; ++oh)
      for (int64_t b = 0; b < p.row.count; ++b)
        for (int64_t cb = 0; cb < p.cblocks; ++cb)
          (b + 1 < p.row.count ? full : last)(p, gy, wt, oh, ki, b * p.row.size, cb * p.V * 16, gxt);
  store_image(p, gxt, alpha, gx);
  if constexpr (std::is_same_v<E, Half>)
    convert_float_to_half(gxf, gx_e, static_cast<size_t>(s.C * s.H * s.W));
  else if constexpr (std::is_same_v<E, BFloat16>)
    convert_float_to_bfloat16(gxf, gx_e, static_cast<size_t>(s.C * s.H * s.W));  // the one rounding
}

#endif  // MIXTAPE_X86_KERNELS

}  // namespace

bool conv_input_grad_direct_applies(const ConvShape& s) {
  return padded_geometry_ok(s) && (s.sW == 1 || s.sW == 2) &&
         conv_kernels_enabled();
}

bool conv_input_grad_pairs_applies(const ConvShape& s) {
  return conv_input_grad_direct_applies(s) && bf16_on_vdpbf16ps();
}

#if MIXTAPE_X86_KERNELS
namespace {
// Pairs: the BF16 twin on output-channel pairs (E and W BFloat16).
template <bool Pairs, typename E, typename W>
void run(const ConvShape& s, const E* gy, const W* w, E* gx, float alpha = 1.0f) {
  const char* name = Pairs ? "conv_input_grad_pairs" : "conv_input_grad_direct";
  MT_CHECK(Pairs ? conv_input_grad_pairs_applies(s) : conv_input_grad_direct_applies(s), name,
           ": this CPU or geometry is not one it takes (check ", name, "_applies() first)");
  using X = std::conditional_t<Pairs, uint32_t, float>;
  const Plan p = plan_of(s, Pairs);
  AlignedBuffer<X> wt;
  pack_weights(p, w, wt.get(p.depth * s.kH * kPaddedTaps * p.Cpad));
  const int64_t macs = s.N * p.L * s.O * s.C * s.kH * kPaddedTaps;
  const int nt = padded_kernel_threads(macs, s.N);
  // Per thread: the padded gradient, and for 16-bit storage the image's gy (staged) and gx in FP32.
  constexpr bool wide = !std::is_same_v<E, float>;
  const int64_t gsize = p.pp.Hp * p.pp.Wp * p.Cpad, ysize = wide ? p.depth * p.L : 0, xsize = wide ? s.C * s.H * s.W : 0;
  const int64_t per = (gsize + xsize + 15) / 16 * 16, yper = (ysize + 15) / 16 * 16;
  AlignedBuffer<float> scratch;
  AlignedBuffer<X> staged;
  float* buf = scratch.get(static_cast<int64_t>(nt) * per);
  X* ybuf = staged.get(static_cast<int64_t>(nt) * yper);
  const auto work = [&](int64_t lo, int64_t hi) {
    const int64_t t = nt > 1 ? omp_get_thread_num() : 0;  // (nt == 1: maybe in a team)
    float* mine = buf + t * per;
    for (int64_t n = lo; n < hi; ++n)
      image(p, gy + n * s.O * p.L, wt.data.get(), alpha, gx + n * s.C * s.H * s.W, mine, ybuf + t * yper, mine + gsize);
  };
  if (nt <= 1) return work(0, s.N);
  for_tile_ranges(nt, s.N, 1, work);
}
}  // namespace
#endif  // MIXTAPE_X86_KERNELS

void conv_input_grad_direct(const ConvShape& s, const float* gy, const float* w, float* gx) {
  MT_X86_ONLY(run<false>(s, gy, w, gx));
}
void conv_input_grad_direct(const ConvShape& s, const BFloat16* gy, const BFloat16* w, BFloat16* gx, float alpha) {
  MT_X86_ONLY(run<false>(s, gy, w, gx, alpha));
}
void conv_input_grad_direct(const ConvShape& s, const BFloat16* gy, const float* w, BFloat16* gx, float alpha) {
  MT_X86_ONLY(run<false>(s, gy, w, gx, alpha));
}
void conv_input_grad_direct(const ConvShape& s, const Half* gy, const float* w, Half* gx) {
  MT_X86_ONLY(run<false>(s, gy, w, gx));
}
void conv_input_grad_pairs(const ConvShape& s, const BFloat16* gy, const BFloat16* w, BFloat16* gx, float alpha) {
  MT_X86_ONLY(run<true>(s, gy, w, gx, alpha));
}

}  // namespace mixtape::cpu

MT_KERNELS_END
