// tests/ops/test_batch_norm_avx512.cpp — batch norm's statistics order (ops/cpu/row_lane_sum.h)
// and its AVX-512 kernels (ops/cpu/batch_norm_avx512.h): each kernel equals the generic loop bit
// for bit — sums in RowLaneSum's 32 lanes (float partials flushed into f64 every 32 chunks), row
// maps as float multiply then add, BF16 rounded as core/bfloat16.h rounds — on every row length
// around the 32-lane and 16-value chunks, across flushes, on special values, and through the
// batch_norm op (f16 runs the generic loops, f32 and BF16 the kernels: 16-bit results must be the
// f32 ones rounded); the statistics' accuracy (a large mean, a tiny spread) and the f64 sums taken
// where a float partial overflows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/bfloat16.h"
#include "ops/cpu/batch_norm_avx512.h"
#include "ops/cpu/row_lane_sum.h"
#include "ops/creation.h"
#include "ops/normalization.h"
#include "ops/pointwise.h"
#include "ops/reduce.h"
#include "ops/threads.h"

namespace mixtape::testing {
namespace {

// Position s of a row goes to lane s % 32, whatever the pieces: lane 0 gets +-1e16 that cancel,
// every other value is 1 and sums exactly; another lane assignment loses ones next to 1e16.
TEST(RowLaneSum, LanesFollowThePositionInTheRowWhateverThePieces) {
  const int64_t S = 100, rows = 3;  // per row: 4 values in lane 0 (s = 0, 32, 64, 96)
  auto value = [](int64_t r, int64_t s) { return s % 32 != 0 ? 1.0 : ((r * 4 + s / 32) % 2 == 0 ? 1e16 : -1e16); };
  for (int64_t piece : {1, 5, 31, 32, 33, 100}) {
    cpu::RowLaneSum<double> sum;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t s0 = 0; s0 < S; s0 += piece) {
        const int64_t m = std::min(piece, S - s0);
        sum.add(m, [&](int64_t j) { return value(r, s0 + j); });
      }
      sum.end_row();
    }
    EXPECT_EQ(sum.total(), 3.0 * 96) << "pieces of " << piece;
  }
}

TEST(RowLaneSum, TotalIsTheHalvingTree) {
  cpu::RowLaneSum<double> sum;
  // Lane i gets 2^(i * 3) scaled so that a different association would round differently.
  for (int i = 0; i < 32; ++i) sum.lane[i] = std::ldexp(1.0 + i * 1e-16, (i % 5) * 30) * (i % 2 ? -1 : 1);
  double t[32];
  for (int i = 0; i < 32; ++i) t[i] = sum.lane[i];
  for (int w = 16; w >= 1; w /= 2)
    for (int i = 0; i < w; ++i) t[i] += t[i + w];
  EXPECT_EQ(sum.total(), t[0]);
}

// The float partials go into the f64 lanes after every 32 chunks, counted across rows (a row's
// short last chunk counts as one): lane 0 gets 2^24 and then ones. The ones of chunks 2..32 are
// lost in the float partial that holds 2^24 (2^24 + 1 rounds back to 2^24); from chunk 33 on the
// partial starts again from zero and keeps them. Rows of 33 values (two chunks each) flush at the
// same count.
TEST(RowLaneSum, FloatPartialsFlushEvery32Chunks) {
  for (int64_t S : {32, 33}) {
    SCOPED_TRACE(::testing::Message() << "S " << S);
    const int64_t rows = 64 / ((S + 31) / 32);  // 64 chunks: two flushes
    cpu::RowLaneSum<float> sum;
    int64_t chunk = 0, kept = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t s0 = 0; s0 < S; s0 += 32, ++chunk) {
        const float v = chunk == 0 ? 0x1p24f : 1.0f;
        if (chunk >= 32) ++kept;
        sum.add(std::min<int64_t>(32, S - s0), [&](int64_t j) { return j == 0 ? v : 0.0f; });
      }
      sum.end_row();
    }
    // Every later block of 32 chunks sums its 32 ones exactly.
    EXPECT_EQ(sum.total(), 0x1p24 + double(kept));
  }
}

