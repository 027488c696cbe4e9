// ops/cpu/conv_direct_avx512.cpp — see conv_direct_avx512.h. Only the functions marked MT_TARGET_AVX512_FMA
// (MT_TARGET_AVX512BF16) hold AVX-512 (AVX512-BF16) instructions; they run only after
// conv_direct_applies() (conv_pairs_applies()), which checks the CPU, said yes.
#include "ops/cpu/conv_direct_avx512.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <type_traits>
#include <utility>

#include "core/bfloat16.h"
#include "core/error.h"
#include "ops/cpu/aligned_buffer.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/conv_implicit_gemm.h"
#include "ops/cpu/tile_threads.h"

#include "ops/cpu/bf16_round_avx512.h"
#include "ops/cpu/padded_planes_avx512.h"
#include "ops/cpu/transpose_avx512.h"
#include "ops/cpu/isa.h"
MT_KERNELS_BEGIN

namespace mixtape::cpu {
namespace {

constexpr int kAccumulators = 24;                    // zmm accumulators per block: P pixels x V vectors
constexpr int64_t kWeightSliceBytes = 16 << 10;      // a depth slice's weights for one block: in L1

bool stride_ok(const ConvShape& s) { return s.sW == 1 || s.sW == 2; }

#if MIXTAPE_X86_KERNELS

struct Plan {
  ConvShape s;
  PaddedPlanes pp;   // FP32: one plane per channel; BF16 pairs: one per channel pair (pp.C = planes)
  int64_t planes;    // staged planes: C, or (C + 1) / 2 channel pairs
  int64_t L, Opad, K;  // K: depth steps, planes kH 3
  int V;             // a block: V vectors of 16 channels x the pixels of one of the row's blocks
  RowBlocks row;
  int64_t oblocks;
  int64_t cslice;  // planes per depth slice: their weights (cslice kH 3 rows x 16 V) stay in L1
};

// V and P: the most accumulators in use over the row's blocks (equal blocks of at most 24 / V
// pixels), the wider V on a tie (fewer broadcasts per multiply-add).
Plan plan_of(const ConvShape& s, bool pairs) {
  Plan p{};
  p.s = s;
  p.planes = pairs ? (s.C + 1) / 2 : s.C;
  p.pp = PaddedPlanes::of(s);
  p.pp.C = p.planes;
  p.L = s.OH * s.OW;
  p.Opad = (s.O + 15) / 16 * 16;
  p.K = p.planes * s.kH * kPaddedTaps;
  const int64_t vectors = p.Opad / 16;
  int64_t best = -1;
  for (int V : {4, 2, 1}) {
    if (vectors % V != 0) continue;
    const RowBlocks row = RowBlocks::of(s.OW, kAccumulators / V);
    if (row.size * V > best) best = row.size * V, p.V = V, p.row = row;
  }
  p.oblocks = vectors / p.V;
  const int64_t row_bytes = 64 * p.V * s.kH * kPaddedTaps;  // one channel's weight rows for a block
  p.cslice = std::max<int64_t>(1, kWeightSliceBytes / row_bytes);
  return p;
}

// Weights as wt[k Opad + o] = w[o, k] (k = (c kH + ki) 3 + kj), zero for o >= O.
void pack_weights(const Plan& p, const float* w, float* wt) {
  std::fill(wt, wt + p.K * p.Opad, 0.0f);
  for (int64_t o = 0; o < p.s.O; ++o)
    for (int64_t k = 0; k < p.K; ++k) wt[k * p.Opad + o] = w[o * p.K + k];
}

// BF16 pairs: wt[k Opad + o] = w[o, 2 c2, ki, kj] | w[o, 2 c2 + 1, ki, kj] << 16 for depth step
// k = (c2 kH + ki) 3 + kj, the high half zero past C, both zero for o >= O.
void pack_weights(const Plan& p, const BFloat16* w, uint32_t* wt) {
  const ConvShape& s = p.s;
  const int64_t taps = s.kH * kPaddedTaps;
  std::fill(wt, wt + p.K * p.Opad, 0u);
  for (int64_t o = 0; o < s.O; ++o)
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t t = 0; t < taps; ++t)
        wt[((c / 2) * taps + t) * p.Opad + o] |= uint32_t(w[(o * s.C + c) * taps + t].bits) << (16 * (c % 2));
}

// Output pixels [ow0, ow0 + P) of row oh x channels [o0, o0 + 16 V) of one staged image xp, input
// channels [c0, c1): yt[(oh OW + ow) Opad + o] += sum over those depths k of wt[k, o] xp[tap k of
// the pixel], in depth order, from +0 when c0 == 0. A slice continues the previous one's FMA chain
// (its sums stored and reloaded exactly), so slicing leaves the bits alone.
// A depth slice's (channel, kernel row) steps in order, as the offset of each one's staged row:
// kernel rows dH Wp apart within a channel, channels a plane apart.
struct DepthRows {
  int64_t off, kH, step, plane, ki = 0;
  void next() {
    if (++ki < kH) {
      off += step;
    } else {
      ki = 0;
      off += plane - (kH - 1) * step;
    }
  }
};

// A block's accumulators (pixel j, vector v at acc[j][v], their sums at d + j Opad + 16 v): from +0
// on the first depth slice, else reloaded; stored at the end. Shared by both blocks, inlined (the
// BF16 one's target includes this one's).
template <int V, int P>
MT_TARGET_AVX512_FMA __attribute__((always_inline)) inline void start_block(__m512 (&acc)[P][V], const float* d, int64_t Opad,
                                                                 bool first) {
#pragma GCC unroll 24
  for (int j = 0; j < P; ++j)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[j][v] = first ? _mm512_setzero_ps() : _mm512_load_ps(d + j * Opad + 16 * v);
}
template <int V, int P>
MT_TARGET_AVX512_FMA __attribute__((always_inline)) inline void end_block(const __m512 (&acc)[P][V], float* d, int64_t Opad) {
#pragma GCC unroll 24
  for (int j = 0; j < P; ++j)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) _mm512_store_ps(d + j * Opad + 16 * v, acc[j][v]);
}

