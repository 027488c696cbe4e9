// ops/cpu/conv_weight_grad_avx512.cpp — see conv_weight_grad_avx512.h. Only the functions marked
// MT_TARGET_AVX512_FMA hold AVX-512 instructions; they run only after conv_weight_grad_direct_applies() (which
// checks the CPU) said yes.
#include "ops/cpu/conv_weight_grad_avx512.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "ops/cpu/aligned_buffer.h"
#include "ops/cpu/conv_implicit_gemm.h"
#include "ops/cpu/conv_shape.h"
#include "ops/cpu/cpu_features.h"

#include "ops/cpu/padded_planes_avx512.h"
#include "ops/cpu/transpose_avx512.h"
#include "ops/cpu/isa.h"
MT_KERNELS_BEGIN

namespace mixtape::cpu {
namespace {

constexpr int kAccumulators = 24;                   // zmm accumulators per block: P pairs x 3 taps x V
constexpr int64_t kChunkBytes = int64_t(512) << 10;  // staged images per step: about half an L2

#if MIXTAPE_X86_KERNELS

// Everything the kernels need, derived from the shape once per call.
struct Plan {
  ConvShape s;
  PaddedPlanes pp;  // the staged input images
  int64_t L, Opad;  // output pixels per image; O rounded up to 16 (gy's staged rows)
  int V, P;         // a block: V vectors of 16 channels x P pairs x 3 taps
  int64_t pairs, pblocks, oblocks, nb;
  int64_t blocks() const { return pblocks * oblocks; }
};

// image_pairs: the BF16 twin's plan (images staged in pairs of BF16: half the bytes per image, and an
// even number of images per chunk, so that a pair never spans two chunks).
Plan plan_of(const ConvShape& s, bool image_pairs = false) {
  Plan p{};
  p.s = s;
  p.pp = PaddedPlanes::of(s);
  p.L = s.OH * s.OW;
  p.Opad = (s.O + 15) / 16 * 16;
  const int64_t vectors = p.Opad / 16;
  // The widest block whose V divides the channel vectors: fewer broadcasts per multiply-add.
  p.V = vectors % 4 == 0 ? 4 : vectors % 2 == 0 ? 2 : 1;
  p.P = kAccumulators / (kPaddedTaps * p.V);
  p.pairs = s.C * s.kH;
  p.pblocks = (p.pairs + p.P - 1) / p.P;
  p.oblocks = vectors / p.V;
  const int64_t per_image = (p.pp.image() + p.L * p.Opad) * static_cast<int64_t>(image_pairs ? 2 : sizeof(float));
  p.nb = std::max<int64_t>(1, std::min(s.N, kChunkBytes / std::max<int64_t>(per_image, 1)));
  if (image_pairs && p.nb < s.N) p.nb = std::max<int64_t>(2, p.nb / 2 * 2);
  return p;
}

// One image's gy (O, L) -> gt (L, Opad): gt[l Opad + o] = gy[o, l], 0 for o >= O. 16 x 16 blocks
// transposed in registers.
template <typename E>
MT_TARGET_AVX512_FMA void stage_gy(const Plan& p, const E* gy, float* gt) {
  const int64_t O = p.s.O, L = p.L;
  for (int64_t o0 = 0; o0 < p.Opad; o0 += 16)
    for (int64_t l0 = 0; l0 < L; l0 += 16) {
      const int64_t n = std::min<int64_t>(16, L - l0);
      const __mmask16 m = static_cast<__mmask16>(n == 16 ? 0xFFFF : (1u << n) - 1);
      __m512 r[16];
      for (int q = 0; q < 16; ++q) r[q] = o0 + q < O ? load16_as_f32(m, gy + (o0 + q) * L + l0) : _mm512_setzero_ps();
      transpose16x16(r);
      for (int64_t q = 0; q < n; ++q) _mm512_store_ps(gt + (l0 + q) * p.Opad + o0, r[q]);
    }
}

// The block of pairs [pair0, pair0 + P) x channels [c0, c0 + 16 V) over the nb staged images:
// acc[3 i + k][v] sums gy[o, l] xpad[pair0 + i, tap k of pixel l]; then added into accT (K, Opad)
// (stored when first).
template <int V, int P>
MT_TARGET_AVX512_FMA void block(const Plan& p, const float* xpad, const float* gyT, int64_t nb, int64_t pair0, int64_t c0,
                    float* accT, bool first, SpreadPrefetch* pf) {
  const ConvShape& s = p.s;
  int64_t off[P];
  for (int i = 0; i < P; ++i) {
    const int64_t q = pair0 + i, c = q / s.kH, ki = q % s.kH;
    off[i] = c * p.pp.plane() + ki * s.dH * p.pp.Wp;
  }
  __m512 acc[P * kPaddedTaps][V];
  for (int a = 0; a < P * kPaddedTaps; ++a)
    for (int v = 0; v < V; ++v) acc[a][v] = _mm512_setzero_ps();
  const int64_t row_step = s.sH * p.pp.Wp, sW = s.sW, OW = s.OW, Opad = p.Opad;
  for (int64_t n = 0; n < nb; ++n) {
    const float* xn = xpad + n * p.pp.image();
    const float* g = gyT + n * p.L * Opad + c0;
    for (int64_t oh = 0; oh < s.OH; ++oh) {
      const float* r[P];
      for (int i = 0; i < P; ++i) r[i] = xn + off[i] + oh * row_step;
      pf[0].step(), pf[1].step();
      for (int64_t ow = 0, xo = 0; ow < OW; ++ow, xo += sW, g += Opad) {
        __m512 gv[V];
        for (int v = 0; v < V; ++v) gv[v] = _mm512_load_ps(g + 16 * v);
        for (int i = 0; i < P; ++i)
          for (int k = 0; k < kPaddedTaps; ++k) {
            const __m512 b = _mm512_set1_ps(r[i][xo + k]);
            for (int v = 0; v < V; ++v) {
              __m512& a = acc[i * kPaddedTaps + k][v];
              a = _mm512_fmadd_ps(gv[v], b, a);
            }
          }
      }
    }
  }
  for (int a = 0; a < P * kPaddedTaps; ++a) {
    float* d = accT + (pair0 * kPaddedTaps + a) * Opad + c0;
    for (int v = 0; v < V; ++v)
      _mm512_store_ps(d + 16 * v, first ? acc[a][v] : _mm512_add_ps(_mm512_load_ps(d + 16 * v), acc[a][v]));
  }
}

// ---- the BF16 twin on image pairs (native BF16 on vdpbf16ps) ----
// Images n and n + 1 are staged together: the x planes as 32-bit words (x[n], x[n + 1]) at every
// padded position (stage_pairs), gy as words (gy[n, o, l], gy[n + 1, o, l]) transposed to (L, Opad);
// a last odd image is paired with zeros.

// gy of images a and b (b null: zeros), (O, L) BF16 each -> gt (L, Opad) words, 0 for o >= O.
MT_TARGET_AVX512_FMA void stage_gy_pairs(const Plan& p, const BFloat16* a, const BFloat16* b, uint32_t* gt) {
  const int64_t O = p.s.O, L = p.L;
  for (int64_t o0 = 0; o0 < p.Opad; o0 += 16)
    for (int64_t l0 = 0; l0 < L; l0 += 16) {
      const int64_t n = std::min<int64_t>(16, L - l0);
      const __mmask16 m = static_cast<__mmask16>(n == 16 ? 0xFFFF : (1u << n) - 1);
      __m512 r[16];
      for (int q = 0; q < 16; ++q) {
        __m512i w = _mm512_setzero_si512();
        if (o0 + q < O) {
          w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, a + (o0 + q) * L + l0));
          if (b) {
            const __m256i h = _mm256_maskz_loadu_epi16(m, b + (o0 + q) * L + l0);
            w = _mm512_or_si512(w, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
          }
        }
        r[q] = _mm512_castsi512_ps(w);
      }
      transpose16x16(r);
      for (int64_t q = 0; q < n; ++q) _mm512_store_si512(gt + (l0 + q) * p.Opad + o0, _mm512_castps_si512(r[q]));
    }
}

// block's twin over `units` staged image pairs: per output pixel, V vectors of gy words times the x word
// each tap reads, one vdpbf16ps each: both images' products (exact in FP32) added to the FP32 sum.
template <int V, int P>
MT_TARGET_AVX512BF16 void block_pairs(const Plan& p, const uint32_t* xpad, const uint32_t* gyT, int64_t units, int64_t pair0,
                               int64_t c0, float* accT, bool first, SpreadPrefetch* pf) {
  const ConvShape& s = p.s;
  int64_t off[P];
  for (int i = 0; i < P; ++i) {
    const int64_t q = pair0 + i, c = q / s.kH, ki = q % s.kH;
    off[i] = c * p.pp.plane() + ki * s.dH * p.pp.Wp;
  }
  __m512 acc[P * kPaddedTaps][V];
  for (int a = 0; a < P * kPaddedTaps; ++a)
    for (int v = 0; v < V; ++v) acc[a][v] = _mm512_setzero_ps();
  const int64_t row_step = s.sH * p.pp.Wp, sW = s.sW, OW = s.OW, Opad = p.Opad;
  for (int64_t n = 0; n < units; ++n) {
    const uint32_t* xn = xpad + n * p.pp.image();
    const uint32_t* g = gyT + n * p.L * Opad + c0;
    for (int64_t oh = 0; oh < s.OH; ++oh) {
      const uint32_t* r[P];
      for (int i = 0; i < P; ++i) r[i] = xn + off[i] + oh * row_step;
      pf[0].step(), pf[1].step();
      for (int64_t ow = 0, xo = 0; ow < OW; ++ow, xo += sW, g += Opad) {
        __m512bh gv[V];
        for (int v = 0; v < V; ++v) gv[v] = (__m512bh)_mm512_load_si512(g + 16 * v);
        for (int i = 0; i < P; ++i)
          for (int k = 0; k < kPaddedTaps; ++k) {
            const __m512bh b = (__m512bh)_mm512_set1_epi32(static_cast<int>(r[i][xo + k]));
            for (int v = 0; v < V; ++v) {
              __m512& a = acc[i * kPaddedTaps + k][v];
              a = _mm512_dpbf16_ps(a, gv[v], b);
            }
          }
      }
    }
  }
  for (int a = 0; a < P * kPaddedTaps; ++a) {
    float* d = accT + (pair0 * kPaddedTaps + a) * Opad + c0;
    for (int v = 0; v < V; ++v)
      _mm512_store_ps(d + 16 * v, first ? acc[a][v] : _mm512_add_ps(_mm512_load_ps(d + 16 * v), acc[a][v]));
  }
}

// The kernel for V vectors and P pairs (P <= 24 / (3 V): the last pair block may be short); X the
// staged element: float (block), or uint32_t BF16 image pairs (block_pairs).
template <typename X>
using BlockFn = void (*)(const Plan&, const X*, const X*, int64_t, int64_t, int64_t, float*, bool, SpreadPrefetch*);
template <typename X, int V, int... Ps>
constexpr std::array<BlockFn<X>, sizeof...(Ps)> blocks_of(std::integer_sequence<int, Ps...>) {
  if constexpr (std::is_same_v<X, float>)
    return {&block<V, Ps + 1>...};
  else
    return {&block_pairs<V, Ps + 1>...};
}
template <typename X>
BlockFn<X> block_fn(int V, int P) {
  static constexpr auto v1 = blocks_of<X, 1>(std::make_integer_sequence<int, kAccumulators / kPaddedTaps>{});
  static constexpr auto v2 = blocks_of<X, 2>(std::make_integer_sequence<int, kAccumulators / kPaddedTaps / 2>{});
  static constexpr auto v4 = blocks_of<X, 4>(std::make_integer_sequence<int, kAccumulators / kPaddedTaps / 4>{});
  const size_t i = static_cast<size_t>(P - 1);
  return V == 4 ? v4[i] : V == 2 ? v2[i] : v1[i];
}

// Stages unit i of the chunk starting at image n0 (one image, or an image pair) into slot i of xs / gs.
template <bool Pairs, typename E, typename X>
void stage_unit(const Plan& p, const E* x, const E* gy, int64_t n0, int64_t i, X* xs, X* gs) {
  const ConvShape& s = p.s;
  const int64_t ximage = s.C * s.H * s.W, gimage = s.O * p.L;
  X* xi = xs + i * p.pp.image();
  X* gi = gs + i * p.L * p.Opad;
  if constexpr (Pairs) {
    const int64_t n = n0 + 2 * i;
    const bool two = n + 1 < s.N;
    stage_pairs(
        p.pp, [&](int64_t c) { return x + n * ximage + c * s.H * s.W; },
        [&](int64_t c) { return two ? x + (n + 1) * ximage + c * s.H * s.W : nullptr; }, xi);
    stage_gy_pairs(p, gy + n * gimage, two ? gy + (n + 1) * gimage : nullptr, gi);
  } else {
    stage_padded(p.pp, x + (n0 + i) * ximage, xi);
    stage_gy(p, gy + (n0 + i) * gimage, gi);
  }
}

// Where whole chunks keep more threads busy than the blocks do (the 1-channel first layers: 3
// pairs, one short block), the team splits the chunks instead. Each chunk's blocks run from +0
// into that chunk's own partial, and the partials are then added into accT in chunk order — the
// operations of the block split (the first chunk stored, then accT + partial for each next one), so
// the same bits (NaN payloads aside), and the choice may follow the thread count. Staging is per
// thread here: nt chunks' worth of padded images and gy rows.
template <bool Pairs, typename E>
void run_by_chunks(const Plan& p, const E* x, const E* gy, float* accT) {
  using X = std::conditional_t<Pairs, uint32_t, float>;
  const ConvShape& s = p.s;
  const int64_t K = p.pairs * kPaddedTaps, per_unit = Pairs ? 2 : 1, units = (p.nb + per_unit - 1) / per_unit;
  const int64_t chunks = (s.N + p.nb - 1) / p.nb, part = K * p.Opad;
  const int nt = padded_kernel_threads(s.N * p.L * s.O * K, chunks);
  AlignedBuffer<X> xpad, gyT;
  AlignedBuffer<float> parts;
  X* xs = xpad.get(static_cast<int64_t>(nt) * units * p.pp.image());
  X* gs = gyT.get(static_cast<int64_t>(nt) * units * p.L * p.Opad);
  float* pt = parts.get(chunks * part);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(dynamic, 1)
  for (int64_t q = 0; q < chunks; ++q) {
    const int64_t t = nt > 1 ? omp_get_thread_num() : 0;
    X* xt = xs + t * units * p.pp.image();
    X* gt = gs + t * units * p.L * p.Opad;
    const int64_t n0 = q * p.nb, m = std::min(p.nb, s.N - n0), mu = (m + per_unit - 1) / per_unit;
    for (int64_t i = 0; i < mu; ++i) stage_unit<Pairs>(p, x, gy, n0, i, xt, gt);
    SpreadPrefetch none[2];
    for (int64_t b = 0; b < p.blocks(); ++b) {
      const int64_t pb = b / p.oblocks, ob = b % p.oblocks, pair0 = pb * p.P;
      const int P = static_cast<int>(std::min<int64_t>(p.P, p.pairs - pair0));
      block_fn<X>(p.V, P)(p, xt, gt, mu, pair0, ob * p.V * 16, pt + q * part, true, none);
    }
  }
  std::copy(pt, pt + part, accT);
  for (int64_t q = 1; q < chunks; ++q)
    for (int64_t i = 0; i < part; ++i) accT[i] = accT[i] + pt[q * part + i];
}

// Pairs: the BF16 twin (E BFloat16, images staged in pairs). A staged unit is one image, or a pair.
template <bool Pairs, typename E>
void run(const ConvShape& s, const E* x, const E* gy, float* gw) {
  const char* name = Pairs ? "conv_weight_grad_pairs" : "conv_weight_grad_direct";
  MT_CHECK(Pairs ? conv_weight_grad_pairs_applies(s) : conv_weight_grad_direct_applies(s), name,
           ": this CPU or geometry is not one it takes (check ", name, "_applies() first)");
  using X = std::conditional_t<Pairs, uint32_t, float>;
  const Plan p = plan_of(s, Pairs);
  const int64_t K = p.pairs * kPaddedTaps, ximage = s.C * s.H * s.W, gimage = s.O * p.L;
  const int64_t per_unit = Pairs ? 2 : 1, units = (p.nb + per_unit - 1) / per_unit;
  AlignedBuffer<float> accT;
  accT.get(K * p.Opad);
  auto transpose_out = [&] {
    for (int64_t o = 0; o < s.O; ++o)
      for (int64_t k = 0; k < K; ++k) gw[o * K + k] = accT.data.get()[k * p.Opad + o];
  };
  const int64_t chunks = (s.N + p.nb - 1) / p.nb, team = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (std::min(chunks, team) > std::min(p.blocks(), team)) {
    run_by_chunks<Pairs>(p, x, gy, accT.data.get());
    return transpose_out();
  }
  AlignedBuffer<X> xpad, gyT;
  xpad.get(units * p.pp.image());
  gyT.get(units * p.L * p.Opad);
  const int64_t macs = s.N * p.L * s.O * K;
  const int nt = padded_kernel_threads(macs, p.blocks());
#pragma omp parallel num_threads(nt) if (nt > 1)
  for (int64_t n0 = 0; n0 < s.N; n0 += p.nb) {
    const int64_t m = std::min(p.nb, s.N - n0), mu = (m + per_unit - 1) / per_unit;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < mu; ++i) stage_unit<Pairs>(p, x, gy, n0, i, xpad.data.get(), gyT.data.get());
    // While computing, each thread prefetches the images it stages next: OpenMP's static schedule
    // gives thread t the same share of the next chunk's units as of this one's.
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    const int64_t next = n0 + p.nb, m2 = std::max<int64_t>(0, std::min(p.nb, s.N - next));
    const int64_t u2 = (m2 + per_unit - 1) / per_unit, q = u2 / T, r = u2 % T;
    const int64_t ufirst = t * q + std::min<int64_t>(t, r), ucount = q + (t < r);
    const int64_t first = next + ufirst * per_unit;
    const int64_t count = std::max<int64_t>(0, std::min(ucount * per_unit, s.N - first));
    const int64_t my_blocks = p.blocks() / T + (t < p.blocks() % T), steps = my_blocks * mu * s.OH;
    SpreadPrefetch pf[2] = {
        SpreadPrefetch(count ? x + first * ximage : nullptr, count * ximage * int64_t(sizeof(E)), steps),
        SpreadPrefetch(count ? gy + first * gimage : nullptr, count * gimage * int64_t(sizeof(E)), steps)};
#pragma omp for schedule(static)
    for (int64_t b = 0; b < p.blocks(); ++b) {
      const int64_t pb = b / p.oblocks, ob = b % p.oblocks, pair0 = pb * p.P;
      const int P = static_cast<int>(std::min<int64_t>(p.P, p.pairs - pair0));
      block_fn<X>(p.V, P)(p, xpad.data.get(), gyT.data.get(), mu, pair0, ob * p.V * 16, accT.data.get(), n0 == 0, pf);
    }
  }
  transpose_out();
}

#endif  // MIXTAPE_X86_KERNELS

}  // namespace

bool conv_weight_grad_direct_applies(const ConvShape& s) {
  return padded_geometry_ok(s) && conv_kernels_enabled();
}

bool conv_weight_grad_pairs_applies(const ConvShape& s) {
  return conv_weight_grad_direct_applies(s) && bf16_on_vdpbf16ps();
}

void conv_weight_grad_direct(const ConvShape& s, const float* x, const float* gy, float* gw) {
  MT_X86_ONLY(run<false>(s, x, gy, gw));
}
void conv_weight_grad_direct(const ConvShape& s, const BFloat16* x, const BFloat16* gy, float* gw) {
  MT_X86_ONLY(run<false>(s, x, gy, gw));
}
void conv_weight_grad_direct(const ConvShape& s, const Half* x, const Half* gy, float* gw) {
  MT_X86_ONLY(run<false>(s, x, gy, gw));
}
void conv_weight_grad_pairs(const ConvShape& s, const BFloat16* x, const BFloat16* gy, float* gw) {
  MT_X86_ONLY(run<true>(s, x, gy, gw));
}

}  // namespace mixtape::cpu

MT_KERNELS_END
