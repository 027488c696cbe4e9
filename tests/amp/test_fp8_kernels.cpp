// tests/amp/test_fp8_kernels.cpp — the FP8 path's vector kernels give the bits of the scalar
// paths they replace: the bulk scaled cast (amp/fp8_cast_table.h) against core/float8.h's
// saturating conversion on every high half of a float, and its amax; conv2d's transposed AVX-512 im2col of an FP8 image (amp/fp8_im2col.h)
// against the row-by-row one, and the FP8 GEMM on either layout of that operand; conv2d's one-pass
// output (scale, bias, NCHW, one rounding) against those steps apart; col2im against its plain loop;
// the MX block casts (amp/mx_block.h, amp/mx_block_avx512.h) against a scalar reference of the
// blocks at both ISA levels, and MXFP8's transposed conv2d wgrad against the row-matrix route.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>

#include "amp/amax_kernels.h"
#include "amp/fp8_cast_table.h"
#include "amp/fp8_im2col.h"
#include "amp/mx_block.h"
#include "common/bf16_paths_here.h"
#include "common/on_thread_counts.h"
#include "mixtape/mixtape.h"
#include "ops/conv_args.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/im2col_avx512.h"
#include "ops/cpu/steering.h"

using namespace mixtape;
using namespace mixtape::amp;

namespace {
using ::mixtape::testing::bf16_paths_here;
using ::mixtape::testing::bf16_path_name;
using ::mixtape::testing::on_thread_counts;

struct Geometry {
  int64_t N, C, H, W, O, kH, kW;
  IntList stride, padding, dilation;
};

// SmallCNN's two convs (smaller batch), a 5x3 kernel, a 1x1, row dilation, and two geometries the
// AVX-512 im2col does not take (stride 2; OW != W).
const Geometry kGeometries[] = {
    {3, 1, 28, 28, 32, 3, 3, {1, 1}, {1, 1}, {1, 1}}, {3, 32, 14, 14, 64, 3, 3, {1, 1}, {1, 1}, {1, 1}},
    {2, 3, 7, 9, 5, 5, 3, {1, 1}, {2, 1}, {1, 1}},    {2, 4, 5, 6, 3, 1, 1, {1, 1}, {0, 0}, {1, 1}},
    {2, 3, 9, 8, 4, 3, 3, {1, 1}, {2, 1}, {2, 1}},    {2, 3, 9, 8, 4, 3, 3, {2, 2}, {1, 1}, {1, 1}},
    {2, 3, 9, 8, 4, 3, 3, {1, 1}, {0, 0}, {1, 1}},
};

ConvGeom geometry_of(const Geometry& g) {
  const Tensor x = zeros({g.N, g.C, g.H, g.W}), w = zeros({g.O, g.C, g.kH, g.kW});
  return check_conv_geometry("conv2d", Shown::of(x), Shown::of(w), g.stride, g.padding, g.dilation, 1);
}

bool takes_plane_shift(const ConvGeom& g) {
  return g.sH == 1 && g.sW == 1 && g.dW == 1 && g.OW == g.W && cpu::im2col_avx512_available();
}

// An FP8 tensor holding every one of the 256 codes first (NaNs, zeros, subnormals, the largest),
// then random codes.
Tensor every_code(IntList sizes, DType dt, uint64_t seed) {
  Tensor t = Tensor::empty(sizes, TensorOptions(dt));
  uint8_t* p = static_cast<uint8_t*>(t.data_ptr());
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = i < 256 ? static_cast<uint8_t>(i) : static_cast<uint8_t>(rng());
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * element_size(a.dtype())) == 0;
}

}  // namespace

TEST(Fp8Im2col, TransposedAvx512MatrixHoldsTheRowMatrixBitForBit) {
  for (DType dt : {DType::Float8_e4m3fn, DType::Float8_e5m2})
    for (const Geometry& geo : kGeometries) {
      const ConvGeom g = geometry_of(geo);
      const Tensor x = every_code({g.N, g.C, g.H, g.W}, dt, 7);
      const Tensor t = im2col_fp8_to_bf16_transposed(x, g);
      ASSERT_EQ(t.defined(), takes_plane_shift(g)) << "geometry C=" << g.C << " H=" << g.H << " sH=" << g.sH;
      if (!t.defined()) continue;
      const Tensor r = im2col_fp8_to_bf16(x, g);  // (M, K)
      ASSERT_EQ(t.sizes(), (IntList{g.K(), g.N * g.L()}));
      const auto* tb = t.data_ptr<BFloat16>();
      const auto* rb = r.data_ptr<BFloat16>();
      for (int64_t i = 0; i < g.N * g.L(); ++i)
        for (int64_t k = 0; k < g.K(); ++k)
          ASSERT_EQ(tb[k * g.N * g.L() + i].bits, rb[i * g.K() + k].bits)
              << dtype_name(dt) << " C=" << g.C << " H=" << g.H << " row " << i << " col " << k;
    }
}