// Every loop over acc's indices carries #pragma GCC unroll. Left rolled (GCC 12 does
// not unroll the set-up and store loops itself), acc stays an array in memory and its 14-24
// accumulators are stored and reloaded around every depth row: 3-12% of the forward's time.
template <int V, int P, int SW>
MT_TARGET_AVX512_FMA void block(const Plan& p, const float* xp, const float* wt, int64_t oh, int64_t ow0, int64_t o0,
                     int64_t c0, int64_t c1, float* yt) {
  const ConvShape& s = p.s;
  const int64_t Wp = p.pp.Wp, plane = p.pp.plane(), Opad = p.Opad;
  float* d = yt + (oh * s.OW + ow0) * Opad + o0;
  __m512 acc[P][V];
  start_block<V, P>(acc, d, Opad, c0 == 0);
  const float* base = xp + oh * s.sH * Wp + ow0 * SW;
  const float* w = wt + c0 * s.kH * kPaddedTaps * Opad + o0;
  // One loop over the slice's (channel, kernel row) pairs around taps x pixels x vectors, all
  // unrolled, so acc lives in registers (above).
  DepthRows rows{c0 * plane, s.kH, s.dH * Wp, plane};
  for (int64_t r = 0; r < (c1 - c0) * s.kH; ++r, rows.next()) {
    const float* row = base + rows.off;
#pragma GCC unroll 3
    for (int kj = 0; kj < kPaddedTaps; ++kj, w += Opad) {
      __m512 wv[V];
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) wv[v] = _mm512_load_ps(w + 16 * v);
#pragma GCC unroll 24
      for (int j = 0; j < P; ++j) {
        const __m512 b = _mm512_set1_ps(row[j * SW + kj]);
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) acc[j][v] = _mm512_fmadd_ps(wv[v], b, acc[j][v]);
      }
    }
  }
  end_block<V, P>(acc, d, Opad);
}

// block's BF16 twin on channel pairs: per depth step one vdpbf16ps per pixel and vector adds both
// channels' products (exact in FP32) to the FP32 sum, the pair's word broadcast from the staged plane.
template <int V, int P, int SW>
MT_TARGET_AVX512BF16 void block_bf16(const Plan& p, const uint32_t* xp, const uint32_t* wt, int64_t oh, int64_t ow0,
                               int64_t o0, int64_t c0, int64_t c1, float* yt) {
  const ConvShape& s = p.s;
  const int64_t Wp = p.pp.Wp, plane = p.pp.plane(), Opad = p.Opad;
  float* d = yt + (oh * s.OW + ow0) * Opad + o0;
  __m512 acc[P][V];
  start_block<V, P>(acc, d, Opad, c0 == 0);
  const uint32_t* base = xp + oh * s.sH * Wp + ow0 * SW;
  const uint32_t* w = wt + c0 * s.kH * kPaddedTaps * Opad + o0;
  // One loop over the slice's (channel, kernel row) pairs around taps x pixels x vectors, all
  // unrolled, so acc lives in registers (above).
  DepthRows rows{c0 * plane, s.kH, s.dH * Wp, plane};
  for (int64_t r = 0; r < (c1 - c0) * s.kH; ++r, rows.next()) {
    const uint32_t* row = base + rows.off;
#pragma GCC unroll 3
    for (int kj = 0; kj < kPaddedTaps; ++kj, w += Opad) {
      __m512bh wv[V];
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) wv[v] = (__m512bh)_mm512_load_si512(w + 16 * v);
#pragma GCC unroll 24
      for (int j = 0; j < P; ++j) {
        const __m512bh b = (__m512bh)_mm512_set1_epi32(static_cast<int>(row[j * SW + kj]));
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) acc[j][v] = _mm512_dpbf16_ps(acc[j][v], wv[v], b);
      }
    }
  }
  end_block<V, P>(acc, d, Opad);
}