template <typename T>
T from_float(float f) {
  if constexpr (std::is_same_v<T, BFloat16>) return BFloat16(f);
  else return f;
}
double widen(float v) { return v; }
double widen(BFloat16 v) { return static_cast<float>(v); }
uint32_t bits_of(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}
uint32_t bits_of(BFloat16 v) { return v.bits; }
uint64_t bits_of(double v) {
  uint64_t u;
  std::memcpy(&u, &v, 8);
  return u;
}
// Equal bits, or both NaN: when two different NaNs meet in an add, which payload survives is the
// operand order the compiler picked for the generic loop's commutative add, not part of the contract.
bool same(double a, double b) { return (std::isnan(a) && std::isnan(b)) || bits_of(a) == bits_of(b); }
template <typename T>
bool same_t(T a, T b) {
  return (std::isnan(widen(a)) && std::isnan(widen(b))) || bits_of(a) == bits_of(b);
}
bool bit_equal(const Tensor& a, const Tensor& b) {
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.dtype() == cb.dtype() && ca.sizes() == cb.sizes() &&
         std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

// rows x stride values: random over 40 binades (so an f64 sum depends on its order), with
// specials sprinkled in when `specials` (NaN only when `nan`).
template <typename T>
std::vector<T> make_rows(int64_t rows, int64_t stride, uint32_t seed, bool specials, bool nan = true) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.5f, 3.0f);
  std::uniform_int_distribution<int> binade(-20, 20);
  std::vector<T> v(static_cast<size_t>(rows * stride));
  for (auto& e : v) e = from_float<T>(std::ldexp(nd(gen), binade(gen)));
  if (specials) {
    const float sp[] = {-0.0f, 1e-40f, -3e-39f, 3.0e38f, std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN()};
    const size_t kinds = nan ? 6 : 3;  // without NaN: no inf either, so the sums stay finite
    for (size_t i = 3; i < v.size(); i += 37) v[i] = from_float<T>(sp[(i / 37) % kinds]);
  }
  return v;
}

// The generic loop's sums with float terms, as ops/normalization.cpp takes them.
template <typename T, typename F>
double generic_sum(const std::vector<T>& x, int64_t rows, int64_t stride, int64_t S, F&& term) {
  cpu::RowLaneSum<float> s;
  for (int64_t r = 0; r < rows; ++r) {
    s.add(S, [&](int64_t j) { return term(static_cast<float>(widen(x[static_cast<size_t>(r * stride + j)])), r, j); });
    s.end_row();
  }
  return s.total();
}

template <typename T>
class BnAvx512 : public ::testing::Test {};
using Types = ::testing::Types<float, BFloat16>;
TYPED_TEST_SUITE(BnAvx512, Types);

TYPED_TEST(BnAvx512, SumsEqualTheGenericLoopBitForBit) {
  using T = TypeParam;
  if (!cpu::batch_norm_avx512_available()) GTEST_SKIP() << "this CPU has no AVX-512 F/BW/VL";
  for (bool specials : {false, true})
    for (int64_t S : {1, 7, 16, 31, 32, 33, 49, 63, 64, 65, 100, 196, 784}) {
      SCOPED_TRACE(::testing::Message() << "S " << S << (specials ? " with specials" : ""));
      // A gap between rows, as between channels; 40 rows: at least 40 chunks, so the partials
      // flush at least once.
      const int64_t rows = 40, stride = S + 3;
      // Finite specials (-0, subnormals).
      const auto x = make_rows<T>(rows, stride, static_cast<uint32_t>(S), specials, false);
      const auto g = make_rows<T>(rows, stride, static_cast<uint32_t>(S + 1000), specials, false);
      const float k = 0.37f;
      EXPECT_TRUE(same(cpu::bn_sum_avx512(x.data(), rows, stride, S),
                       generic_sum(x, rows, stride, S, [](float v, int64_t, int64_t) { return v; })));
      double sd = 0, sd2 = 0;
      cpu::bn_dev_sums_avx512(x.data(), rows, stride, S, k, &sd, &sd2);
      EXPECT_TRUE(same(sd, generic_sum(x, rows, stride, S, [k](float v, int64_t, int64_t) { return v - k; })));
      EXPECT_TRUE(same(sd2, generic_sum(x, rows, stride, S, [k](float v, int64_t, int64_t) {
                         const float d = v - k;
                         return d * d;
                       })));
      double sg = 0, sgd = 0;
      cpu::bn_grad_sums_avx512(g.data(), x.data(), rows, stride, S, k, &sg, &sgd);
      const auto at = [&](const std::vector<T>& v, int64_t r, int64_t j) {
        return static_cast<float>(widen(v[static_cast<size_t>(r * stride + j)]));
      };
      EXPECT_TRUE(same(sg, generic_sum(g, rows, stride, S, [](float v, int64_t, int64_t) { return v; })));
      EXPECT_TRUE(same(sgd, generic_sum(g, rows, stride, S,
                                        [&](float v, int64_t r, int64_t j) { return v * (at(x, r, j) - k); })));
      if (!specials) {
        EXPECT_FALSE(std::isnan(sg) || std::isnan(sgd) || std::isnan(sd2));  // numbers compared
      }
    }
}