TEST(Fp8Im2col, TransposedF32AndBf16MatricesHoldTheRowMatrixBitForBit) {
  // im2col_transposed (MXFP8's wgrad) against im2col_f32 / im2col_bf16, on every geometry the
  // AVX-512 im2col takes (plane shift, or column strides 1 and 2); undefined for an f16 image.
  Generator gen(8);
  for (const Geometry& geo : kGeometries) {
    const ConvGeom g = geometry_of(geo);
    const Tensor x32 = randn({g.N, g.C, g.H, g.W}, {}, &gen);
    EXPECT_FALSE(im2col_transposed(x32.to(DType::Float16), g).defined());
    for (DType dt : {DType::Float32, DType::BFloat16}) {
      const Tensor x = x32.to(dt);
      const Tensor t = im2col_transposed(x, g);
      ASSERT_EQ(t.defined(), cpu::im2col_avx512_available()) << "geometry C=" << g.C << " H=" << g.H << " sH=" << g.sH;
      if (!t.defined()) continue;
      const Tensor r = dt == DType::Float32 ? im2col_f32(x, g) : im2col_bf16(x, g);  // (M, K)
      ASSERT_EQ(t.sizes(), (IntList{g.K(), g.N * g.L()}));
      EXPECT_TRUE(same_bits(t, r.t().contiguous())) << dtype_name(dt) << " C=" << g.C << " H=" << g.H << " W=" << g.W;
    }
  }
}

TEST(Fp8Im2col, GemmOnTheTransposedMatrixGivesTheBitsOfTheRowMatrix) {
  // conv2d's forward P @ W^T and weight gradient G^T @ P, P as im2col_operand writes it either way.
  Generator gen(3);
  for (const Geometry& geo : kGeometries) {
    const ConvGeom g = geometry_of(geo);
    if (!takes_plane_shift(g)) continue;  // the row matrix is then the only one
    const int64_t m = g.N * g.L();
    Fp8Operand image = quantize_per_tensor(randn({g.N, g.C, g.H, g.W}, {}, &gen), DType::Float8_e4m3fn, 4.0f);
    const Fp8Operand w = quantize_per_tensor(randn({g.O, g.K()}, {}, &gen), DType::Float8_e4m3fn, 8.0f);
    const Fp8Operand grad = quantize_per_tensor(randn({m, g.O}, {}, &gen), DType::Float8_e5m2, 2.0f);
    Fp8Operand rows = image, cols = image;
    rows.widened = im2col_fp8_to_bf16(image.data, g);
    cols.widened = im2col_fp8_to_bf16_transposed(image.data, g);
    cols.widened_transposed = true;
    for (cpu::Bf16GemmPath path : bf16_paths_here()) {
      cpu::Override on(path);
      EXPECT_TRUE(same_bits(fp8_gemm(rows, false, w, true, "t"), fp8_gemm(cols, false, w, true, "t")))
          << "forward, C=" << g.C << " path " << static_cast<int>(path);
      EXPECT_TRUE(same_bits(fp8_gemm(grad, true, rows, false, "t"), fp8_gemm(grad, true, cols, false, "t")))
          << "weight gradient, C=" << g.C << " path " << static_cast<int>(path);
    }
  }
}

// Every sign, exponent and top-7 mantissa pattern, with low halves 0, 1, 0x8000 and 0xFFFF (the
// table's two cases and both ends of the sticky bits); the count is not a multiple of 16, so the
// masked tail runs too.
std::vector<float> every_high_half() {
  std::vector<float> src;
  for (uint32_t hi = 0; hi < (1u << 16); ++hi)
    for (uint32_t low : {0u, 1u, 0x8000u, 0xFFFFu}) {
      const uint32_t bits = hi << 16 | low;
      float v;
      std::memcpy(&v, &bits, sizeof v);
      src.push_back(v);
    }
  src.resize(src.size() - 5);
  return src;
}