// The block function for (column stride, V, P): E float runs block, E uint32_t (BF16 pairs) block_bf16.
template <typename E>
using BlockFn = void (*)(const Plan&, const E*, const E*, int64_t, int64_t, int64_t, int64_t, int64_t, float*);
template <typename E, int V, int SW, int... Ps>
constexpr std::array<BlockFn<E>, sizeof...(Ps)> blocks_of(std::integer_sequence<int, Ps...>) {
  if constexpr (std::is_same_v<E, float>)
    return {&block<V, Ps + 1, SW>...};
  else
    return {&block_bf16<V, Ps + 1, SW>...};
}
template <typename E, int SW>
BlockFn<E> block_for(int V, int P) {
  static constexpr auto v1 = blocks_of<E, 1, SW>(std::make_integer_sequence<int, kAccumulators>{});
  static constexpr auto v2 = blocks_of<E, 2, SW>(std::make_integer_sequence<int, kAccumulators / 2>{});
  static constexpr auto v4 = blocks_of<E, 4, SW>(std::make_integer_sequence<int, kAccumulators / 4>{});
  const size_t i = static_cast<size_t>(P - 1);
  return V == 4 ? v4[i] : V == 2 ? v2[i] : v1[i];
}
template <typename E>
BlockFn<E> block_fn(int sW, int V, int P) {
  return sW == 2 ? block_for<E, 2>(V, P) : block_for<E, 1>(V, P);
}

// yt (L, Opad) -> y (O, L) * alpha (skipped at 1) + bias, 16 x 16 blocks transposed in registers;
// BF16 y rounded once.
template <typename S>
MT_TARGET_AVX512_FMA void store_image(const Plan& p, const float* yt, const float* bias, float alpha, S* y) {
  const int64_t O = p.s.O, L = p.L;
  const __m512 a = _mm512_set1_ps(alpha);
  for (int64_t o0 = 0; o0 < O; o0 += 16)
    for (int64_t l0 = 0; l0 < L; l0 += 16) {
      const int64_t n = std::min<int64_t>(16, L - l0);
      const __mmask16 m = static_cast<__mmask16>(n == 16 ? 0xFFFF : (1u << n) - 1);
      __m512 r[16];
      for (int64_t q = 0; q < 16; ++q) r[q] = q < n ? _mm512_load_ps(yt + (l0 + q) * p.Opad + o0) : _mm512_setzero_ps();
      transpose16x16(r);
      for (int64_t q = 0; q < 16 && o0 + q < O; ++q) {
        // The product rounds on its own (an explicit rounding mode, which GCC never contracts into
        // an FMA with the bias add below): f32(f32(s alpha) + b), as the other entries compute.
        const __m512 ra = alpha != 1.0f ? _mm512_mul_round_ps(r[q], a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC) : r[q];
        const __m512 v = bias ? _mm512_add_ps(ra, _mm512_set1_ps(bias[o0 + q])) : ra;
        if constexpr (std::is_same_v<S, float>)
          _mm512_mask_storeu_ps(y + (o0 + q) * L + l0, m, v);
        else
          _mm256_mask_storeu_epi16(y + (o0 + q) * L + l0, m, round_to_bf16(v));
      }
    }
}

