// ops/cpu/conv_implicit_gemm.cpp — see conv_implicit_gemm.h. Only the functions marked MT_TARGET_AVX512_FMA /
// MT_TARGET_AVX512BF16 / MT_TARGET_AMX hold AVX-512 (or AMX) instructions; they run only after the entry points
// checked the CPU.
#include "ops/cpu/conv_implicit_gemm.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "ops/cpu/aligned_buffer.h"
#include "ops/cpu/amx_tiles.h"
#include "ops/cpu/bf16_pairs_avx512.h"
#include "ops/cpu/bgemm_amx.h"
#include "ops/cpu/bgemm_avx512bf16.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/tile_threads.h"

#include "ops/cpu/bf16_round_avx512.h"
#include "ops/cpu/isa.h"
MT_KERNELS_BEGIN

namespace mixtape::cpu {
namespace {

bool im2col_from_env() {
  const char* e = std::getenv("MIXTAPE_CPU_CONV");
  const std::string v = e ? e : "";
  if (v.empty() || v == "auto") return false;
  if (v == "im2col") return true;
  MT_ERROR("MIXTAPE_CPU_CONV: expected 'auto' or 'im2col', got '", v, "'");
}

}  // namespace

bool conv_kernels_enabled() {
  if (const intptr_t o = override_slot(Switch::ConvAlgo).load(std::memory_order_relaxed))
    return o - 1 == static_cast<intptr_t>(ConvAlgo::Auto) && isa_avx512();
  // A throwing initialiser leaves it uninitialised, so a bad value throws at every call.
  static const bool im2col = im2col_from_env();
  return !im2col && isa_avx512();
}

Override::Override(ConvAlgo algo) : which_(Switch::ConvAlgo) {
  mine_ = 1 + static_cast<intptr_t>(algo);
  previous_ = override_slot(which_).exchange(mine_);
}

#if MIXTAPE_X86_KERNELS
namespace {

constexpr int64_t kMr = 8;   // output channels of a register tile (an A panel)
constexpr int64_t kNr = 32;  // output pixels of a register tile (a column panel)
// Depth slices: a B slice (kc x 32) is 32 KiB in FP32 (kc = 256) and in BF16 (kc = 512): L1.
constexpr int64_t kKcF32 = 256;
constexpr int64_t kKcBf16 = 512;
// Below this many multiply-adds a call runs on one thread: a team costs more than it saves.
constexpr int64_t kParallelMacs = int64_t(1) << 21;

// Lanes lo..hi-1 of a 32-lane panel (0 <= lo <= hi <= 32).
inline uint32_t lanes(int64_t lo, int64_t hi) {
  if (hi <= lo) return 0;
  return static_cast<uint32_t>(((uint64_t(1) << (hi - lo)) - 1) << lo);
}

// The part of a column panel that lies in one image: lane t reads output pixel l = base + t of
// image n, for the lanes in `bits`.
struct Segment {
  int64_t n, base;
  uint32_t bits;
};

// Per call, per thread (O(kW L) bit operations): for each kernel column kj, which output pixels l
// of an image read inside it (bit l of a bitset, set when 0 <= l % W + kj - pW < W; kW rows of
// `words` 64-bit words, the last one zero so that any 32-bit window reads two whole words); for
// each kernel row ki the range [row_lo, row_hi) of l whose row reads inside it; each tap's shift.
struct TapBits {
  int64_t words = 0;
  std::vector<uint64_t> col;
  std::vector<int64_t> row_lo, row_hi, shift;