TEST(Fp8CastTable, BulkScaledCastMatchesTheScalarConversionOnEveryHighHalf) {
  // Cast at three scales.
  const std::vector<float> src = every_high_half();
  for (DType dt : {DType::Float8_e4m3fn, DType::Float8_e5m2})
    for (float scale : {1.0f, 3.0f, std::ldexp(1.0f, -10)}) {
      const Fp8CastTable& cast = Fp8CastTable::of(dt);
      std::vector<uint8_t> dst(src.size());
      const float amax = cast.cast_scaled(src.data(), scale, dst.data(), static_cast<int64_t>(src.size()));
      float want_amax = 0.0f;
      for (size_t i = 0; i < src.size(); ++i) {
        const float v = src[i] * scale;
        const uint8_t want = dt == DType::Float8_e4m3fn ? float_to_e4m3fn_bits(v, Fp8Saturation::Finite)
                                                        : float_to_e5m2_bits(v, Fp8Saturation::Finite);
        ASSERT_EQ(dst[i], want) << dtype_name(dt) << " scale " << scale << " input bits " << std::hex
                                << std::bit_cast<uint32_t>(src[i]);
        ASSERT_EQ(cast(v), want);
        const float a = std::fabs(src[i]);
        want_amax = a > want_amax ? a : want_amax;
      }
      EXPECT_EQ(amax, want_amax);  // the largest finite float here: NaNs dropped, inf kept
    }
}

TEST(Fp8CastTable, ArithmeticCastWithWideningGivesTheTablesBitsOnEveryHighHalf) {
  // cast_scaled_widened (rounding on the bits, AVX-512) against cast_scaled and the BF16 table,
  // at scales that move values across the subnormal, normal and saturating ranges of both formats.
  const std::vector<float> src = every_high_half();
  for (DType dt : {DType::Float8_e4m3fn, DType::Float8_e5m2})
    for (float scale : {1.0f, 3.0f, std::ldexp(1.0f, -10), std::ldexp(1.0f, 20)}) {
      const Fp8CastTable& cast = Fp8CastTable::of(dt);
      const std::array<BFloat16, 256> table = fp8_to_bf16_table(dt);
      const int64_t n = static_cast<int64_t>(src.size());
      std::vector<uint8_t> want(src.size()), got(src.size());
      std::vector<BFloat16> wide(src.size());
      const float want_amax = cast.cast_scaled(src.data(), scale, want.data(), n);
      EXPECT_EQ(cast.cast_scaled_widened(src.data(), scale, got.data(), wide.data(), n), want_amax);
      for (size_t i = 0; i < src.size(); ++i) {
        ASSERT_EQ(got[i], want[i]) << dtype_name(dt) << " scale " << scale << " input bits " << std::hex
                                   << std::bit_cast<uint32_t>(src[i]);
        ASSERT_EQ(wide[i].bits, table[want[i]].bits) << dtype_name(dt) << " code " << int(want[i]);
      }
      // Without the codes (an operand nobody saves): the same widening and amax.
      std::vector<BFloat16> wide_only(src.size());
      EXPECT_EQ(cast.cast_scaled_widened(src.data(), scale, nullptr, wide_only.data(), n), want_amax);
      EXPECT_EQ(std::memcmp(wide_only.data(), wide.data(), wide.size() * sizeof(BFloat16)), 0);
    }
}

TEST(Fp8CastTable, Bf16SourceGivesTheBitsOfItsFloatValuesOnEveryPattern) {
  // The BF16 overload reads the 16-bit values in the register: every pattern (NaNs, infs,
  // subnormals), at scales across both formats' ranges, against the f32 form on the same values;
  // lengths that leave masked tails.
  std::vector<BFloat16> src(1 << 16);
  for (uint32_t b = 0; b < (1u << 16); ++b) src[b] = BFloat16::from_bits(static_cast<uint16_t>(b));
  std::vector<float> f(src.size());
  for (size_t i = 0; i < src.size(); ++i) f[i] = static_cast<float>(src[i]);
  for (DType dt : {DType::Float8_e4m3fn, DType::Float8_e5m2})
    for (float scale : {1.0f, 3.0f, std::ldexp(1.0f, -10), std::ldexp(1.0f, 20)})
      for (int64_t n : {int64_t{1 << 16}, int64_t{(1 << 16) - 5}, int64_t{13}}) {
        const Fp8CastTable& cast = Fp8CastTable::of(dt);
        std::vector<uint8_t> want(src.size()), got(src.size());
        std::vector<BFloat16> want_w(src.size()), got_w(src.size()), only_w(src.size());
        const float want_amax = cast.cast_scaled_widened(f.data(), scale, want.data(), want_w.data(), n);
        for (bool baseline : {false, true}) {  // the AVX-512 kernel where the CPU has it, and the f32 staging
          std::optional<cpu::Override> cap;
          if (baseline) cap.emplace(cpu::IsaLevel::Baseline);
          EXPECT_EQ(cast.cast_scaled_widened(src.data(), scale, got.data(), got_w.data(), n), want_amax);
          EXPECT_EQ(cast.cast_scaled_widened(src.data(), scale, nullptr, only_w.data(), n), want_amax);
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_EQ(got[i], want[i]) << dtype_name(dt) << " scale " << scale << " bf16 bits " << std::hex << i;
            ASSERT_EQ(got_w[i].bits, want_w[i].bits) << dtype_name(dt) << " scale " << scale << " bits " << std::hex << i;
            ASSERT_EQ(only_w[i].bits, want_w[i].bits) << dtype_name(dt) << " scale " << scale << " bits " << std::hex << i;
          }
        }
      }
}