// Output rows [r0, r1) of image n: staged into this thread's xp, computed into its yt. While it
// computes, the image this thread stages next (`next`, or null) is prefetched into L2 a share per
// output row, so staging it reads from cache rather than waiting on memory. S is x's and y's
// storage, E the staged element (float, or uint32_t BF16 pairs).
template <typename S, typename E>
void image_rows(const Plan& p, const S* x, const E* wt, const float* bias, float alpha, S* y, int64_t n, int64_t r0,
                int64_t r1, E* xp, float* yt, const S* next) {
  const ConvShape& s = p.s;
  const int64_t image = s.C * s.H * s.W;
  if constexpr (std::is_same_v<E, float>)
    stage_padded(p.pp, x + n * image, xp);
  else
    stage_pairs(
        p.pp, [&](int64_t q) { return x + n * image + 2 * q * s.H * s.W; },
        [&](int64_t q) { return 2 * q + 1 < s.C ? x + n * image + (2 * q + 1) * s.H * s.W : nullptr; }, xp);
  const int sW = static_cast<int>(s.sW);
  const BlockFn<E> full = block_fn<E>(sW, p.V, p.row.size), last = block_fn<E>(sW, p.V, p.row.last);
  SpreadPrefetch pf(next, image * static_cast<int64_t>(sizeof(S)),
                    p.oblocks * ((p.planes + p.cslice - 1) / p.cslice) * (r1 - r0));
  for (int64_t ob = 0; ob < p.oblocks; ++ob)
    for (int64_t c0 = 0; c0 < p.planes; c0 += p.cslice)
      for (int64_t oh = r0; oh < r1; ++oh) {
        for (int64_t b = 0; b < p.row.count; ++b)
          (b + 1 < p.row.count ? full : last)(p, xp, wt, oh, b * p.row.size, ob * p.V * 16, c0,
                                               std::min(p.planes, c0 + p.cslice), yt);
        pf.step();
      }
  if (r0 == 0 && r1 == s.OH) return store_image(p, yt, bias, alpha, y + n * s.O * p.L);
  // Part of an image (a batch smaller than the team): its rows only, element by element.
  for (int64_t o = 0; o < s.O; ++o)
    for (int64_t l = r0 * s.OW; l < r1 * s.OW; ++l) {
      const float a = alpha != 1.0f ? yt[l * p.Opad + o] * alpha : yt[l * p.Opad + o];
      const float v = bias ? a + bias[o] : a;
      y[(n * s.O + o) * p.L + l] = static_cast<S>(v);
    }
}

// The forward for storage S (float, or BFloat16 on channel pairs) with weights wa of dtype S.
template <typename S>
void direct_forward(const ConvShape& s, const S* x, const S* wa, const float* bias, float alpha, S* y) {
  using E = std::conditional_t<std::is_same_v<S, float>, float, uint32_t>;
  const Plan p = plan_of(s, !std::is_same_v<S, float>);
  AlignedBuffer<E> wt;
  pack_weights(p, wa, wt.get(p.K * p.Opad));
  const int64_t macs = s.N * p.L * s.O * s.C * s.kH * kPaddedTaps;
  const int team = padded_kernel_threads(macs, s.N * s.OH);
  // Units of work: whole images, or with fewer images than threads, row ranges of each image.
  const int64_t split = s.N >= team ? 1 : std::min<int64_t>(s.OH, (team + s.N - 1) / s.N);
  const int64_t units = s.N * split;
  const int nt = static_cast<int>(std::min<int64_t>(team, units));
  const int64_t xsize = (p.pp.image() + 15) / 16 * 16, ysize = p.L * p.Opad;
  AlignedBuffer<E> xbuf;
  AlignedBuffer<float> ybuf;
  E* xs = xbuf.get(static_cast<int64_t>(nt) * xsize);
  float* ys = ybuf.get(static_cast<int64_t>(nt) * ysize);
  const auto run = [&](int64_t lo, int64_t hi) {
    const int slot = nt > 1 ? omp_get_thread_num() : 0;  // (nt == 1 may run inside another team)
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t n = u / split, part = u % split;
      const S* next = u + 1 < hi ? x + (u + 1) / split * s.C * s.H * s.W : nullptr;
      image_rows(p, x, wt.data.get(), bias, alpha, y, n, s.OH * part / split, s.OH * (part + 1) / split,
                 xs + static_cast<int64_t>(slot) * xsize, ys + static_cast<int64_t>(slot) * ysize, next);
    }
  };
  if (nt <= 1) return run(0, units);
  for_tile_ranges(nt, units, 1, run);
}

#endif  // MIXTAPE_X86_KERNELS

}  // namespace

bool conv_direct_applies(const ConvShape& s) {
  return padded_geometry_ok(s) && stride_ok(s) && conv_kernels_enabled();
}

bool conv_pairs_applies(const ConvShape& s) {
  return conv_direct_applies(s) && bf16_on_vdpbf16ps();
}

void conv_direct_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y) {
  MT_CHECK(conv_direct_applies(s), "conv_direct_forward: this CPU or geometry is not one it takes ",
           "(check conv_direct_applies() first)");
  MT_X86_ONLY(direct_forward(s, x, w, bias, 1.0f, y));
}
void conv_pairs_forward(const ConvShape& s, const BFloat16* x, const BFloat16* w, const float* bias, BFloat16* y,
                        float alpha) {
  MT_CHECK(conv_pairs_applies(s), "conv_pairs_forward: this CPU or geometry is not one it takes ",
           "(check conv_pairs_applies() first)");
  MT_X86_ONLY(direct_forward(s, x, w, bias, alpha, y));
}

}  // namespace mixtape::cpu

MT_KERNELS_END