  void build(const ImplicitConvShape& s) {
    const int64_t L = s.OH * s.W;
    words = L / 64 + 2;
    col.assign(static_cast<size_t>(s.kW * words), 0);
    for (int64_t kj = 0; kj < s.kW; ++kj)
      for (int64_t l = 0, j = 0; l < L; ++l, j = j + 1 == s.W ? 0 : j + 1)  // j = l % W
        if (j + kj - s.pW >= 0 && j + kj - s.pW < s.W)
          col[static_cast<size_t>(kj * words + l / 64)] |= uint64_t(1) << (l % 64);
    row_lo.resize(static_cast<size_t>(s.kH));
    row_hi.resize(static_cast<size_t>(s.kH));
    for (int64_t ki = 0; ki < s.kH; ++ki) {
      const int64_t off = ki * s.dH - s.pH;  // output row i reads input row i + off
      const int64_t i0 = std::clamp<int64_t>(-off, 0, s.OH), i1 = std::clamp<int64_t>(s.H - off, i0, s.OH);
      row_lo[static_cast<size_t>(ki)] = i0 * s.W;
      row_hi[static_cast<size_t>(ki)] = i1 * s.W;
    }
    shift.resize(static_cast<size_t>(s.kH * s.kW));
    for (int64_t ki = 0; ki < s.kH; ++ki)
      for (int64_t kj = 0; kj < s.kW; ++kj)
        shift[static_cast<size_t>(ki * s.kW + kj)] = (ki * s.dH - s.pH) * s.W + kj - s.pW;
  }
  // Bits l .. l + len - 1 (len <= 32) of kj's bitset, as the low len bits.
  uint32_t cols(int64_t kj, int64_t l, int64_t len) const {
    const uint64_t* w = col.data() + kj * words + l / 64;
    const int64_t o = l % 64;
    const uint64_t v = o == 0 ? w[0] : (w[0] >> o) | (w[1] << (64 - o));
    return static_cast<uint32_t>(v) & lanes(0, len);
  }
};

// Where the 32 columns of panel `panel` come from, and for each kernel tap (ki, kj) the lanes
// whose input pixel is inside the image (zero padding elsewhere): per image segment of the panel,
// a bit range per kernel row and a window of TapBits' bitset per kernel column.
struct PanelMap {
  int nseg = 0;
  Segment seg[kNr];
  std::vector<uint32_t> tap;  // [ki kW + kj]
  const int64_t* shift = nullptr;  // [ki kW + kj]: col[(c, ki, kj), l] = x[c, l + shift] (TapBits')
  std::vector<uint32_t> rows, cols;