TEST(Fp8CastTable, MxCastsApplyTheBlocksPowerOfTwoInTheirPassWithTheBitsOfTwoPasses) {
  // cast_lanes_widened with pow2s and cast_block_widened (MX blocks: the widening times 2^e in
  // the cast's pass) against the two passes they replace, written out here: the table's code of
  // v * 2^-e, and its BF16 widening times 2^e, truncated to BF16. Every BF16 pattern (NaNs, infs,
  // subnormals), f32 and BF16 sources, with and without codes, scales across the exact range of
  // block exponents [-110, 111], lengths with masked tails; both ISA levels.
  std::vector<BFloat16> src(1 << 16);
  for (uint32_t b = 0; b < (1u << 16); ++b) src[b] = BFloat16::from_bits(static_cast<uint16_t>(b));
  std::vector<float> f(src.size());
  for (size_t i = 0; i < src.size(); ++i) f[i] = static_cast<float>(src[i]);
  const int exps[] = {-110, -41, -3, 0, 7, 60, 111};
  std::vector<float> scales(src.size()), pow2s(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    const int e = exps[(i / 3) % std::size(exps)];
    scales[i] = std::ldexp(1.0f, -e);
    pow2s[i] = std::ldexp(1.0f, e);
  }
  const auto times = [](BFloat16 w, float p) {
    return static_cast<uint16_t>(std::bit_cast<uint32_t>(static_cast<float>(w) * p) >> 16);
  };
  for (DType dt : {DType::Float8_e4m3fn, DType::Float8_e5m2}) {
    const Fp8CastTable& cast = Fp8CastTable::of(dt);
    const std::array<BFloat16, 256> table = fp8_to_bf16_table(dt);
    for (int64_t n : {int64_t{1 << 16}, int64_t{(1 << 16) - 5}, int64_t{13}, int64_t{32}}) {
      std::vector<uint8_t> want(src.size()), got(src.size());
      std::vector<uint16_t> want_w(src.size());
      for (int64_t i = 0; i < n; ++i) {
        want[i] = cast(f[i] * scales[i]);
        want_w[i] = times(table[want[i]], pow2s[i]);
      }
      for (bool baseline : {false, true}) {
        std::optional<cpu::Override> cap;
        if (baseline) cap.emplace(cpu::IsaLevel::Baseline);
        for (bool codes : {true, false})
          for (bool bf16 : {false, true}) {
            std::vector<BFloat16> w(src.size());
            uint8_t* d = codes ? got.data() : nullptr;
            if (bf16) cast.cast_lanes_widened(src.data(), scales.data(), d, w.data(), n, pow2s.data());
            else cast.cast_lanes_widened(f.data(), scales.data(), d, w.data(), n, pow2s.data());
            for (int64_t i = 0; i < n; ++i) {
              if (codes) {
                ASSERT_EQ(got[i], want[i]) << dtype_name(dt) << " bits " << std::hex << i << " baseline " << baseline;
              }
              ASSERT_EQ(w[i].bits, want_w[i]) << dtype_name(dt) << " bits " << std::hex << i << " baseline " << baseline;
            }
            // One block's scale for the whole run (the contiguous-block form).
            for (int e : exps) {
              const float scale = std::ldexp(1.0f, -e), pow2 = std::ldexp(1.0f, e);
              if (bf16) cast.cast_block_widened(src.data(), scale, pow2, d, w.data(), n);
              else cast.cast_block_widened(f.data(), scale, pow2, d, w.data(), n);
              for (int64_t i = 0; i < n; ++i) {
                const uint8_t c = cast(f[i] * scale);
                if (codes) {
                  ASSERT_EQ(got[i], c) << dtype_name(dt) << " e " << e << " bits " << std::hex << i;
                }
                ASSERT_EQ(w[i].bits, times(table[c], pow2)) << dtype_name(dt) << " e " << e << " bits " << std::hex << i;
              }
            }
          }
      }
    }
  }
}