TYPED_TEST(BnAvx512, RowMapsEqualTheGenericLoopBitForBit) {
  using T = TypeParam;
  if (!cpu::batch_norm_avx512_available()) GTEST_SKIP() << "this CPU has no AVX-512 F/BW/VL";
  const float a = 1.2345678f, b = -0.3f, bx = -0.7654321f, d = 0.0123f;
  for (int64_t n : {1, 15, 16, 17, 33, 49, 100}) {
    SCOPED_TRACE(::testing::Message() << "n " << n);
    auto x = make_rows<T>(1, n, static_cast<uint32_t>(n), true);
    auto g = make_rows<T>(1, n, static_cast<uint32_t>(n + 7), true);
    // A NaN input (signalling in f32: the map must return it quiet).
    if (n > 2) {
      x[0] = from_float<T>(1.0f);
      const uint32_t payload = 0x7F800001u;  // a signalling NaN: must come back quiet
      float f;
      std::memcpy(&f, &payload, 4);
      x[1] = from_float<T>(f);
    }
    std::vector<T> out(static_cast<size_t>(n) + 1, from_float<T>(42.0f)), gout = out;
    cpu::bn_affine_row_avx512(x.data(), n, a, b, out.data());
    cpu::bn_grad_row_avx512(g.data(), x.data(), n, a, bx, d, gout.data());
    for (int64_t i = 0; i < n; ++i) {
      const float xv = static_cast<float>(widen(x[static_cast<size_t>(i)]));
      const float gv = static_cast<float>(widen(g[static_cast<size_t>(i)]));
      // Each product and sum rounded on its own (volatile: no FMA contraction, whatever -march).
      volatile float xa = xv * a, ag = a * gv, bxx = bx * xv;
      volatile float agbx = ag + bxx;
      const float e = xa + b, eg = agbx + d;
      EXPECT_TRUE(same_t(out[static_cast<size_t>(i)], from_float<T>(e))) << "affine at " << i;
      EXPECT_TRUE(same_t(gout[static_cast<size_t>(i)], from_float<T>(eg))) << "grad at " << i;
      if (std::isnan(e)) {
        EXPECT_EQ(bits_of(out[static_cast<size_t>(i)]), bits_of(from_float<T>(e))) << "NaN at " << i;
      }
    }
    EXPECT_EQ(bits_of(out[static_cast<size_t>(n)]), bits_of(from_float<T>(42.0f))) << "wrote past the row";
    EXPECT_EQ(bits_of(gout[static_cast<size_t>(n)]), bits_of(from_float<T>(42.0f))) << "wrote past the row";
  }
}

// x a + b landing exactly halfway between two BF16 values: ties go to the even one (a
// round-half-up would give 1 for the first and 1 + 2^-7 for the second).
TEST(BnAvx512Bf16, RoundingTiesGoToEven) {
  if (!cpu::batch_norm_avx512_available()) GTEST_SKIP() << "this CPU has no AVX-512 F/BW/VL";
  const float b = std::ldexp(1.0f, -8);
  const std::vector<BFloat16> x(20, BFloat16(1.0f)), x2(20, BFloat16(1.0f + std::ldexp(1.0f, -7)));
  std::vector<BFloat16> out(20), out2(20), gout(20);
  cpu::bn_affine_row_avx512(x.data(), 20, 1.0f, b, out.data());     // 1 + 2^-8 -> 1
  cpu::bn_affine_row_avx512(x2.data(), 20, 1.0f, b, out2.data());   // 1 + 2^-7 + 2^-8 -> 1 + 2^-6
  cpu::bn_grad_row_avx512(x.data(), x.data(), 20, 1.0f, 0.0f, b, gout.data());  // (1 + 0) + 2^-8 -> 1
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(out[static_cast<size_t>(i)].bits, BFloat16(1.0f).bits) << i;
    EXPECT_EQ(out2[static_cast<size_t>(i)].bits, BFloat16(1.0f + std::ldexp(1.0f, -6)).bits) << i;
    EXPECT_EQ(gout[static_cast<size_t>(i)].bits, BFloat16(1.0f).bits) << i;
  }
}