  void build(const ImplicitConvShape& s, const TapBits& tb, int64_t panel) {
    const int64_t L = s.OH * s.W;
    int64_t n = panel * kNr / L, l = panel * kNr % L, t = 0;
    nseg = 0;
    rows.assign(static_cast<size_t>(s.kH), 0);
    cols.assign(static_cast<size_t>(s.kW), 0);
    while (t < kNr && n < s.N) {
      const int64_t len = std::min(kNr - t, L - l);
      seg[nseg++] = {n, l - t, lanes(t, t + len)};
      for (int64_t ki = 0; ki < s.kH; ++ki) {
        const int64_t lo = std::max(l, tb.row_lo[static_cast<size_t>(ki)]);
        const int64_t hi = std::min(l + len, tb.row_hi[static_cast<size_t>(ki)]);
        rows[static_cast<size_t>(ki)] |= lanes(t + lo - l, t + hi - l);
      }
      for (int64_t kj = 0; kj < s.kW; ++kj) cols[static_cast<size_t>(kj)] |= tb.cols(kj, l, len) << t;
      t += len, ++n, l = 0;
    }
    tap.resize(static_cast<size_t>(s.kH * s.kW));
    for (int64_t ki = 0; ki < s.kH; ++ki)
      for (int64_t kj = 0; kj < s.kW; ++kj)
        tap[static_cast<size_t>(ki * s.kW + kj)] = rows[static_cast<size_t>(ki)] & cols[static_cast<size_t>(kj)];
    shift = tb.shift.data();
  }
};

// Walks the depth rows r = (c kH + ki) kW + kj of the implicit col in order without dividing:
// channel c and tap index k = ki kW + kj of row r.
struct RowCursor {
  int64_t c, k, kk;
  RowCursor(const ImplicitConvShape& s, int64_t r) : c(r / (s.kH * s.kW)), k(r % (s.kH * s.kW)), kk(s.kH * s.kW) {}
  void next() {
    if (++k == kk) k = 0, ++c;
  }
};

// ---- B packing: rows [p0, p0 + kc) of the implicit col for one column panel ----
// FP32 layout: dst[p 32 + t]. 16 lanes per masked load; masked-off lanes read nothing.
template <typename E>
MT_TARGET_AVX512_FMA inline __m512 load16_f32(__m512 v, uint32_t m, const E* src) {
  if constexpr (std::is_same_v<E, float>) {
    return _mm512_mask_loadu_ps(v, static_cast<__mmask16>(m), src);
  } else {  // BF16 bits: widen exactly (a float's upper half)
    const __m256i h = _mm256_maskz_loadu_epi16(static_cast<__mmask16>(m), src);
    return _mm512_mask_mov_ps(v, static_cast<__mmask16>(m), widen_bf16(h));
  }
}

template <typename E>
MT_TARGET_AVX512_FMA void pack_b_f32(const ImplicitConvShape& s, const E* x, const PanelMap& pm, int64_t p0, int64_t kc,
                        float* dst) {
  const int64_t HW = s.H * s.W;
  const E* seg_x[kNr];  // image n's data shifted so that lane t reads pixel l = t of its plane 0
  for (int q = 0; q < pm.nseg; ++q) seg_x[q] = x + pm.seg[q].n * s.C * HW + pm.seg[q].base;
  RowCursor rc(s, p0);
  for (int64_t p = 0; p < kc; ++p, rc.next()) {
    const uint32_t mk = pm.tap[static_cast<size_t>(rc.k)];
    const int64_t off = rc.c * HW + pm.shift[static_cast<size_t>(rc.k)];
    __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
    for (int q = 0; q < pm.nseg; ++q) {
      const uint32_t m = mk & pm.seg[q].bits;
      if (!m) continue;
      const E* src = seg_x[q] + off;
      lo = load16_f32(lo, m & 0xFFFFu, src);
      hi = load16_f32(hi, m >> 16, src + 16);
    }
    _mm512_store_ps(dst + p * kNr, lo);
    _mm512_store_ps(dst + p * kNr + 16, hi);
  }
}

// BF16 pair layout: depth pair p2 = (p0 + 2 p2, p0 + 2 p2 + 1), lane t at dst[(p2 32 + t) 2 + {0, 1}];
// zero past depth K.
MT_TARGET_AVX512BF16 void pack_b_bf16(const ImplicitConvShape& s, const uint16_t* x, const PanelMap& pm, int64_t p0,
                              int64_t kc, uint16_t* dst) {
  const int64_t K = s.C * s.kH * s.kW, HW = s.H * s.W;
  const uint16_t* seg_x[kNr];
  for (int q = 0; q < pm.nseg; ++q) seg_x[q] = x + pm.seg[q].n * s.C * HW + pm.seg[q].base;
  RowCursor rc(s, p0);
  // The cursor's row, its lanes inside the image (zero elsewhere), then the cursor moved on. One
  // segment (most panels) is one zero-masked load; both rows stay in registers (an array of the
  // two, indexed in a loop, went through the stack and stalled the loads that merged into it).
  const auto row = [&]() MT_TARGET_AVX512BF16 {
    const uint32_t mk = pm.tap[static_cast<size_t>(rc.k)];
    const int64_t off = rc.c * HW + pm.shift[static_cast<size_t>(rc.k)];
    rc.next();
    if (pm.nseg == 1) return _mm512_maskz_loadu_epi16(mk & pm.seg[0].bits, seg_x[0] + off);
    __m512i r = _mm512_setzero_si512();
    for (int q = 0; q < pm.nseg; ++q) {
      const uint32_t m = mk & pm.seg[q].bits;
      if (m) r = _mm512_mask_loadu_epi16(r, m, seg_x[q] + off);
    }
    return r;
  };
  for (int64_t p2 = 0; 2 * p2 < kc; ++p2) {  // rows p0 + 2 p2 and p0 + 2 p2 + 1 (zero past K)
    const __m512i r0 = row();
    const __m512i r1 = p0 + 2 * p2 + 1 < K ? row() : _mm512_setzero_si512();
    bf16_pairs::store_pair_row(r0, r1, dst + p2 * kNr * 2);
  }
}

// ---- micro-kernels: the 8 x 32 tile acc (row-major, 32 floats a row) += Ap^T Bp over the slice;
// from +0 when `first`. Storing and reloading FP32 partial sums is exact, so a tile summed over
// several slices equals one chain over the whole depth. ----
MT_TARGET_AVX512_FMA void tile_f32(int64_t kc, const float* __restrict ap, const float* __restrict bp, float* acc, bool first) {
  __m512 c[kMr][2];
#pragma GCC unroll 8
  for (int i = 0; i < kMr; ++i) {
    c[i][0] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc + i * kNr);
    c[i][1] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc + i * kNr + 16);
  }
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_load_ps(bp), b1 = _mm512_load_ps(bp + 16);
#pragma GCC unroll 8
    for (int i = 0; i < kMr; ++i) {
      const __m512 a = _mm512_set1_ps(ap[i]);
      c[i][0] = _mm512_fmadd_ps(a, b0, c[i][0]);
      c[i][1] = _mm512_fmadd_ps(a, b1, c[i][1]);
    }
    ap += kMr;
    bp += kNr;
  }