TEST(MxBlock, QuantizeWidenedGivesTheScalarBlocksAtBothIsaLevels) {
  // mx_quantize_widened against the blocks written out here (the amax of each block, its code,
  // the scalar saturating conversion of v * 2^-e, mx_widen of its value): f32 and BF16 sources,
  // contiguous blocks (inner 1; 1100: 16 blocks at a time, then one by one) and strided ones
  // (inner 3, 37, 288), a short tail block; zero blocks; amaxes at a rounding-up boundary; blocks
  // whose scales reach BF16's edges (values near 2^-130 and 2^120, where the widening is not the
  // plain product) and NaN / inf blocks; codes kept and not.
  Generator gen(11);
  for (const IntList& sizes :
       {IntList{3, 70, 1}, IntList{2, 1100, 1}, IntList{2, 40, 3}, IntList{1, 33, 37}, IntList{1, 64, 288}})
    for (DType src : {DType::Float32, DType::BFloat16}) {
      Tensor x32 = randn(sizes, {}, &gen) * 40.0;
      float* p = x32.data_ptr<float>();
      const int64_t numel = x32.numel();
      for (int64_t i = 0; i < numel; i += 97) p[i] *= 0x1p-130f;  // tiny blocks' scales near 2^-127
      for (int64_t i = 70; i < numel; i += 211) p[i] = 0x1p120f * (i % 2 ? 1.5f : -1.0f);  // scales near 2^112
      p[numel / 2] = std::numeric_limits<float>::quiet_NaN();
      p[numel / 3] = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < std::min<int64_t>(numel, 64); ++i) p[i] = 0x1p-133f * static_cast<float>(i % 5);
      for (int64_t i = 64; i < std::min<int64_t>(numel, 96); ++i) p[i] = i % 3 ? 0.0f : -0.0f;  // amax 0 (inner 1)
      for (int64_t i = 96; i < std::min<int64_t>(numel, 128); ++i) p[i] *= 0x1p-118f;  // scales near 2^-110
      // Blocks whose amax is 448 2^-3 (E4M3's largest times a power of two: rounding up keeps the
      // exponent) and the next BF16 value above it.
      for (int64_t i = 320; i < std::min<int64_t>(numel, 384); ++i) p[i] *= 0.01f;
      if (numel > 384) {
        p[330] = 56.0f;
        p[360] = -56.25f;
      }
      const Tensor x = x32.to(src);
      const auto xs = x.to(DType::Float32).to_vector<float>();
      const int64_t len = sizes[1], inner = sizes[2], nb = (len + 31) / 32;
      for (DType elem : {DType::Float8_e4m3fn, DType::Float8_e5m2}) {
        for (bool baseline : {false, true})
          for (int variant = 0; variant < 3; ++variant) {  // codes kept, not kept; the spec's scales
            const bool keep = variant != 1;
            MXFP8BlockScaling mx;
            if (variant == 2) mx.scale_rounding = MxScaleRounding::Spec;
            std::optional<cpu::Override> cap;
            if (baseline) cap.emplace(cpu::IsaLevel::Baseline);
            const Fp8Operand q = mx_quantize_widened(x, 1, elem, mx, "test", keep);
            const uint8_t* codes = q.block_scales.data_ptr<uint8_t>();
            const uint8_t* d = keep ? static_cast<const uint8_t*>(q.data.data_ptr()) : nullptr;
            const uint16_t* w = &q.widened.data_ptr<BFloat16>()->bits;
            for (int64_t o = 0; o < sizes[0]; ++o)
              for (int64_t b = 0; b < nb; ++b)
                for (int64_t i = 0; i < inner; ++i) {
                  float amax = 0.0f;
                  bool finite = true;
                  for (int64_t c = b * 32; c < std::min(len, b * 32 + 32); ++c) {
                    const float v = xs[static_cast<size_t>((o * len + c) * inner + i)];
                    finite = finite && std::isfinite(v);
                    amax = std::max(amax, std::fabs(v));
                  }
                  const uint8_t code = mx_scale_code(finite ? amax : NAN, elem, mx.scale_rounding);
                  ASSERT_EQ(codes[(o * nb + b) * inner + i], code) << "block " << b << " lane " << i;
                  for (int64_t c = b * 32; c < std::min(len, b * 32 + 32); ++c) {
                    const int64_t at = (o * len + c) * inner + i;
                    const float scaled = std::ldexp(xs[static_cast<size_t>(at)], 127 - code);
                    const uint8_t want = code == 0xFF                     ? uint8_t{0x7F}
                                         : elem == DType::Float8_e4m3fn ? float_to_e4m3fn_bits(scaled, Fp8Saturation::Finite)
                                                                         : float_to_e5m2_bits(scaled, Fp8Saturation::Finite);
                    if (keep) {
                      ASSERT_EQ(d[at], want) << dtype_name(elem) << ' ' << dtype_name(src) << " at " << at;
                    }
                    const float value = elem == DType::Float8_e4m3fn ? e4m3fn_bits_to_float(want) : e5m2_bits_to_float(want);
                    ASSERT_EQ(w[at], mx_widen(value, code == 0xFF ? NAN : std::ldexp(1.0f, code - 127)).bits)
                        << dtype_name(elem) << ' ' << dtype_name(src) << " at " << at << " code " << int(code)
                        << " baseline " << baseline;
                  }
                }
          }
      }
    }
}