// Through the op: f16 runs the generic loops, f32 and BF16 the kernels (where the CPU has
// AVX-512); the 16-bit outputs and gradients must be the f32 ones rounded, the statistics equal.
TEST(BnAvx512Op, GenericAndKernelPathsAgreeThroughTheOp) {
  for (const IntList& shape : {IntList{6, 3, 7, 7}, IntList{4, 2, 33}, IntList{3, 2, 28, 28}}) {
    SCOPED_TRACE(shape_str(shape));
    Generator gen(7);
    Tensor base = randn(shape, {}, &gen) * 2.0 + 0.5;
    Tensor gout = randn(shape, {}, &gen);
    for (DType dt : {DType::Float16, DType::BFloat16}) {
      Tensor x16 = base.to(dt);
      Tensor x32 = x16.to(DType::Float32);
      Tensor g16 = gout.to(dt);
      Tensor w16 = tensor({1.5, -0.5, 2.0}).narrow(0, 0, shape[1]).contiguous().requires_grad_();
      Tensor w32 = w16.detach().clone().requires_grad_();
      Tensor rm16 = zeros({shape[1]}), rv16 = ones({shape[1]}), rm32 = zeros({shape[1]}), rv32 = ones({shape[1]});
      Tensor xg16 = x16.detach().requires_grad_(), xg32 = x32.detach().requires_grad_();
      Tensor y16 = batch_norm(xg16, rm16, rv16, w16, Tensor(), true);
      Tensor y32 = batch_norm(xg32, rm32, rv32, w32, Tensor(), true);
      EXPECT_TRUE(bit_equal(y16, y32.to(dt))) << dtype_name(dt);
      EXPECT_TRUE(bit_equal(rm16, rm32) && bit_equal(rv16, rv32)) << dtype_name(dt) << " running statistics";
      (y16 * g16).sum().backward();
      (y32 * g16.to(DType::Float32)).sum().backward();
      EXPECT_TRUE(bit_equal(xg16.grad(), xg32.grad().to(dt))) << dtype_name(dt) << " grad x";
      EXPECT_TRUE(bit_equal(w16.grad(), w32.grad())) << dtype_name(dt) << " grad weight";
    }
  }
}

// The batch's mean and biased variance of channel c of an (N, C, S) f32 tensor, in f64 from
// the f32 values, two passes (the reference the op's float partials are held to).
std::pair<double, double> f64_moments(const Tensor& x, int64_t c) {
  const Tensor xc = x.contiguous();
  const int64_t N = x.size(0), C = x.size(1), S = x.numel() / (N * C);
  const float* p = static_cast<const float*>(xc.data_ptr());
  double s = 0, q = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < S; ++i) s += p[(n * C + c) * S + i];
  const double mean = s / double(N * S);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < S; ++i) q += (p[(n * C + c) * S + i] - mean) * (p[(n * C + c) * S + i] - mean);
  return {mean, q / double(N * S)};
}

// The statistics the op computes (momentum 1 writes them into f64 running statistics; the
// unbiased variance is scaled back to the biased one).
std::pair<std::vector<double>, std::vector<double>> op_moments(const Tensor& x) {
  const int64_t C = x.size(1), M = x.numel() / C;
  Tensor rm = zeros({C}, TensorOptions(DType::Float64)), rv = ones({C}, TensorOptions(DType::Float64));
  batch_norm(x, rm, rv, Tensor(), Tensor(), true, 1.0, 1e-5);
  std::vector<double> mean = rm.to_vector<double>(), var = rv.to_vector<double>();
  for (double& v : var) v = v * double(M - 1) / double(M);
  return {mean, var};
}