#pragma GCC unroll 8
  for (int i = 0; i < kMr; ++i) {
    _mm512_store_ps(acc + i * kNr, c[i][0]);
    _mm512_store_ps(acc + i * kNr + 16, c[i][1]);
  }
}

MT_TARGET_AVX512BF16 void tile_bf16(int64_t kc2, const uint16_t* __restrict ap, const uint16_t* __restrict bp, float* acc,
                            bool first) {
  __m512 c[kMr][2];
#pragma GCC unroll 8
  for (int i = 0; i < kMr; ++i) {
    c[i][0] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc + i * kNr);
    c[i][1] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc + i * kNr + 16);
  }
  for (int64_t p2 = 0; p2 < kc2; ++p2) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512(bp), b1 = (__m512bh)_mm512_load_si512(bp + 32);
#pragma GCC unroll 8
    for (int i = 0; i < kMr; ++i) {
      int32_t pair;
      std::memcpy(&pair, ap + 2 * i, sizeof pair);
      const __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
      c[i][0] = _mm512_dpbf16_ps(c[i][0], b0, a);
      c[i][1] = _mm512_dpbf16_ps(c[i][1], b1, a);
    }
    ap += kMr * 2;
    bp += kNr * 2;
  }
#pragma GCC unroll 8
  for (int i = 0; i < kMr; ++i) {
    _mm512_store_ps(acc + i * kNr, c[i][0]);
    _mm512_store_ps(acc + i * kNr + 16, c[i][1]);
  }
}