TEST(MxBlock, Conv2dWeightGradientHasTheBitsOfTheRowMatrixRoute) {
  // MXFP8's conv2d wgrad on the transposed operands (G as (O, N OH OW), the input's im2col as
  // (C kH kW, N OH OW), blocks contiguous along N OH OW) against the route it replaced, written
  // out here: the row im2col matrix and G with its channels last, both blocked along dim 0, and
  // fp8_gemm(G, transposed, P). Every geometry (the plane-shift and row kernels' and the fallback's),
  // f32 and BF16 inputs, BF16 and f32 outputs, G with magnitudes spread over 2^-60 .. 2^40, every
  // BF16 GEMM path here, 1 and 2 threads.
  Generator gen(12);
  for (const Geometry& geo : kGeometries) {
    const ConvGeom g = geometry_of(geo);
    for (DType x_dt : {DType::Float32, DType::BFloat16})
      for (DType out_dt : {DType::BFloat16, DType::Float32}) {
        const Tensor x = randn({g.N, g.C, g.H, g.W}, {}, &gen).to(x_dt);
        const Tensor w0 = randn({g.O, g.C, g.kH, g.kW}, {}, &gen) * 0.2;
        Tensor gy = randn({g.N, g.O, g.OH, g.OW}, {}, &gen);
        float* gp = gy.data_ptr<float>();
        for (int64_t i = 0; i < gy.numel(); ++i) gp[i] = std::ldexp(gp[i], static_cast<int>((i / 40) % 101) - 60);
        gy = gy.to(out_dt);
        // The reference: the row matrices blocked along M.
        const Tensor xk = x_dt == DType::BFloat16 ? x : x.contiguous();
        const Tensor rows = x_dt == DType::BFloat16 ? im2col_bf16(xk, g) : im2col_f32(xk, g);
        const Tensor gm = gy.permute({0, 2, 3, 1}).contiguous().reshape({g.N * g.L(), g.O});
        for (cpu::Bf16GemmPath path : bf16_paths_here()) {
          cpu::Override on(path);
          // At each thread count (OpenBLAS, which runs the widened path's small GEMMs, does not
          // promise the same sums at every thread count; the native kernels do).
          const auto want = on_thread_counts({1, 2}, [&] {
            return fp8_gemm(mx_quantize(gm, 0, DType::Float8_e4m3fn, MXFP8BlockScaling{}, "t"), true,
                            mx_quantize(rows, 0, DType::Float8_e4m3fn, MXFP8BlockScaling{}, "t"), false, "t")
                .reshape({g.O, g.C, g.kH, g.kW});
          });
          const auto got = on_thread_counts({1, 2}, [&] {
            const Tensor w = w0.clone().requires_grad_();
            Tensor y;
            {
              Fp8Autocast fp8(MXFP8BlockScaling{}, nullptr, {out_dt});
              y = conv2d(x, w, Tensor(), geo.stride, geo.padding, geo.dilation);
            }
            y.backward(gy);
            return w.grad();
          });
          for (size_t t = 0; t < got.size(); ++t)
            EXPECT_TRUE(same_bits(got[t], want[t]))
                << "C=" << g.C << " H=" << g.H << " W=" << g.W << " stride " << geo.stride[1] << ' ' << dtype_name(x_dt)
                << " input, " << dtype_name(out_dt) << " output, path " << bf16_path_name(path) << ", thread count "
                << (t + 1);
        }
      }
  }
}