// Float partials hold at most 32 terms and the second pass sums deviations from the first pass's
// estimate, so the statistics stay within a few dozen f32 roundings of the f64 ones: the variance
// relative 64 2^-24 (31 roundings in a partial, one for a square, the rest margin), the mean within
// 64 2^-24 of the values' spread. A mean of 1e4 with a spread of 1e-3 (the f32 values 2^-10 apart)
// is a hard case: float partials of ~3e5 round to 2^-5, so the first pass's estimate loses the
// noise, and the variance about it would be off by ~1e-4 relative; the corrected formula cancels
// the estimate's error. Values of ~1e-22 are another: their squares are f32 subnormals, which
// keep few bits, so the channel is summed in f64 (sum d^2 < M 2^-100).
TEST(BnStatistics, FloatPartialsStayWithinAFewDozenRoundingsOfF64) {
  std::mt19937 gen(5);
  std::uniform_real_distribution<double> noise(-1.0, 1.0);
  std::normal_distribution<double> normal(0.5, 3.0);
  const IntList shape{8, 3, 33, 31};
  for (int kind : {0, 1, 2}) {
    SCOPED_TRACE(kind == 0 ? "normal(0.5, 3)" : kind == 1 ? "mean 1e4, spread 1e-3" : "normal(0.5, 3) x 1e-22");
    Tensor x = Tensor::empty(shape, TensorOptions(DType::Float32));
    float* p = static_cast<float*>(x.data_ptr());
    for (int64_t i = 0; i < x.numel(); ++i)
      p[i] = static_cast<float>(kind == 0 ? normal(gen) : kind == 1 ? 1e4 + 1e-3 * noise(gen) : 1e-22 * normal(gen));
    const auto [mean, var] = op_moments(x);
    for (int64_t c = 0; c < shape[1]; ++c) {
      const auto [m64, v64] = f64_moments(x, c);
      const double spread = std::sqrt(v64) * 4;
      EXPECT_NEAR(mean[static_cast<size_t>(c)], m64, 64 * 0x1p-24 * spread + 4 * 0x1p-53 * std::fabs(m64)) << c;
      EXPECT_NEAR(var[static_cast<size_t>(c)], v64, 64 * 0x1p-24 * v64) << c;
    }
  }
}

// Where a float partial overflows (values near 3e38: their squares, and sums of a few of them) or
// the data holds inf, the channel is summed again in f64: the statistics are the f64 ones, finite
// where f64's are, and the output is the normalised values, not NaN. The backward's sums likewise.
TEST(BnStatistics, OverflowingFloatPartialsAreSummedAgainInF64) {
  for (DType dt : {DType::Float32, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    Generator gen(3);
    Tensor x = (randn({4, 2, 5, 7}, {}, &gen) * 1e37).to(dt);  // |x| up to ~3e38
    set_element(x, 3, 3.0e38);
    set_element(x, 70 + 5, -3.0e38);
    const Tensor xf = x.to(DType::Float32);
    const auto [mean, var] = op_moments(x);
    for (int64_t c = 0; c < 2; ++c) {
      const auto [m64, v64] = f64_moments(xf, c);
      ASSERT_TRUE(std::isfinite(v64));
      EXPECT_NEAR(mean[static_cast<size_t>(c)], m64, 1e-12 * std::sqrt(v64)) << c;
      EXPECT_NEAR(var[static_cast<size_t>(c)], v64, 1e-12 * v64) << c;
    }
    const Tensor y = batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true).to(DType::Float32);
    EXPECT_TRUE(std::isfinite(y.abs().flatten().amax(0).item<double>()));
    EXPECT_LT(y.abs().flatten().amax(0).item<double>(), 10.0);

    // Backward: g of the same size, so sum g (x - mean) overflows a float partial.
    const Tensor g = (randn({4, 2, 5, 7}, {}, &gen) * 1e37).to(dt);
    const Tensor save_mean = tensor({mean[0], mean[1]}), save_invstd = tensor({1 / std::sqrt(var[0]), 1 / std::sqrt(var[1])});
    const auto [gx, gsum_gxhat, gsum_g] = batch_norm_backward(g, x, Tensor(), save_mean, save_invstd, true, 1e-5);
    const Tensor gf = g.to(DType::Float32).contiguous();
    const float* pg = static_cast<const float*>(gf.data_ptr());
    const float* px = static_cast<const float*>(xf.contiguous().data_ptr());
    for (int64_t c = 0; c < 2; ++c) {
      double sg = 0, sgx = 0, abs_g = 0, abs_gx = 0;
      for (int64_t n = 0; n < 4; ++n)
        for (int64_t i = 0; i < 35; ++i) {
          const int64_t o = (n * 2 + c) * 35 + i;
          const double t = double(pg[o]) * (double(px[o]) - get_element(save_mean, c));
          sg += pg[o], abs_g += std::fabs(pg[o]);
          sgx += t, abs_gx += std::fabs(t);
        }
      ASSERT_TRUE(std::isfinite(abs_gx));
      EXPECT_GT(abs_gx, 1e60);  // float products g (x - mean) would overflow
      const double is = get_element(save_invstd, c);
      // f64 sums in another order, rounded to f32 (the op's sums are f32 outputs).
      EXPECT_NEAR(get_element(gsum_g, c), sg, 1e-12 * abs_g + 0x1p-23 * std::fabs(sg)) << c;
      EXPECT_NEAR(get_element(gsum_gxhat, c), sgx * is, (1e-12 * abs_gx + 0x1p-23 * std::fabs(sgx)) * is) << c;
    }
    EXPECT_TRUE(std::isfinite(gx.to(DType::Float32).abs().flatten().amax(0).item<double>()));
  }
}