// ---- epilogue: * alpha (skipped at 1), + bias, stored (rounded once to BF16: round_to_bf16) into
// each image the panel covers ----
template <typename E>
MT_TARGET_AVX512_FMA void store_panel(const ImplicitConvShape& s, const PanelMap& pm, const float* acc, const float* bias,
                                      float alpha, E* y) {
  const int64_t L = s.OH * s.W;
  const __m512 a = _mm512_set1_ps(alpha);
  for (int64_t o = 0; o < s.O; ++o) {
    __m512 lo = _mm512_load_ps(acc + o * kNr), hi = _mm512_load_ps(acc + o * kNr + 16);
    // Explicitly rounded products: never contracted with the bias add into an FMA (one rounding).
    if (alpha != 1.0f) {
      lo = _mm512_mul_round_ps(lo, a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      hi = _mm512_mul_round_ps(hi, a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    if (bias) {
      const __m512 b = _mm512_set1_ps(bias[o]);
      lo = _mm512_add_ps(lo, b), hi = _mm512_add_ps(hi, b);
    }
    for (int q = 0; q < pm.nseg; ++q) {
      const uint32_t m = pm.seg[q].bits;
      E* dst = y + (pm.seg[q].n * s.O + o) * L + pm.seg[q].base;
      if constexpr (std::is_same_v<E, float>) {
        _mm512_mask_storeu_ps(dst, static_cast<__mmask16>(m & 0xFFFFu), lo);
        _mm512_mask_storeu_ps(dst + 16, static_cast<__mmask16>(m >> 16), hi);
      } else {
        _mm256_mask_storeu_epi16(dst, static_cast<__mmask16>(m & 0xFFFFu), round_to_bf16(lo));
        _mm256_mask_storeu_epi16(dst + 16, static_cast<__mmask16>(m >> 16), round_to_bf16(hi));
      }
    }
  }
}

// ---- weights, packed once per call ----
// FP32: panel ip holds rows [8 ip, 8 ip + 8) as ap[ip K 8 + p 8 + ii], zero past O.
template <typename W>
void pack_weights_f32(const ImplicitConvShape& s, const W* w, float* ap) {
  const int64_t K = s.C * s.kH * s.kW, panels = (s.O + kMr - 1) / kMr;
  for (int64_t ip = 0; ip < panels; ++ip)
    for (int64_t p = 0; p < K; ++p)
      for (int64_t ii = 0; ii < kMr; ++ii) {
        const int64_t o = ip * kMr + ii;
        ap[(ip * K + p) * kMr + ii] = o < s.O ? static_cast<float>(w[o * K + p]) : 0.0f;
      }
}
// BF16 pairs: ap[((ip K2 + p2) 8 + ii) 2 + e] = w[o, 2 p2 + e], zero past O and past K.
void pack_weights_bf16(const ImplicitConvShape& s, const uint16_t* w, uint16_t* ap) {
  const int64_t K = s.C * s.kH * s.kW, K2 = (K + 1) / 2, panels = (s.O + kMr - 1) / kMr;
  for (int64_t ip = 0; ip < panels; ++ip)
    for (int64_t p2 = 0; p2 < K2; ++p2)
      for (int64_t ii = 0; ii < kMr; ++ii)
        for (int64_t e = 0; e < 2; ++e) {
          const int64_t o = ip * kMr + ii, p = 2 * p2 + e;
          ap[((ip * K2 + p2) * kMr + ii) * 2 + e] = o < s.O && p < K ? w[o * K + p] : uint16_t(0);
        }
}

int threads_for(const ImplicitConvShape& s) {
  const int64_t macs = s.N * s.OH * s.W * s.O * s.C * s.kH * s.kW;
  return omp_in_parallel() || macs < kParallelMacs ? 1 : omp_get_max_threads();
}

// The column panels [lo, hi) on the calling thread. Native: BF16 pairs and vdpbf16ps.
template <bool kNative, typename E>
MT_TARGET_AVX512_FMA void run_panels(const ImplicitConvShape& s, const E* x, const void* apack, const float* bias,
                                    float alpha, E* y, int64_t lo, int64_t hi) {
  const int64_t K = s.C * s.kH * s.kW, panels = (s.O + kMr - 1) / kMr;
  const int64_t kc_max = kNative ? kKcBf16 : kKcF32;
  thread_local AlignedBuffer<float> acc_buf, bf_buf;
  thread_local AlignedBuffer<uint16_t> bh_buf;
  TapBits tb;
  PanelMap pm;
  tb.build(s);
  float* acc = acc_buf.get(panels * kMr * kNr);
  for (int64_t panel = lo; panel < hi; ++panel) {
    pm.build(s, tb, panel);
    for (int64_t p0 = 0; p0 < K; p0 += kc_max) {
      const int64_t kc = std::min(kc_max, K - p0);
      if constexpr (kNative) {
        const int64_t K2 = (K + 1) / 2, kc2 = (kc + 1) / 2;
        uint16_t* bp = bh_buf.get(kc_max * kNr);
        pack_b_bf16(s, reinterpret_cast<const uint16_t*>(x), pm, p0, kc, bp);
        const uint16_t* ap = static_cast<const uint16_t*>(apack);
        for (int64_t ip = 0; ip < panels; ++ip)
          tile_bf16(kc2, ap + (ip * K2 + p0 / 2) * kMr * 2, bp, acc + ip * kMr * kNr, p0 == 0);
      } else {
        float* bp = bf_buf.get(kc_max * kNr);
        pack_b_f32(s, x, pm, p0, kc, bp);
        const float* ap = static_cast<const float*>(apack);
        for (int64_t ip = 0; ip < panels; ++ip)
          tile_f32(kc, ap + (ip * K + p0) * kMr, bp, acc + ip * kMr * kNr, p0 == 0);
      }
    }
    store_panel(s, pm, acc, bias, alpha, y);
  }
}

// ---- AMX: the whole depth per column panel, 32 output channels x 32 pixels per tile block ----
static_assert(kNr == amx::kBlock, "a column panel is one AMX block wide");
// Weights as AMX A tiles: panel ip (32 channels), step st (32 depths): row-major 32 x 32 at
// ap[((ip steps + st) 32 + ii) 32 + q] = w[32 ip + ii, 32 st + q], zero past O and past K.
void pack_weights_amx(const ImplicitConvShape& s, const uint16_t* w, uint16_t* ap) {
  const int64_t K = s.C * s.kH * s.kW, steps = (K + amx::kStep - 1) / amx::kStep;
  const int64_t panels = (s.O + amx::kBlock - 1) / amx::kBlock;
  for (int64_t ip = 0; ip < panels; ++ip)
    for (int64_t st = 0; st < steps; ++st)
      for (int64_t ii = 0; ii < amx::kBlock; ++ii)
        for (int64_t q = 0; q < amx::kStep; ++q) {
          const int64_t o = ip * amx::kBlock + ii, p = st * amx::kStep + q;
          ap[((ip * steps + st) * amx::kBlock + ii) * amx::kStep + q] = o < s.O && p < K ? w[o * K + p] : uint16_t(0);
        }
}

// The column panels [lo, hi) on the calling thread, on AMX tiles: B packed for the whole depth in
// the pair layout (zero up to whole steps), one 32 x 32 block product per 32 output channels,
// stored as the accumulator tile store_panel reads. Each output element is one tdpbf16ps chain
// over the whole depth (ops/cpu/bgemm_amx.h's rule with a single slice), then + bias, rounded.
MT_TARGET_AMX void run_panels_amx(const ImplicitConvShape& s, const uint16_t* x, const uint16_t* ap, const float* bias,
                                  float alpha, uint16_t* y, int64_t lo, int64_t hi) {
  const int64_t K = s.C * s.kH * s.kW, steps = (K + amx::kStep - 1) / amx::kStep;
  const int64_t panels = (s.O + amx::kBlock - 1) / amx::kBlock, K2 = (K + 1) / 2;
  thread_local AlignedBuffer<float> acc_buf;
  thread_local AlignedBuffer<uint16_t> bh_buf;
  TapBits tb;
  PanelMap pm;
  tb.build(s);
  float* acc = acc_buf.get(panels * amx::kBlock * kNr);
  uint16_t* bp = bh_buf.get(steps * amx::kStep * kNr);
  // Pair rows past the depth are zero once for all panels (pack_b_bf16 writes only up to K).
  std::memset(bp + K2 * kNr * 2, 0, static_cast<size_t>((steps * amx::kStep / 2 - K2) * kNr * 2) * sizeof(uint16_t));
  const amx::TileScope tiles;  // released however this ends (PanelMap::build allocates)
  for (int64_t panel = lo; panel < hi; ++panel) {
    pm.build(s, tb, panel);
    pack_b_bf16(s, x, pm, 0, K, bp);
    for (int64_t ip = 0; ip < panels; ++ip) {
      const bool top = s.O - ip * amx::kBlock <= amx::kTile;  // rows 16-31 padding (store_panel reads o < O)
      amx::block_product(steps, ap + ip * steps * amx::kBlock * amx::kStep, bp, top);
      amx::store_block(acc + ip * amx::kBlock * kNr, kNr, top);
    }
    store_panel(s, pm, acc, bias, alpha, y);
  }
}

// Kernel: 0 FP32 tiles (E float, or BF16 widened), 1 vdpbf16ps, 2 AMX.
template <int kKernel, typename E>
void conv_panels(const ImplicitConvShape& s, const E* x, const void* apack, const float* bias, float alpha, E* y) {
  const int64_t columns = s.N * s.OH * s.W, npanels = (columns + kNr - 1) / kNr;
  const auto run = [&](int64_t lo, int64_t hi) {
    if constexpr (kKernel == 2)
      run_panels_amx(s, x, static_cast<const uint16_t*>(apack), bias, alpha, y, lo, hi);
    else
      run_panels<kKernel == 1>(s, x, apack, bias, alpha, y, lo, hi);
  };
  const int nt = threads_for(s);
  if (nt <= 1) return run(0, npanels);
  for_tile_ranges(nt, npanels, 1, run);
}

void forward(const ImplicitConvShape& s, const float* x, const float* w, const float* bias, float* y) {
  const int64_t K = s.C * s.kH * s.kW, panels = (s.O + kMr - 1) / kMr;
  AlignedBuffer<float> ap;
  pack_weights_f32(s, w, ap.get(panels * K * kMr));
  conv_panels<0>(s, x, ap.data.get(), bias, 1.0f, y);
}

void forward(const ImplicitConvShape& s, const BFloat16* x, const float* w, const float* bias, float alpha, BFloat16* y) {
  const int64_t K = s.C * s.kH * s.kW, panels = (s.O + kMr - 1) / kMr;
  AlignedBuffer<float> ap;
  pack_weights_f32(s, w, ap.get(panels * K * kMr));
  // BFloat16 is a standard-layout wrapper of its uint16_t bits (core/bfloat16.h asserts it).
  conv_panels<0>(s, &x->bits, ap.data.get(), bias, alpha, &y->bits);
}

void forward(const ImplicitConvShape& s, const BFloat16* x, const BFloat16* w, const float* bias, float alpha,
             BFloat16* y, Bf16Kernel gemm) {
  const int64_t K = s.C * s.kH * s.kW, K2 = (K + 1) / 2, panels = (s.O + kMr - 1) / kMr;
  AlignedBuffer<uint16_t> ap;
  if (gemm == Bf16Kernel::Amx) {
    const int64_t steps = (K + amx::kStep - 1) / amx::kStep, blocks = (s.O + amx::kBlock - 1) / amx::kBlock;
    pack_weights_amx(s, &w->bits, ap.get(blocks * steps * amx::kBlock * amx::kStep));
    return conv_panels<2>(s, &x->bits, ap.data.get(), bias, alpha, &y->bits);
  }
  pack_weights_bf16(s, &w->bits, ap.get(panels * K2 * kMr * 2));
  conv_panels<1>(s, &x->bits, ap.data.get(), bias, alpha, &y->bits);
}


}  // namespace
#endif  // MIXTAPE_X86_KERNELS

namespace {
void check_shape(const ImplicitConvShape& s) {
  MT_CHECK(isa_avx512(), "conv_implicit_gemm: this CPU lacks AVX-512 F/BW/VL (check conv_kernels_enabled())");
  MT_CHECK(s.N >= 0 && s.C > 0 && s.O > 0 && s.kH > 0 && s.kW == 2 * s.pW + 1 && s.dH > 0 && s.pH >= 0 &&
               s.OH == s.H + 2 * s.pH - s.dH * (s.kH - 1) && s.OH > 0 && s.W > 0,
           "conv_implicit_gemm: not a plane-shift geometry");
}
}  // namespace

void conv_implicit_gemm(const ImplicitConvShape& s, const float* x, const float* w, const float* bias, float* y) {
  check_shape(s);
  MT_X86_ONLY(forward(s, x, w, bias, y));
}
void conv_implicit_gemm(const ImplicitConvShape& s, const BFloat16* x, const float* w, const float* bias,
                        BFloat16* y, float alpha) {
  check_shape(s);
  MT_X86_ONLY(forward(s, x, w, bias, alpha, y));
}
void conv_implicit_gemm(const ImplicitConvShape& s, const BFloat16* x, const BFloat16* w, const float* bias,
                        BFloat16* y, Bf16Kernel gemm, float alpha) {
  check_shape(s);
  MT_CHECK(gemm != Bf16Kernel::Emulated, "conv_implicit_gemm: BF16 weights need a native BF16 GEMM, got emulated");
  if (gemm == Bf16Kernel::Amx)
    MT_CHECK(bgemm_amx_available(), "conv_implicit_gemm: this CPU lacks ", bf16_amx_missing(cpu_features_with_amx()));
  else
    MT_CHECK(bgemm_avx512bf16_available(), "conv_implicit_gemm: this CPU lacks ", bf16_native_missing(cpu_features()),
             " (check bf16_native_gemm() first)");
  MT_X86_ONLY(forward(s, x, w, bias, alpha, y, gemm));
}

}  // namespace mixtape::cpu

MT_KERNELS_END