TEST(Fp8CastTable, ChannelSumsReadInTheCastsPassAreTheLaneOrderSumsAtEveryThreadCount) {
  // (N, C, L) rows of lengths with and without a 16-value tail; f32 and bf16 (where a tail's idle
  // lanes add +0); a NaN in one channel. The widening is quantize_per_tensor_widened's, the sums
  // the lane order written out here.
  for (int64_t L : {int64_t{13}, int64_t{16}, int64_t{49}, int64_t{784}})
    for (DType dt : {DType::Float32, DType::BFloat16}) {
      Generator gen(static_cast<uint64_t>(L));
      Tensor x = randn({40, 3, L}, {}, &gen);
      x.data_ptr<float>()[(1 * 3 + 2) * L + L / 2] = std::numeric_limits<float>::quiet_NaN();
      x = x.to(dt);
      const Tensor xf = x.to(DType::Float32);
      std::vector<float> want(3);
      for (int64_t c = 0; c < 3; ++c) {
        float lanes[16] = {};
        for (int64_t n = 0; n < 40; ++n)
          for (int64_t l = 0; l < L; ++l) lanes[l % 16] += xf.data_ptr<float>()[(n * 3 + c) * L + l];
        float t = 0.0f;
        for (float v : lanes) t += v;
        want[static_cast<size_t>(c)] = t;
      }
      float want_amax = 0.0f;
      const Fp8Operand plain = quantize_per_tensor_widened(x, DType::Float8_e5m2, 0.25f, &want_amax, false);
      const std::vector<Tensor> runs = ::mixtape::testing::on_thread_counts({1, 2}, [&] {
        Tensor sums;
        float amax = -1.0f;
        const Fp8Operand q = quantize_per_tensor_widened_channel_sums(x, DType::Float8_e5m2, 0.25f, &amax, &sums);
        EXPECT_EQ(amax, want_amax);
        EXPECT_FALSE(q.data.defined());
        EXPECT_EQ(q.scale_inv, plain.scale_inv);
        EXPECT_TRUE(same_bits(q.widened, plain.widened)) << "L " << L << ' ' << dtype_name(dt);
        return sums;
      });
      for (const Tensor& sums : runs)
        for (int64_t c = 0; c < 3; ++c)
          EXPECT_EQ(std::bit_cast<uint32_t>(sums.data_ptr<float>()[c]), std::bit_cast<uint32_t>(want[static_cast<size_t>(c)]))
              << "L " << L << ' ' << dtype_name(dt) << " channel " << c;
    }
}

TEST(Fp8Amax, VectorAndPlainLoopsGiveTheLargestMagnitudeWithNaNsDroppedOnEveryBf16Pattern) {
  // Every BF16 pattern once (NaNs, infs, subnormals, both zeros), then the same values without
  // the infs and NaNs, then a prefix with a tail; f32 as the BF16 values widened. Both ISA levels.
  std::vector<BFloat16> all(1 << 16);
  for (uint32_t b = 0; b < (1u << 16); ++b) all[b] = BFloat16::from_bits(static_cast<uint16_t>(b));
  std::vector<BFloat16> finite;
  for (const BFloat16& v : all)
    if (std::isfinite(static_cast<float>(v))) finite.push_back(v);
  for (const std::vector<BFloat16>* src : {&all, &finite})
    for (int64_t n : {static_cast<int64_t>(src->size()), int64_t{40001}, int64_t{7}, int64_t{0}}) {
      float want = 0.0f;
      for (int64_t i = 0; i < n; ++i) {
        const float a = std::fabs(static_cast<float>((*src)[static_cast<size_t>(i)]));
        want = a > want ? a : want;  // NaN compares false
      }
      std::vector<float> f(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) f[static_cast<size_t>(i)] = static_cast<float>((*src)[static_cast<size_t>(i)]);
      for (bool baseline : {false, true}) {
        std::optional<cpu::Override> cap;
        if (baseline) cap.emplace(cpu::IsaLevel::Baseline);
        EXPECT_EQ(amax_bf16(src->data(), n), want) << "n " << n << " baseline " << baseline;
        EXPECT_EQ(amax_f32(f.data(), n), want) << "n " << n << " baseline " << baseline;
      }
    }
  // amax_of over threads and dtypes: a tensor bigger than one chunk, its largest value last.
  Generator g(6);
  Tensor x = randn({3, 50001}, {}, &g);
  x.data_ptr<float>()[x.numel() - 1] = -1000.0f;
  x.data_ptr<float>()[17] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(amax_of(x), 1000.0f);
  EXPECT_EQ(amax_of(x.to(DType::BFloat16)), 1000.0f);
  EXPECT_EQ(amax_of(x.to(DType::Float16)), 1000.0f);
}