// The backward's products g (x - mean) below 2^-126 are f32 subnormals that keep few bits: with
// gradients of ~1e-28 against deviations of ~1e-15 (products ~1e-43) the sums are taken again in
// f64. invstd 1e15 (the deviations' scale) brings sum g xhat back to f32's normal range, where
// the f64 reference's digits show.
TEST(BnStatistics, UnderflowingGradientProductsAreSummedAgainInF64) {
  Generator gen(9);
  const Tensor x = randn({4, 2, 9, 9}, {}, &gen) * 1e-15, g = randn({4, 2, 9, 9}, {}, &gen) * 1e-28;
  const double invstd = 1e15;
  const Tensor save_mean = zeros({2}), save_invstd = full({2}, invstd);
  const auto [gx, sum_gxhat, sum_g] = batch_norm_backward(g, x, Tensor(), save_mean, save_invstd, true, 1e-5);
  const float* pg = static_cast<const float*>(g.data_ptr());
  const float* px = static_cast<const float*>(x.data_ptr());
  for (int64_t c = 0; c < 2; ++c) {
    double sgx = 0, abs_gx = 0;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t i = 0; i < 81; ++i) {
        const int64_t o = (n * 2 + c) * 81 + i;
        sgx += double(pg[o]) * double(px[o]);
        abs_gx += std::fabs(double(pg[o]) * double(px[o]));
      }
    ASSERT_LT(abs_gx / 324, 0x1p-126);  // the float products would be subnormal
    const double want = sgx * double(static_cast<float>(invstd));
    EXPECT_NEAR(get_element(sum_gxhat, c), want, 1e-6 * abs_gx * invstd) << c;
  }
}

// The op's two orders — channel at a time (a thread's channels read once for the statistics and
// re-read from cache for the elementwise pass) and statistics-then-rows — give the same bits:
// one thread always goes channel at a time; 3 threads on 4 channels take the other order.
TEST(BnOrder, ChannelAtATimeAndTwoPassOrdersGiveTheSameBits) {
  const int threads = get_num_threads();
  for (DType dt : {DType::Float32, DType::BFloat16, DType::Float16, DType::Float64}) {
    for (const IntList& shape : {IntList{8, 4, 33, 33}, IntList{4, 9, 31, 32}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + shape_str(shape));
      Generator gen(11);
      const Tensor x = (randn(shape, {}, &gen) * 3.0 + 1.0).to(dt), g = randn(shape, {}, &gen).to(dt);
      const Tensor w = rand({shape[1]}, {}, &gen) + 0.5, b = randn({shape[1]}, {}, &gen);
      // Any statistics will do for the backward's order (not the batch's own: bits are the point).
      const Tensor mean = randn({shape[1]}, {}, &gen), invstd = rand({shape[1]}, {}, &gen) + 0.5;
      std::vector<TensorList> runs;
      for (int t : {1, 2, 3, 4}) {
        set_num_threads(t);
        Tensor rm = zeros({shape[1]}), rv = ones({shape[1]});
        const Tensor y = batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5);
        const auto [gx, gw, gb] = batch_norm_backward(g, x, w, mean, invstd, true, 1e-5);
        runs.push_back({y, rm, rv, gx, gw, gb});
      }
      set_num_threads(threads);
      for (size_t r = 1; r < runs.size(); ++r)
        for (size_t i = 0; i < runs[0].size(); ++i)
          EXPECT_TRUE(bit_equal(runs[r][i], runs[0][i])) << "threads " << r + 1 << ", output " << i;
    }
  }
}

}  // namespace
}  // namespace mixtape::testing
