// ops/cpu/conv_weight_grad_avx512.cpp — see conv_weight_grad_avx512.h. Only the functions marked
// MT_WGRAD hold AVX-512 instructions; they run only after conv_weight_grad_direct_applies() (which
// checks the CPU) said yes.
#include "ops/cpu/conv_weight_grad_avx512.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "ops/cpu/aligned_buffer.h"
#include "ops/cpu/conv_implicit_gemm.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "ops/cpu/transpose_avx512.h"
#define MIXTAPE_HAVE_WGRAD_AVX512 1
#define MT_WGRAD __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
// GCC 12's shuffle intrinsics start from _mm512_undefined_ps(), a self-initialised variable that
// -Wmaybe-uninitialized reports in every caller; the value is never read.
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#else
#define MIXTAPE_HAVE_WGRAD_AVX512 0
#endif

namespace mixtape::cpu {
namespace {

constexpr int kTaps = 3;                            // kernel columns per (channel, kernel row) pair
constexpr int kAccumulators = 24;                   // zmm accumulators per block: P pairs x 3 taps x V
constexpr int64_t kChunkBytes = int64_t(512) << 10;  // staged images per step: about half an L2
constexpr int64_t kParallelMacs = int64_t(1) << 21;  // below this, one thread (as the implicit conv)
constexpr int64_t kMinBlocks = 4;
constexpr int64_t kMaxPaddedWidth = 1024;  // stage_x's masks: 64 chunks of 16 columns

// Everything the kernels need, derived from the shape once per call.
struct Plan {
  WeightGradShape s;
  int64_t Hp, Wp, plane, image;  // padded plane: rows Hp, columns Wp; floats per padded image
  int64_t L, Opad;               // output pixels per image; O rounded up to 16 (gy's staged rows)
  int V, P;                      // a block: V vectors of 16 channels x P pairs x 3 taps
  int64_t pairs, pblocks, oblocks, nb;
  int64_t blocks() const { return pblocks * oblocks; }
};

Plan plan_of(const WeightGradShape& s) {
  Plan p{};
  p.s = s;
  p.Hp = (s.OH - 1) * s.sH + (s.kH - 1) * s.dH + 1;
  p.Wp = (s.OW - 1) * s.sW + kTaps;
  p.plane = p.Hp * p.Wp;
  p.image = s.C * p.plane;
  p.L = s.OH * s.OW;
  p.Opad = (s.O + 15) / 16 * 16;
  const int64_t vectors = p.Opad / 16;
  // The widest block whose V divides the channel vectors: fewer broadcasts per multiply-add.
  p.V = vectors % 4 == 0 ? 4 : vectors % 2 == 0 ? 2 : 1;
  p.P = kAccumulators / (kTaps * p.V);
  p.pairs = s.C * s.kH;
  p.pblocks = (p.pairs + p.P - 1) / p.P;
  p.oblocks = vectors / p.V;
  const int64_t per_image = (p.image + p.L * p.Opad) * static_cast<int64_t>(sizeof(float));
  p.nb = std::max<int64_t>(1, std::min(s.N, kChunkBytes / std::max<int64_t>(per_image, 1)));
  return p;
}

bool geometry_ok(const WeightGradShape& s) {
  return s.N > 0 && s.C > 0 && s.O > 0 && s.kH > 0 && s.kW == kTaps && s.dW == 1 && s.sH > 0 && s.sW > 0 &&
         s.dH > 0 && s.pH >= 0 && s.pW >= 0 && s.OH > 0 && s.OW > 0 && s.H > 0 && s.W > 0 &&
         (s.OH - 1) * s.sH + (s.kH - 1) * s.dH < s.H + 2 * s.pH && (s.OW - 1) * s.sW + kTaps <= s.W + 2 * s.pW &&
         (s.OW - 1) * s.sW + kTaps <= kMaxPaddedWidth;
}

#if MIXTAPE_HAVE_WGRAD_AVX512

// 16 elements of E at src (lanes in mask m; zero elsewhere) as FP32, exactly.
template <typename E>
MT_WGRAD inline __m512 load16(__mmask16 m, const E* src) {
  if constexpr (std::is_same_v<E, float>) {
    return _mm512_maskz_loadu_ps(m, src);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(m, src);
    if constexpr (std::is_same_v<E, Half>)
      return _mm512_cvtph_ps(h);
    else
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// One image x (C, H, W) -> xp (C, Hp, Wp): padded row r, column q hold x[c, r - pH, q - pW], or 0.
// Each padded row is whole 16-column chunks: a load masked to the columns inside the image (the
// lanes before the row start are masked off, so nothing outside it is read) and a store masked to
// the row's Wp columns. The masks depend on the chunk only: built once.
template <typename E>
MT_WGRAD void stage_x(const Plan& p, const E* x, float* xp) {
  const WeightGradShape& s = p.s;
  constexpr int64_t kMaxChunks = kMaxPaddedWidth / 16;
  const int64_t chunks = (p.Wp + 15) / 16;
  __mmask16 in[kMaxChunks], out[kMaxChunks];
  for (int64_t j = 0; j < chunks; ++j) {
    uint32_t mi = 0, mo = 0;
    for (int q = 0; q < 16; ++q) {
      const int64_t col = j * 16 + q;
      if (col < p.Wp) mo |= 1u << q;
      if (col < p.Wp && col >= s.pW && col < s.pW + s.W) mi |= 1u << q;
    }
    in[j] = static_cast<__mmask16>(mi), out[j] = static_cast<__mmask16>(mo);
  }
  for (int64_t c = 0; c < s.C; ++c)
    for (int64_t r = 0; r < p.Hp; ++r) {
      float* d = xp + c * p.plane + r * p.Wp;
      const int64_t ih = r - s.pH;
      if (ih < 0 || ih >= s.H) {
        for (int64_t j = 0; j < chunks; ++j) _mm512_mask_storeu_ps(d + 16 * j, out[j], _mm512_setzero_ps());
        continue;
      }
      // Element q of chunk j is x's column 16 j + q - pW: the pointer is formed as an integer, as
      // it may precede the row (those lanes are masked off).
      const uintptr_t row = reinterpret_cast<uintptr_t>(x + (c * s.H + ih) * s.W);
      for (int64_t j = 0; j < chunks; ++j) {
        const E* src = reinterpret_cast<const E*>(row + static_cast<uintptr_t>((16 * j - s.pW) * int64_t(sizeof(E))));
        _mm512_mask_storeu_ps(d + 16 * j, out[j], load16(in[j], src));
      }
    }
}

// One image's gy (O, L) -> gt (L, Opad): gt[l Opad + o] = gy[o, l], 0 for o >= O. 16 x 16 blocks
// transposed in registers.
template <typename E>
MT_WGRAD void stage_gy(const Plan& p, const E* gy, float* gt) {
  const int64_t O = p.s.O, L = p.L;
  for (int64_t o0 = 0; o0 < p.Opad; o0 += 16)
    for (int64_t l0 = 0; l0 < L; l0 += 16) {
      const int64_t n = std::min<int64_t>(16, L - l0);
      const __mmask16 m = static_cast<__mmask16>(n == 16 ? 0xFFFF : (1u << n) - 1);
      __m512 r[16];
      for (int q = 0; q < 16; ++q) r[q] = o0 + q < O ? load16(m, gy + (o0 + q) * L + l0) : _mm512_setzero_ps();
      transpose16x16(r);
      for (int64_t q = 0; q < n; ++q) _mm512_store_ps(gt + (l0 + q) * p.Opad + o0, r[q]);
    }
}

// The block of pairs [pair0, pair0 + P) x channels [c0, c0 + 16 V) over the nb staged images:
// acc[3 i + k][v] sums gy[o, l] xpad[pair0 + i, tap k of pixel l]; then added into accT (K, Opad)
// (stored when first).
template <int V, int P>
MT_WGRAD void block(const Plan& p, const float* xpad, const float* gyT, int64_t nb, int64_t pair0, int64_t c0,
                    float* accT, bool first) {
  const WeightGradShape& s = p.s;
  int64_t off[P];
  for (int i = 0; i < P; ++i) {
    const int64_t q = pair0 + i, c = q / s.kH, ki = q % s.kH;
    off[i] = c * p.plane + ki * s.dH * p.Wp;
  }
  __m512 acc[P * kTaps][V];
  for (int a = 0; a < P * kTaps; ++a)
    for (int v = 0; v < V; ++v) acc[a][v] = _mm512_setzero_ps();
  const int64_t row_step = s.sH * p.Wp, sW = s.sW, OW = s.OW, Opad = p.Opad;
  for (int64_t n = 0; n < nb; ++n) {
    const float* xn = xpad + n * p.image;
    const float* g = gyT + n * p.L * Opad + c0;
    for (int64_t oh = 0; oh < s.OH; ++oh) {
      const float* r[P];
      for (int i = 0; i < P; ++i) r[i] = xn + off[i] + oh * row_step;
      for (int64_t ow = 0, xo = 0; ow < OW; ++ow, xo += sW, g += Opad) {
        __m512 gv[V];
        for (int v = 0; v < V; ++v) gv[v] = _mm512_load_ps(g + 16 * v);
        for (int i = 0; i < P; ++i)
          for (int k = 0; k < kTaps; ++k) {
            const __m512 b = _mm512_set1_ps(r[i][xo + k]);
            for (int v = 0; v < V; ++v) acc[i * kTaps + k][v] = _mm512_fmadd_ps(gv[v], b, acc[i * kTaps + k][v]);
          }
      }
    }
  }
  for (int a = 0; a < P * kTaps; ++a) {
    float* d = accT + (pair0 * kTaps + a) * Opad + c0;
    for (int v = 0; v < V; ++v)
      _mm512_store_ps(d + 16 * v, first ? acc[a][v] : _mm512_add_ps(_mm512_load_ps(d + 16 * v), acc[a][v]));
  }
}

using BlockFn = void (*)(const Plan&, const float*, const float*, int64_t, int64_t, int64_t, float*, bool);
template <int V, int... Ps>
constexpr std::array<BlockFn, sizeof...(Ps)> blocks_of(std::integer_sequence<int, Ps...>) {
  return {&block<V, Ps + 1>...};
}
// The kernel for V vectors and P pairs (P <= 24 / (3 V): the last pair block may be short).
BlockFn block_fn(int V, int P) {
  static constexpr auto v1 = blocks_of<1>(std::make_integer_sequence<int, kAccumulators / kTaps>{});
  static constexpr auto v2 = blocks_of<2>(std::make_integer_sequence<int, kAccumulators / kTaps / 2>{});
  static constexpr auto v4 = blocks_of<4>(std::make_integer_sequence<int, kAccumulators / kTaps / 4>{});
  return V == 4 ? v4[static_cast<size_t>(P - 1)] : V == 2 ? v2[static_cast<size_t>(P - 1)] : v1[static_cast<size_t>(P - 1)];
}

template <typename E>
void run(const WeightGradShape& s, const E* x, const E* gy, float* gw) {
  MT_CHECK(conv_weight_grad_direct_applies(s), "conv_weight_grad_direct: this CPU or geometry is not one it takes ",
           "(check conv_weight_grad_direct_applies() first)");
  const Plan p = plan_of(s);
  const int64_t K = p.pairs * kTaps, ximage = s.C * s.H * s.W, gimage = s.O * p.L;
  AlignedBuffer<float> xpad, gyT, accT;
  xpad.get(p.nb * p.image);
  gyT.get(p.nb * p.L * p.Opad);
  accT.get(K * p.Opad);
  const int64_t macs = s.N * p.L * s.O * K;
  const int nt = omp_in_parallel() || macs < kParallelMacs ? 1 : omp_get_max_threads();
#pragma omp parallel num_threads(nt) if (nt > 1)
  for (int64_t n0 = 0; n0 < s.N; n0 += p.nb) {
    const int64_t m = std::min(p.nb, s.N - n0);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < m; ++i) {
      stage_x(p, x + (n0 + i) * ximage, xpad.data.get() + i * p.image);
      stage_gy(p, gy + (n0 + i) * gimage, gyT.data.get() + i * p.L * p.Opad);
    }
#pragma omp for schedule(static)
    for (int64_t b = 0; b < p.blocks(); ++b) {
      const int64_t pb = b / p.oblocks, ob = b % p.oblocks, pair0 = pb * p.P;
      const int P = static_cast<int>(std::min<int64_t>(p.P, p.pairs - pair0));
      block_fn(p.V, P)(p, xpad.data.get(), gyT.data.get(), m, pair0, ob * p.V * 16, accT.data.get(), n0 == 0);
    }
  }
  for (int64_t o = 0; o < s.O; ++o)
    for (int64_t k = 0; k < K; ++k) gw[o * K + k] = accT.data.get()[k * p.Opad + o];
}

#endif  // MIXTAPE_HAVE_WGRAD_AVX512

}  // namespace

bool conv_weight_grad_direct_applies(const WeightGradShape& s) {
  if (!MIXTAPE_HAVE_WGRAD_AVX512 || !geometry_ok(s) || !conv_implicit_gemm_enabled()) return false;
  return plan_of(s).blocks() >= kMinBlocks;
}

#if MIXTAPE_HAVE_WGRAD_AVX512
void conv_weight_grad_direct(const WeightGradShape& s, const float* x, const float* gy, float* gw) {
  run(s, x, gy, gw);
}
void conv_weight_grad_direct(const WeightGradShape& s, const BFloat16* x, const BFloat16* gy, float* gw) {
  run(s, x, gy, gw);
}
void conv_weight_grad_direct(const WeightGradShape& s, const Half* x, const Half* gy, float* gw) {
  run(s, x, gy, gw);
}
#pragma GCC diagnostic pop
#else
void conv_weight_grad_direct(const WeightGradShape&, const float*, const float*, float*) {
  MT_ERROR("conv_weight_grad_direct: not built for this target");
}
void conv_weight_grad_direct(const WeightGradShape&, const BFloat16*, const BFloat16*, float*) {
  MT_ERROR("conv_weight_grad_direct: not built for this target");
}
void conv_weight_grad_direct(const WeightGradShape&, const Half*, const Half*, float*) {
  MT_ERROR("conv_weight_grad_direct: not built for this target");
}
#endif

}  // namespace mixtape::cpu