TEST(Fp8CastTable, BulkCastTailsAndAmaxDropNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> src = {nan, -3.5f, 0.0f, 1e-30f, -0.0f};
  for (int i = 0; i < 40; ++i) src.push_back(static_cast<float>(i % 7) - 3.25f);
  const Fp8CastTable& cast = Fp8CastTable::of(DType::Float8_e4m3fn);
  for (int64_t n = 0; n <= static_cast<int64_t>(src.size()); ++n) {
    std::vector<uint8_t> dst(src.size() + 1, 0xAB);
    const float amax = cast.cast_scaled(src.data(), 2.0f, dst.data(), n);
    float want = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(dst[i], float_to_e4m3fn_bits(src[i] * 2.0f, Fp8Saturation::Finite)) << "n " << n << " i " << i;
      want = std::fabs(src[i]) > want ? std::fabs(src[i]) : want;
    }
    EXPECT_EQ(dst[n], 0xAB) << "n " << n << ": wrote past the end";
    EXPECT_EQ(amax, want) << "n " << n;
  }
  // quantize_per_tensor's amax is amax_of's.
  Generator g(5);
  const Tensor x = randn({37, 1001}, {}, &g);
  float amax = -1.0f;
  quantize_per_tensor(x, DType::Float8_e5m2, 0.5f, &amax);
  EXPECT_EQ(amax, amax_of(x));
}

TEST(Fp8Conv2d, OnePassOutputHasTheBitsOfTheStepsApart) {
  // Current scaling, so the test can redo the casts: C = im2col(x) @ W^T from the FP8 GEMM,
  // then the bias, the move to NCHW and the cast to the output dtype, each as its own op.
  Generator gen(11);
  for (const Geometry& geo : kGeometries)
    for (DType out_dtype : {DType::BFloat16, DType::Float32})
      for (bool with_bias : {false, true}) {
        const ConvGeom g = geometry_of(geo);
        const Tensor x = randn({g.N, g.C, g.H, g.W}, {}, &gen), w = randn({g.O, g.C, g.kH, g.kW}, {}, &gen) * 0.3;
        const Tensor b = with_bias ? randn({g.O}, {}, &gen) : Tensor{};
        Tensor got;
        {
          Fp8Autocast fp8(CurrentScaling{}, nullptr, {.output_dtype = out_dtype});
          got = conv2d(x, w, b, geo.stride, geo.padding, geo.dilation);
        }
        auto cast = [](const Tensor& t, DType dt) {
          return quantize_per_tensor(t, dt, scale_from_amax(amax_of(t), fp8_max(dt), 0.0f, false, 1.0f));
        };
        Fp8Operand p = cast(x, DType::Float8_e4m3fn);
        p.widened = im2col_fp8_to_bf16(p.data, g);
        Tensor c = fp8_gemm(p, false, cast(w.reshape({g.O, g.K()}), DType::Float8_e4m3fn), true, "t");
        if (with_bias) c = c + b;
        const Tensor want = c.reshape({g.N, g.OH, g.OW, g.O}).permute({0, 3, 1, 2}).contiguous().to(out_dtype);
        EXPECT_EQ(got.dtype(), out_dtype);
        EXPECT_TRUE(same_bits(got, want)) << "C=" << g.C << " H=" << g.H << " sH=" << g.sH << " bias " << with_bias
                                          << " " << dtype_name(out_dtype);
      }
}

TEST(Fp8Im2col, Col2imHasTheBitsOfThePlainLoop) {
  Generator gen(13);
  for (const Geometry& geo : kGeometries) {
    const ConvGeom g = geometry_of(geo);
    const Tensor cols = randn({g.N * g.L(), g.K()}, {}, &gen);
    const Tensor got = col2im(cols, g);
    // Each pixel sums its windows' values in (oh, ow, i, j) order, every tap bounds-checked.
    std::vector<float> want(static_cast<size_t>(g.N * g.C * g.H * g.W), 0.0f);
    const float* src = cols.data_ptr<float>();
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t c = 0; c < g.C; ++c)
        for (int64_t oh = 0; oh < g.OH; ++oh)
          for (int64_t ow = 0; ow < g.OW; ++ow)
            for (int64_t i = 0; i < g.kH; ++i)
              for (int64_t j = 0; j < g.kW; ++j) {
                const int64_t h = oh * g.sH - g.pH + i * g.dH, w = ow * g.sW - g.pW + j * g.dW;
                if (h >= 0 && h < g.H && w >= 0 && w < g.W)
                  want[((n * g.C + c) * g.H + h) * g.W + w] +=
                      src[((n * g.OH + oh) * g.OW + ow) * g.K() + (c * g.kH + i) * g.kW + j];
              }
    ASSERT_EQ(std::memcmp(got.data_ptr<float>(), want.data(), want.size() * sizeof(float)), 0)
        << "C=" << g.C << " H=" << g.H << " sH=" << g.sH;
  }
}
