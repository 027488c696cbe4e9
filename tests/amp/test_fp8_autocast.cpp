// tests/amp/test_fp8_autocast.cpp — amp::Fp8Autocast on the CPU (docs/FP8.md): the FP8 GEMM
// against an f64 reference of the decoded FP8 operands (bit-exact where FP32 accumulation is
// exact, within FP32 summation error otherwise), linear's three GEMMs under current, delayed and
// MXFP8 scaling against hand-built references of the quantized math, the straight-through
// gradients against finite differences, the BF16-autocast rules for every other op, and the
// refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "common/error_of.h"
#include "common/bf16_paths_here.h"
#include "common/bit_equal.h"
#include "mixtape/mixtape.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/steering.h"

namespace mixtape::testing {
namespace {
using ::mixtape::testing::bf16_paths_here;

using namespace mixtape::amp;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

Tensor rnd(const IntList& sizes, uint64_t seed, double mul = 1.0) {
  Generator g(seed);
  return randn(sizes, {}, &g) * mul;
}

// A 2-D operand's real values in f64 (exact: decode, times a power of two or scale_inv).
struct Mat {
  int64_t r, c;
  std::vector<double> v;
  double at(int64_t i, int64_t j) const { return v[i * c + j]; }
};
Mat values(const Fp8Operand& q, bool unscaled = false) {
  Fp8Operand u = q;
  if (unscaled) u.scale_inv = 1.0f;
  return {q.data.size(0), q.data.size(1), dequantize(u).to_vector<double>()};
}
Mat transposed(const Mat& m) {
  Mat t{m.c, m.r, std::vector<double>(m.v.size())};
  for (int64_t i = 0; i < m.r; ++i)
    for (int64_t j = 0; j < m.c; ++j) t.v[j * m.r + i] = m.at(i, j);
  return t;
}
// a @ b in f64 and, for the error bound, |a| @ |b|.
std::pair<Mat, Mat> product(const Mat& a, const Mat& b) {
  EXPECT_EQ(a.c, b.r);
  Mat p{a.r, b.c, std::vector<double>(a.r * b.c)}, abs = p;
  for (int64_t i = 0; i < a.r; ++i)
    for (int64_t j = 0; j < b.c; ++j)
      for (int64_t k = 0; k < a.c; ++k) {
        p.v[i * b.c + j] += a.at(i, k) * b.at(k, j);
        abs.v[i * b.c + j] += std::fabs(a.at(i, k) * b.at(k, j));
      }
  return {p, abs};
}
// got (any float dtype) against ref * factor + bias within FP32 summation error over k terms
// (docs/CPU.md's BF16 GEMM contract) and one rounding to the output dtype (rel_out).
::testing::AssertionResult near_product(const Tensor& got, const std::pair<Mat, Mat>& ref, double factor,
                                        int64_t k, double rel_out, const std::vector<double>& bias = {}) {
  const auto g = got.contiguous().to_vector<double>();
  if (g.size() != ref.first.v.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < g.size(); ++i) {
    const double b = bias.empty() ? 0.0 : bias[i % bias.size()];
    const double want = ref.first.v[i] * factor + b;
    const double tol = (k + 3) * std::ldexp(1.0, -24) * (ref.second.v[i] * std::fabs(factor) + std::fabs(b)) +
                       rel_out * std::fabs(want) + 1e-30;
    if (!(std::fabs(g[i] - want) <= tol))
      return ::testing::AssertionFailure() << "[" << i << "] got " << g[i] << " want " << want << " tol " << tol;
  }
  return ::testing::AssertionSuccess();
}

Fp8Operand current_cast(const Tensor& t, DType dt) {
  return quantize_per_tensor(t, dt, scale_from_amax(amax_of(t), fp8_max(dt), 0.0f, false, 1.0f));
}

// ---- the FP8 GEMM ----

TEST(Fp8Gemm, BitExactAgainstTheF64ProductOfDecodedFp8WhenAccumulationIsExact) {
  // Integers in [-16, 16] are E4M3 values; 12 products of at most 256 sum exactly in FP32, so
  // the only rounding left is the one multiply by the f32 factor scale_inv_a * scale_inv_b.
  std::vector<double> av(5 * 12), bv(12 * 7);
  for (size_t i = 0; i < av.size(); ++i) av[i] = double((i * 7) % 33) - 16.0;
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = double((i * 5 + 3) % 33) - 16.0;
  const Tensor a = tensor(av, {5, 12}), b = tensor(bv, {12, 7});
  for (cpu::Bf16GemmPath kernel : bf16_paths_here())
  for (bool transposed : {false, true}) {
    cpu::Override on(kernel);
    Fp8Operand qa = quantize_per_tensor(transposed ? a.t().contiguous() : a, DType::Float8_e4m3fn, 1.0f);
    Fp8Operand qb = quantize_per_tensor(transposed ? b.t().contiguous() : b, DType::Float8_e4m3fn, 1.0f);
    qa.scale_inv = 0.3f;
    qb.scale_inv = 1.7f;
    const float factor = 0.3f * 1.7f;
    const Tensor c = fp8_gemm(qa, transposed, qb, transposed, "test");
    ASSERT_EQ(c.sizes(), (IntList{5, 7}));
    const auto got = c.to_vector<float>();
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j < 7; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < 12; ++k) acc += av[i * 12 + k] * bv[k * 7 + j];
        const float want = static_cast<float>(acc) * factor;
        ASSERT_EQ(std::memcmp(&got[i * 7 + j], &want, 4), 0)
            << i << "," << j << " got " << got[i * 7 + j] << " on " << cpu::bf16_gemm_description();
      }
  }
}

TEST(Fp8Gemm, AccumulatesInFp32) {
  // 4096 products of 1: a BF16 accumulator would stop at 256; FP32 counts them all.
  Fp8Operand ones = quantize_per_tensor(full({1, 4096}, 1.0), DType::Float8_e4m3fn, 1.0f);
  Fp8Operand col = quantize_per_tensor(full({4096, 1}, 1.0), DType::Float8_e5m2, 1.0f);
  for (cpu::Bf16GemmPath kernel : bf16_paths_here()) {
    cpu::Override on(kernel);
    EXPECT_EQ(fp8_gemm(ones, false, col, false, "test").item<float>(), 4096.0f) << cpu::bf16_gemm_description();
  }
}

TEST(Fp8Gemm, RandomOperandsWithinFp32SummationErrorOfTheF64Reference) {
  const Tensor a = rnd({9, 300}, 1, 5.0), b = rnd({300, 11}, 2, 0.1);
  const Fp8Operand qa = current_cast(a, DType::Float8_e4m3fn), qb = current_cast(b, DType::Float8_e5m2);
  const float factor = qa.scale_inv * qb.scale_inv;
  const auto ref = product(values(qa, true), values(qb, true));
  for (cpu::Bf16GemmPath kernel : bf16_paths_here()) {
    cpu::Override on(kernel);
    EXPECT_TRUE(near_product(fp8_gemm(qa, false, qb, false, "test"), ref, factor, 300, 0.0)) << cpu::bf16_gemm_description();
  }
}

// ---- linear under Fp8Autocast ----

struct Layer {
  Tensor x, w, b;
  std::vector<std::pair<std::string, Tensor>> named() const { return {{"fc.weight", w}, {"fc.bias", b}}; }
};
Layer layer(uint64_t seed, int64_t m = 6, int64_t k = 40, int64_t n = 5, double xmul = 3.0) {
  return {rnd({m, k}, seed, xmul).requires_grad_(), rnd({n, k}, seed + 1, 0.2).requires_grad_(),
          rnd({n}, seed + 2, 0.5).requires_grad_()};
}

TEST(Fp8Autocast, LinearForwardIsTheQuantizedProductScaledOnceWithFp32Accumulation) {
  const Layer L = layer(10);
  Tensor y32, y16;
  {
    Fp8Autocast fp8(CurrentScaling{}, nullptr, {DType::Float32});
    EXPECT_TRUE(is_fp8_autocast_enabled());
    y32 = linear(L.x, L.w, L.b);
  }
  {
    Fp8Autocast fp8(CurrentScaling{});  // output BF16 by default
    y16 = linear(L.x, L.w, L.b);
  }
  EXPECT_FALSE(is_fp8_autocast_enabled());
  ASSERT_EQ(y32.dtype(), DType::Float32);
  ASSERT_EQ(y16.dtype(), DType::BFloat16);
  const Fp8Operand qx = current_cast(L.x.detach(), DType::Float8_e4m3fn);
  const Fp8Operand qw = current_cast(L.w.detach(), DType::Float8_e4m3fn);
  EXPECT_TRUE(near_product(y32, product(values(qx, true), transposed(values(qw, true))), qx.scale_inv * qw.scale_inv,
                           40, 0.0, L.b.to_vector<double>()));
  // BF16 output: the same f32 result, rounded once.
  EXPECT_EQ(y16.to_vector<float>(), y32.to(DType::BFloat16).to_vector<float>());
  // And the quantization shows: not the f32 layer's numbers, but within E4M3's precision of them.
  const auto ref = linear(L.x, L.w, L.b).to_vector<double>(), got = y32.to_vector<double>();
  double err = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err = std::max(err, std::fabs(got[i] - ref[i]));
    norm = std::max(norm, std::fabs(ref[i]));
  }
  EXPECT_GT(err, 0.0);
  EXPECT_LT(err, 0.1 * norm);
}

void check_backward(Fp8Format format) {
  const Layer L = layer(20);
  CurrentScaling recipe;
  recipe.fp8_format = format;
  Tensor y;
  {
    Fp8Autocast fp8(recipe, nullptr, {DType::Float32});
    y = linear(L.x, L.w, L.b);
  }
  const Tensor g = rnd({6, 5}, 30, 1e-3);
  y.backward(g);
  const DType gdt = format == Fp8Format::Hybrid ? DType::Float8_e5m2 : DType::Float8_e4m3fn;
  const Fp8Operand qx = current_cast(L.x.detach(), DType::Float8_e4m3fn);
  const Fp8Operand qw = current_cast(L.w.detach(), DType::Float8_e4m3fn);
  const Fp8Operand qg = current_cast(g, gdt);
  ASSERT_EQ(L.x.grad().dtype(), DType::Float32);
  ASSERT_EQ(L.w.grad().dtype(), DType::Float32);
  // dgrad = G @ W and wgrad = G^T @ X, both on the FP8 operands, scaled once.
  EXPECT_TRUE(near_product(L.x.grad(), product(values(qg, true), values(qw, true)), qg.scale_inv * qw.scale_inv, 5,
                           0.0));
  EXPECT_TRUE(near_product(L.w.grad(), product(transposed(values(qg, true)), values(qx, true)),
                           qg.scale_inv * qx.scale_inv, 6, 0.0));
  // bgrad from the unquantized gradient.
  const auto gb = L.b.grad().to_vector<double>(), gv = g.to_vector<double>();
  for (int j = 0; j < 5; ++j) {
    double s = 0, abs = 0;
    for (int i = 0; i < 6; ++i) {
      s += gv[i * 5 + j];
      abs += std::fabs(gv[i * 5 + j]);
    }
    EXPECT_NEAR(gb[j], s, 7 * std::ldexp(abs, -24));  // an f32 sum of 6 terms
  }
}

TEST(Fp8Autocast, HybridBackwardRunsDgradAndWgradOnE5m2GradientsAndE4m3Operands) { check_backward(Fp8Format::Hybrid); }
TEST(Fp8Autocast, E4m3FormatQuantizesTheGradientToE4m3Too) { check_backward(Fp8Format::E4M3); }

TEST(Fp8Autocast, StraightThroughGradientsMatchFiniteDifferencesOfTheUnquantizedLayer) {
  // The casts are straight-through (their derivative is taken as 1), so the FP8 layer's
  // gradients estimate those of the f64 layer, to within FP8's precision (E4M3 2^-4, E5M2 2^-3).
  const Layer L = layer(40, 4, 16, 3);
  const Tensor c = rnd({4, 3}, 41);
  {
    Fp8Autocast fp8(CurrentScaling{}, nullptr, {DType::Float32});
    sum(linear(L.x, L.w, L.b) * c).backward();
  }
  auto loss64 = [&](const Tensor& x, const Tensor& w) {
    return sum(linear(x, w, L.b.detach().to(DType::Float64)) * c.to(DType::Float64)).item<double>();
  };
  const Tensor x64 = L.x.detach().to(DType::Float64), w64 = L.w.detach().to(DType::Float64);
  auto fd = [&](const Tensor& t, int64_t i, bool is_x) {
    const double h = 1e-6;
    Tensor p = t.clone(), m = t.clone();
    p.data_ptr<double>()[i] += h;
    m.data_ptr<double>()[i] -= h;
    return is_x ? (loss64(p, w64) - loss64(m, w64)) / (2 * h) : (loss64(x64, p) - loss64(x64, m)) / (2 * h);
  };
  auto check = [&](const Tensor& grad, const Tensor& t, bool is_x) {
    const auto gv = grad.to_vector<double>();
    double err = 0, norm = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double want = fd(t, i, is_x);
      err += (gv[i] - want) * (gv[i] - want);
      norm += want * want;
    }
    EXPECT_LT(std::sqrt(err / norm), 0.2) << (is_x ? "input" : "weight") << " gradient";
    EXPECT_GT(std::sqrt(err / norm), 0.0);  // it is quantized
  };
  check(L.x.grad(), x64, true);
  check(L.w.grad(), w64, false);
}

TEST(Fp8Autocast, DelayedScalingCastsWithLastStepsScalesAndRecordsTodaysAmaxes) {
  Layer L = layer(50, 6, 40, 5, 1.0);
  L.x.detach().data_ptr<float>()[7] = 1000.0f;  // beyond E4M3's 448 at the initial scale 1
  DelayedScaling recipe;
  recipe.amax_history_len = 4;
  Fp8Metas metas(recipe, L.named());
  const Fp8Meta& m = metas.at("fc");
  const Tensor g = rnd({6, 5}, 51, 1e-2);
  Tensor y1, y2;
  {
    Fp8Autocast fp8(recipe, &metas, {DType::Float32});  // step 1: nothing recorded yet, scales 1
    y1 = linear(L.x, L.w, L.b);
  }
  // Step 1 cast x with scale 1: 1000 saturated to 448.
  const Fp8Operand sat = quantize_per_tensor(L.x.detach(), DType::Float8_e4m3fn, 1.0f);
  const Fp8Operand w1 = quantize_per_tensor(L.w.detach(), DType::Float8_e4m3fn, 1.0f);
  EXPECT_EQ(dequantize(sat).to_vector<float>()[7], 448.0f);
  EXPECT_TRUE(near_product(y1, product(values(sat), transposed(values(w1))), 1.0, 40, 0.0, L.b.to_vector<double>()));
  const auto h = m.amax_history.to_vector<float>();
  EXPECT_EQ(h[0], 1000.0f);                   // input amax, recorded while casting
  EXPECT_EQ(h[1], amax_of(L.w));              // weight
  EXPECT_EQ(h[2], 0.0f);                      // no backward yet
  y1.backward(g);
  EXPECT_EQ(m.amax_history.to_vector<float>()[2], amax_of(g));  // recorded in backward
  {
    Fp8Autocast fp8(recipe, &metas, {DType::Float32});  // step 2: the update runs at entry
    EXPECT_EQ(m.scale_of(Fp8Role::Input), 448.0f / 1000.0f);
    EXPECT_EQ(m.scale_of(Fp8Role::Weight), 448.0f / amax_of(L.w));
    EXPECT_EQ(m.scale_of(Fp8Role::GradOutput), 57344.0f / amax_of(g));
    y2 = linear(L.x, L.w, L.b);
  }
  const Fp8Operand qx = quantize_per_tensor(L.x.detach(), DType::Float8_e4m3fn, 448.0f / 1000.0f);
  const Fp8Operand qw = quantize_per_tensor(L.w.detach(), DType::Float8_e4m3fn, m.scale_of(Fp8Role::Weight));
  EXPECT_TRUE(near_product(y2, product(values(qx, true), transposed(values(qw, true))), qx.scale_inv * qw.scale_inv, 40,
                           0.0, L.b.to_vector<double>()));
  // update_scales=false (a later micro-batch of the same step): the scales stay, row 0 keeps collecting.
  const auto scales = m.scale.to_vector<float>();
  {
    Fp8Autocast fp8(recipe, &metas, {DType::Float32, {}, false});
    EXPECT_EQ(m.scale.to_vector<float>(), scales);
  }
  EXPECT_EQ(m.amax_history.to_vector<float>()[0], 1000.0f);
}

TEST(Fp8Autocast, DelayedScalingTakesTheDdpHookBeforeTheUpdate) {
  const Layer L = layer(60);
  DelayedScaling recipe;
  recipe.amax_history_len = 2;
  Fp8Metas metas(recipe, L.named());
  metas.find(L.w)->record_amax(Fp8Role::Input, 2.0f);
  std::vector<float> seen;
  Fp8AutocastOptions opt;
  opt.amax_reducer = [&](Tensor& t) {
    seen = t.to_vector<float>();
    t.data_ptr<float>()[0] = 7.0f;  // another rank saw 7
  };
  { Fp8Autocast fp8(recipe, &metas, opt); }
  EXPECT_EQ(seen, (std::vector<float>{2, 0, 0}));
  EXPECT_EQ(metas.at("fc").scale_of(Fp8Role::Input), 64.0f);
}

TEST(Fp8Autocast, MxLinearRunsAllThreeGemmsOnBlockScaledOperandsAlongTheirReductionDims) {
  const Layer L = layer(70, 40, 64, 3);  // M = 40: the wgrad's blocks are 32 and a tail of 8
  Tensor y;
  MXFP8BlockScaling mx;
  {
    Fp8Autocast fp8(mx, nullptr, {DType::Float32});
    y = linear(L.x, L.w, L.b);
  }
  const Tensor g = rnd({40, 3}, 71, 1e-2);
  y.backward(g);
  const DType e4 = DType::Float8_e4m3fn;
  const Tensor x = L.x.detach(), w = L.w.detach();
  EXPECT_TRUE(near_product(y, product(values(mx_quantize(x, 1, e4, mx, "t")), transposed(values(mx_quantize(w, 1, e4, mx, "t")))),
                           1.0, 64, 0.0, L.b.to_vector<double>()));
  EXPECT_TRUE(near_product(L.x.grad(), product(values(mx_quantize(g, 1, e4, mx, "t")), values(mx_quantize(w, 0, e4, mx, "t"))),
                           1.0, 3, 0.0));
  EXPECT_TRUE(near_product(L.w.grad(),
                           product(transposed(values(mx_quantize(g, 0, e4, mx, "t"))), values(mx_quantize(x, 0, e4, mx, "t"))),
                           1.0, 40, 0.0));
}

// ---- conv2d ----

// A conv2d's f64 reference: conv2d (or its two gradients) of the operands' real values, and of
// their magnitudes for the error bound.
std::pair<Mat, Mat> as_pair(const Tensor& v, const Tensor& abs) {
  return {{1, v.numel(), v.contiguous().to_vector<double>()}, {1, abs.numel(), abs.contiguous().to_vector<double>()}};
}
Tensor f64(const Fp8Operand& q) { return dequantize(q).to(DType::Float64); }
Tensor f64abs(const Fp8Operand& q) { return abs(dequantize(q)).to(DType::Float64); }

TEST(Fp8Autocast, Conv2dRunsItsThreeGemmsOnFp8OperandsThroughIm2col) {
  // Stride, padding and dilation that differ per dim, so im2col and col2im are exercised.
  const IntList stride = {2, 1}, padding = {1, 2}, dilation = {1, 2};
  const Tensor x = rnd({2, 3, 7, 6}, 120, 2.0).requires_grad_();
  const Tensor w = rnd({4, 3, 3, 3}, 121, 0.3).requires_grad_(), b = rnd({4}, 122).requires_grad_();
  Tensor y;
  {
    Fp8Autocast fp8(CurrentScaling{}, nullptr, {DType::Float32});
    y = conv2d(x, w, b, stride, padding, dilation);
  }
  const IntList ysz = y.sizes();
  ASSERT_EQ(ysz, conv2d(x.detach(), w.detach(), Tensor(), stride, padding, dilation).sizes());
  const Tensor g = rnd(ysz, 123, 1e-2);
  y.backward(g);
  // The input image is cast per tensor (its amax), the weight too, the gradient to E5M2.
  const Fp8Operand qx = current_cast(x.detach().reshape({2, 3 * 7 * 6}), DType::Float8_e4m3fn);
  const Fp8Operand qw = current_cast(w.detach().reshape({4, 27}), DType::Float8_e4m3fn);
  const Fp8Operand qg = current_cast(g.reshape({2, -1}), DType::Float8_e5m2);
  const Tensor x8 = f64(qx).reshape(x.sizes()), w8 = f64(qw).reshape(w.sizes()), g8 = f64(qg).reshape(ysz);
  const Tensor x8a = f64abs(qx).reshape(x.sizes()), w8a = f64abs(qw).reshape(w.sizes()), g8a = f64abs(qg).reshape(ysz);
  const Tensor b64 = b.detach().to(DType::Float64).reshape({1, 4, 1, 1});
  EXPECT_TRUE(near_product(y, as_pair(conv2d(x8, w8, Tensor(), stride, padding, dilation) + b64,
                                      conv2d(x8a, w8a, Tensor(), stride, padding, dilation) + abs(b64)),
                           1.0, 27, 0.0));
  EXPECT_TRUE(near_product(x.grad(), as_pair(conv2d_input_grad(g8, w8, x.sizes(), stride, padding, dilation),
                                             conv2d_input_grad(g8a, w8a, x.sizes(), stride, padding, dilation)),
                           1.0, 4 * 9, 0.0));
  EXPECT_TRUE(near_product(w.grad(), as_pair(conv2d_weight_grad(x8, g8, w.sizes(), stride, padding, dilation),
                                             conv2d_weight_grad(x8a, g8a, w.sizes(), stride, padding, dilation)),
                           1.0, 2 * ysz[2] * ysz[3], 0.0));
  const auto gb = b.grad().to_vector<double>();
  const auto gs = sum(g.to(DType::Float64), {0, 2, 3}).to_vector<double>();
  for (int o = 0; o < 4; ++o) EXPECT_NEAR(gb[o], gs[o], 1e-6 * std::fabs(gs[o]) + 1e-12);
}

// An independent scalar MXFP8 reference (scale rounded up, blocks of 32, a short last one): the
// values of x cast in blocks along dim `dim` (x seen as (outer, len, inner)), in f64. Each
// block's e is the smallest with amax <= fp8_max * 2^e; each value is v / 2^e (exact: a power of
// two) converted as c10 converts it, times 2^e.
Tensor mx_blocks_ref(const Tensor& x, int64_t dim, DType elem) {
  const Tensor xc = x.detach().to(DType::Float32).contiguous();
  const auto v = xc.to_vector<float>();
  const int64_t len = xc.size(dim);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= xc.size(d);
  for (int64_t d = dim + 1; d < xc.dim(); ++d) inner *= xc.size(d);
  const double top = elem == DType::Float8_e4m3fn ? 448.0 : 57344.0;
  std::vector<double> out(v.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t b0 = 0; b0 < len; b0 += 32)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t n = std::min<int64_t>(32, len - b0);
        auto at = [&](int64_t j) { return (o * len + b0 + j) * inner + i; };
        double amax = 0.0;
        for (int64_t j = 0; j < n; ++j) amax = std::max(amax, std::fabs(static_cast<double>(v[at(j)])));
        int e = -127;
        while (top * std::ldexp(1.0, e) < amax) ++e;
        for (int64_t j = 0; j < n; ++j) {
          const float s = static_cast<float>(std::ldexp(static_cast<double>(v[at(j)]), -e));
          const double q = elem == DType::Float8_e4m3fn ? static_cast<float>(Float8_e4m3fn(s))
                                                        : static_cast<float>(Float8_e5m2(s));
          out[at(j)] = std::ldexp(q, e);
        }
      }
  return tensor(out, xc.sizes(), TensorOptions(DType::Float64));
}

// MXFP8's conv2d keeps its input (no copy) for the weight gradient's im2col: an in-place change
// to it after the forward is refused by name at backward, as any saved tensor's is (it silently
// changed the weight gradient before, for a BF16 or F16 input).
TEST(Fp8Autocast, MxConv2dRefusesAnInputChangedInPlaceAfterTheForward) {
  for (DType dt : {DType::BFloat16, DType::Float32}) {
    Tensor x = randn({2, 3, 6, 6}).to(dt);
    const Tensor w = randn({4, 3, 3, 3}).requires_grad_();
    Tensor y;
    {
      Fp8Autocast fp8(MXFP8BlockScaling{});
      y = conv2d(x, w, {}, {1, 1}, {1, 1});
    }
    {
      NoGradGuard no_grad;
      x.add_(ones_like(x));
    }
    const std::string e = ::mixtape::testing::error_of([&] { sum(y).backward(); });
    EXPECT_NE(e.find("modified by an in-place operation: input 0 of conv2d"), std::string::npos) << dtype_name(dt) << ": " << e;
  }
}

TEST(Fp8Autocast, MxConv2dBlocksThe32ChannelsOfEachInputPixel) {
  // C = 40: at each pixel a block of channels 0-31 and a short one of 8. Pixel (0, 0) of image 0
  // is tiny; its right neighbour is zero but for one huge value in channel 0, whose weights are
  // zero: output pixel (0, 1) (kernel 2x2, padding 1) reads those two pixels alone. Blocked along
  // each window's (c, kh, kw), the huge value would set the scale of the tiny pixel's values and
  // flush them to zero; blocked per pixel they keep their bits, and so does the output.
  auto xs = rnd({2, 40, 3, 4}, 160).to_vector<float>();
  for (int c = 0; c < 40; ++c) {
    xs[(c * 3 + 0) * 4 + 0] *= 0x1p-20f;
    xs[(c * 3 + 0) * 4 + 1] = c == 0 ? 0x1p10f : 0.0f;
  }
  auto ws = rnd({3, 40, 2, 2}, 161, 0.2).to_vector<float>();
  for (int o = 0; o < 3; ++o)
    for (int k = 0; k < 4; ++k) ws[(o * 40 + 0) * 4 + k] = 0.0f;
  const Tensor x0 = tensor(std::vector<double>(xs.begin(), xs.end()), {2, 40, 3, 4}, TensorOptions(DType::Float32));
  const Tensor w0 = tensor(std::vector<double>(ws.begin(), ws.end()), {3, 40, 2, 2}, TensorOptions(DType::Float32));
  const IntList st = {1, 1}, pad = {1, 1}, dil = {1, 1};
  for (DType out_dt : {DType::BFloat16, DType::Float32})
    for (DType x_dt : {DType::BFloat16, DType::Float32}) {  // BF16 x: the dgrad on the BF16 kernels
      SCOPED_TRACE(std::string(dtype_name(out_dt)) + " output, " + std::string(dtype_name(x_dt)) + " input");
      const Tensor x = x0.to(x_dt).clone().requires_grad_(), w = w0.clone().requires_grad_();
      Tensor y;
      {
        Fp8Autocast fp8(MXFP8BlockScaling{}, nullptr, {out_dt});
        y = conv2d(x, w, Tensor(), st, pad, dil);
      }
      ASSERT_EQ(y.sizes(), (IntList{2, 3, 4, 5}));
      const Tensor g = rnd(y.sizes(), 162, 0.1).to(out_dt).to(DType::Float32);
      y.backward(g.to(out_dt));
      const double rel = out_dt == DType::BFloat16 ? std::ldexp(1.0, -8) : 0.0;
      const Tensor xq = mx_blocks_ref(x, 1, DType::Float8_e4m3fn), wq = mx_blocks_ref(w, 1, DType::Float8_e4m3fn);
      EXPECT_TRUE(near_product(y, as_pair(conv2d(xq, wq, Tensor(), st, pad, dil),
                                          conv2d(abs(xq), abs(wq), Tensor(), st, pad, dil)),
                               1.0, 160, rel));
      for (int o = 0; o < 3; ++o) EXPECT_NE(y.to(DType::Float32).to_vector<float>()[(o * 4 + 0) * 5 + 1], 0.0f) << o;
      // dgrad: G blocked along O at each output pixel, the weight along O at each (c, kh, kw); the
      // recipe's default format is E4M3 for every role.
      const Tensor gq = mx_blocks_ref(g, 1, DType::Float8_e4m3fn), wo = mx_blocks_ref(w, 0, DType::Float8_e4m3fn);
      const double rel_dx = x_dt == DType::BFloat16 ? std::ldexp(1.0, -8) : 0.0;
      EXPECT_TRUE(near_product(x.grad(), as_pair(conv2d_input_grad(gq, wo, x.sizes(), st, pad, dil),
                                                 conv2d_input_grad(abs(gq), abs(wo), x.sizes(), st, pad, dil)),
                               1.0, 3 * 4, rel_dx));
    }
}

TEST(Fp8Autocast, PerTensorRecipesKeepTheFp8InputAndTheWeightByReference) {
  // What the graph keeps for backward, besides the output: BF16 autocast keeps the BF16 input
  // and weight (2 bytes a value); the FP8 node keeps the FP8 input image (1 byte a value) and no
  // copy of the weight, a leaf it casts again in backward (8 bytes of scales, alignment aside).
  const Tensor x = rnd({8, 16, 14, 14}, 150).requires_grad_(), w = rnd({32, 16, 3, 3}, 151, 0.1).requires_grad_();
  const Tensor xl = rnd({64, 256}, 152).requires_grad_(), wl = rnd({128, 256}, 153, 0.1).requires_grad_();
  Fp8Metas metas(DelayedScaling{}, {{"conv.weight", w}, {"fc.weight", wl}});
  auto kept = [&](int mode, bool conv) {
    const int64_t before = memory_stats().current_bytes;
    Tensor y;
    {
      std::optional<AutocastGuard> bf16;
      std::optional<Fp8Autocast> fp8;
      if (mode == 0) bf16.emplace(DeviceType::CPU, DType::BFloat16);
      if (mode == 1) fp8.emplace(CurrentScaling{});
      if (mode == 2) fp8.emplace(DelayedScaling{}, &metas);
      y = conv ? conv2d(x, w, Tensor(), {1, 1}, {1, 1}) : linear(xl, wl);
    }
    EXPECT_EQ(y.dtype(), DType::BFloat16);
    return memory_stats().current_bytes - before - static_cast<int64_t>(y.nbytes());
  };
  for (bool conv : {true, false}) {
    const int64_t bf16 = kept(0, conv);
    const int64_t inputs = conv ? x.numel() : xl.numel(), weights = conv ? w.numel() : wl.numel();
    EXPECT_GE(bf16, 2 * (inputs + weights));
    for (int mode : {1, 2}) {
      const int64_t fp8 = kept(mode, conv);
      EXPECT_GE(fp8, inputs) << mode;
      EXPECT_LT(fp8, inputs + weights) << (conv ? "conv2d" : "linear") << " mode " << mode;
      EXPECT_LE(fp8, 0.6 * bf16) << (conv ? "conv2d" : "linear") << " mode " << mode;
    }
  }
}

// dx of conv2d or linear under `recipe`, for the weight `w` as given; x in dtype `xdt`. conv2d
// takes the conv kernel route for a BF16 output and a BF16 x, else im2col + GEMM.
Tensor fp8_dx(const Fp8Recipe& recipe, bool conv, DType out, const Tensor& w, Fp8Metas* metas = nullptr,
              const std::function<void()>& between = {}, DType xdt = DType::Float32) {
  const Tensor x = (conv ? rnd({2, 5, 6, 6}, 170) : rnd({6, 40}, 171)).to(xdt).requires_grad_();
  Tensor y;
  {
    Fp8Autocast fp8(recipe, metas, Fp8AutocastOptions{.output_dtype = out});
    y = conv ? conv2d(x, w, Tensor(), {1, 1}, {1, 1}) : linear(x, w);
  }
  if (between) between();
  (y.to(DType::Float32) * rnd(y.sizes(), 172)).sum().backward();
  return x.grad();
}

TEST(Fp8Autocast, TheDgradCastsALeafWeightAgainToTheBytesACopyWouldHold) {
  // A non-leaf weight (w * 1) keeps its FP8 copy; the leaf is cast again in backward. Same dx, bit
  // for bit, on every route and recipe.
  for (bool conv : {true, false})
    for (DType out : {DType::BFloat16, DType::Float32})
      for (DType xdt : {DType::Float32, DType::BFloat16})  // conv2d: the kernel route for BF16 both
        for (const Fp8Recipe& recipe : {Fp8Recipe{CurrentScaling{}}, Fp8Recipe{MXFP8BlockScaling{}}}) {
          const Tensor w = (conv ? rnd({4, 5, 3, 3}, 173, 0.3) : rnd({7, 40}, 174, 0.3)).requires_grad_();
          const Tensor leaf = fp8_dx(recipe, conv, out, w, nullptr, {}, xdt);
          const Tensor copy = fp8_dx(recipe, conv, out, w * 1.0, nullptr, {}, xdt);
          EXPECT_TRUE(bit_equal(leaf, copy)) << (conv ? "conv2d " : "linear ") << dtype_name(out) << " x "
                                             << dtype_name(xdt) << ' ' << recipe_string(recipe);
        }
}

TEST(Fp8Autocast, TheDgradCastsTheWeightWithTheForwardsScaleAfterAnUpdate) {
  // Delayed scaling: the scales are updated between forward and backward (a second update makes
  // the amax history count); the weight's recast must still use the scale its forward cast used.
  for (bool conv : {true, false})
    for (DType out : {DType::BFloat16, DType::Float32})
      for (DType xdt : {DType::Float32, DType::BFloat16}) {  // conv2d: the kernel route for BF16 both
        const Tensor w = (conv ? rnd({4, 5, 3, 3}, 175, 0.3) : rnd({7, 40}, 176, 0.3)).requires_grad_();
        DelayedScaling recipe;
        recipe.amax_history_len = 1;
        Fp8Metas plain(recipe, {{"l.weight", w}}), updated(recipe, {{"l.weight", w}});
        const Tensor want = fp8_dx(recipe, conv, out, w, &plain, {}, xdt);
        const Tensor got = fp8_dx(recipe, conv, out, w, &updated, [&] { updated.update_scales(); }, xdt);
        EXPECT_NE(updated.metas()[0].scale_of(Fp8Role::Weight), plain.metas()[0].scale_of(Fp8Role::Weight));
        EXPECT_TRUE(bit_equal(want, got)) << (conv ? "conv2d " : "linear ") << dtype_name(out) << " x "
                                          << dtype_name(xdt);
      }
}

TEST(Fp8Autocast, Conv2dBiasGradientHasTheSameBitsWhetherTheGradientCastSumsItOrNot) {
  // With the weight needing a gradient, the bias gradient is summed in G's cast pass (the kernel
  // route); a bias-only backward sums G apart. The same G gives the same bits either way.
  for (int64_t hw : {int64_t{6}, int64_t{28}}) {
    const Tensor x = rnd({3, 4, hw, hw}, 180);
    const Tensor gy = rnd({3, 5, hw, hw}, 181);
    auto bias_grad = [&](bool weight_grad) {
      const Tensor w = rnd({5, 4, 3, 3}, 182, 0.3).requires_grad_(weight_grad);
      const Tensor b = rnd({5}, 183).requires_grad_();
      Tensor y;
      {
        Fp8Autocast fp8(CurrentScaling{});
        y = conv2d(x, w, b, {1, 1}, {1, 1});
      }
      EXPECT_EQ(y.dtype(), DType::BFloat16);
      (y.to(DType::Float32) * gy).sum().backward();
      return b.grad();
    };
    EXPECT_TRUE(bit_equal(bias_grad(true), bias_grad(false))) << hw;
  }
}

TEST(Fp8Autocast, AnOperandWithoutGradKeepsItsFp8CopyAndMayChangeAfterTheForward) {
  // matmul's b without grad is no parameter being trained: the node keeps b's FP8 copy, so the
  // caller may reuse b's storage before backward, and a's gradient is the unchanged run's.
  for (const Fp8Recipe& recipe : {Fp8Recipe{CurrentScaling{}}, Fp8Recipe{MXFP8BlockScaling{}}}) {
    auto grad_a = [&](bool reuse_b) {
      const Tensor a = rnd({6, 40}, 184).requires_grad_();
      Tensor b = rnd({40, 7}, 185, 0.3);
      Tensor y;
      {
        Fp8Autocast fp8(recipe);
        y = matmul(a, b);
      }
      if (reuse_b) {
        NoGradGuard no_grad;
        b.mul_(2.0);
      }
      (y.to(DType::Float32) * rnd(y.sizes(), 186)).sum().backward();
      return a.grad();
    };
    EXPECT_TRUE(bit_equal(grad_a(true), grad_a(false))) << recipe_string(recipe);
  }
}

TEST(Fp8Autocast, AWeightChangedInPlaceBetweenForwardAndBackwardIsRefused) {
  for (bool conv : {true, false})
    for (const Fp8Recipe& recipe : {Fp8Recipe{CurrentScaling{}}, Fp8Recipe{MXFP8BlockScaling{}}}) {
      Tensor w = (conv ? rnd({4, 5, 3, 3}, 177, 0.3) : rnd({7, 40}, 178, 0.3)).requires_grad_();
      const std::string e = error_of([&] {
        fp8_dx(recipe, conv, DType::BFloat16, w, nullptr, [&] {
          NoGradGuard no_grad;
          w.mul_(2.0);
        });
      });
      EXPECT_TRUE(contains(e, std::string("modified by an in-place operation: input 1 (the weight) of ") +
                                  (conv ? "conv2d" : "linear")))
          << recipe_string(recipe) << ": " << e;
    }
}

TEST(Fp8Autocast, MxSpecRoundingSaturatesWhereRoundingUpDoesNot) {
  // Each row's amax is 60 = 480 * 2^-3: the spec's scale, 2^(5 - 8), maps it to 480, past E4M3's
  // 448, so it comes back as 56; rounding the scale up (2^-2) keeps it exact. w = I shows it.
  Tensor x = rnd({4, 32}, 80, 0.5);
  for (int r = 0; r < 4; ++r) x.data_ptr<float>()[r * 32 + r] = 60.0f;
  Tensor w = zeros({32, 32});
  for (int i = 0; i < 32; ++i) w.data_ptr<float>()[i * 33] = 1.0f;
  for (MxScaleRounding rounding : {MxScaleRounding::Up, MxScaleRounding::Spec}) {
    MXFP8BlockScaling mx;
    mx.scale_rounding = rounding;
    Fp8Autocast fp8(mx, nullptr, {DType::Float32});
    const auto y = linear(x, w).to_vector<float>();
    for (int r = 0; r < 4; ++r) EXPECT_EQ(y[r * 32 + r], rounding == MxScaleRounding::Up ? 60.0f : 56.0f);
  }
}

TEST(Fp8Autocast, MatmulIsAnFp8GemmAndEveryOtherOpFollowsBf16Autocast) {
  const Tensor a = rnd({5, 8}, 90), b = rnd({8, 3}, 91);
  {
    Fp8Autocast fp8(CurrentScaling{}, nullptr, {DType::Float32});
    EXPECT_TRUE(is_autocast_enabled(DeviceType::CPU));
    EXPECT_EQ(get_autocast_dtype(DeviceType::CPU), DType::BFloat16);
    const Tensor c = matmul(a, b);
    ASSERT_EQ(c.dtype(), DType::Float32);
    const Fp8Operand qa = current_cast(a, DType::Float8_e4m3fn), qb = current_cast(b, DType::Float8_e4m3fn);
    EXPECT_TRUE(near_product(c, product(values(qa, true), values(qb, true)), qa.scale_inv * qb.scale_inv, 8, 0.0));
    // A batched matmul is not an FP8 GEMM yet: BF16 autocast runs it.
    const Tensor a3 = rnd({2, 5, 8}, 92), b3 = rnd({2, 8, 3}, 93);
    const Tensor c3 = matmul(a3, b3);
    EXPECT_EQ(c3.dtype(), DType::BFloat16);
    Tensor c3_bf16;
    {
      AutocastGuard bf16(DeviceType::CPU, DType::BFloat16);
      c3_bf16 = matmul(a3, b3);
    }
    EXPECT_EQ(c3.to_vector<float>(), c3_bf16.to_vector<float>());
    // conv2d is an FP8 GEMM; a grouped one is not yet (BF16 autocast); relu keeps its input's dtype.
    const Tensor img = rnd({1, 2, 5, 5}, 94), k = rnd({4, 2, 3, 3}, 95);
    EXPECT_EQ(conv2d(img, k).dtype(), DType::Float32);
    EXPECT_EQ(conv2d(img, rnd({4, 1, 3, 3}, 97), Tensor(), {1, 1}, {0, 0}, {1, 1}, 2).dtype(), DType::BFloat16);
    EXPECT_EQ(relu(linear(a, rnd({4, 8}, 96))).dtype(), DType::Float32);
    // f64 is never autocast, FP8 included.
    EXPECT_EQ(matmul(a.to(DType::Float64), b.to(DType::Float64)).dtype(), DType::Float64);
  }
  EXPECT_FALSE(is_autocast_enabled(DeviceType::CPU));
}

TEST(Fp8Autocast, A16BitModelCastsItsBf16TensorsAndGetsGradientsInTheirDtypes) {
  // A BF16 model (its FP32 masters live in the optimizer): the same FP8 operands as the FP32
  // model whose values are the BF16 ones, gradients in BF16.
  const Layer L = layer(140);
  const Tensor x16 = L.x.detach().to(DType::BFloat16).requires_grad_();
  const Tensor w16 = L.w.detach().to(DType::BFloat16).requires_grad_();
  const Tensor x32 = x16.detach().to(DType::Float32).requires_grad_();
  const Tensor w32 = w16.detach().to(DType::Float32).requires_grad_();
  Tensor y16, y32;
  {
    Fp8Autocast fp8(CurrentScaling{});
    y16 = linear(x16, w16);
    y32 = linear(x32, w32);
  }
  EXPECT_EQ(y16.dtype(), DType::BFloat16);
  EXPECT_EQ(y16.to_vector<float>(), y32.to_vector<float>());
  const Tensor g = rnd({6, 5}, 141, 1e-2).to(DType::BFloat16);
  y16.backward(g);
  y32.backward(g);
  EXPECT_EQ(x16.grad().dtype(), DType::BFloat16);
  EXPECT_EQ(w16.grad().dtype(), DType::BFloat16);
  EXPECT_EQ(x16.grad().to_vector<float>(), x32.grad().to(DType::BFloat16).to_vector<float>());
  EXPECT_EQ(w16.grad().to_vector<float>(), w32.grad().to(DType::BFloat16).to_vector<float>());
}

TEST(Fp8Autocast, EmptyShapesGiveEmptyOrZeroResultsUnderEveryRecipe) {
  for (int which = 0; which < 3; ++which) {
    // No rows (M = 0), and no features to sum over (K = 0: y = b, dW = 0).
    for (const IntList& xs : {IntList{0, 8}, IntList{3, 0}}) {
      const Tensor x = zeros(xs).requires_grad_();
      const Tensor w = zeros({4, xs[1]}).requires_grad_(), b = full({4}, 0.5).requires_grad_();
      DelayedScaling delayed;
      delayed.amax_history_len = 2;
      Fp8Metas metas(delayed, {{"weight", w}});
      Tensor y;
      {
        std::optional<Fp8Autocast> fp8;
        if (which == 0) fp8.emplace(delayed, &metas, Fp8AutocastOptions{DType::Float32});
        if (which == 1) fp8.emplace(CurrentScaling{}, nullptr, Fp8AutocastOptions{DType::Float32});
        if (which == 2) fp8.emplace(MXFP8BlockScaling{}, nullptr, Fp8AutocastOptions{DType::Float32});
        y = linear(x, w, b);
      }
      ASSERT_EQ(y.sizes(), (IntList{xs[0], 4}));
      for (float v : y.to_vector<float>()) EXPECT_EQ(v, 0.5f);
      sum(y).backward();
      EXPECT_EQ(x.grad().sizes(), x.sizes());
      EXPECT_EQ(w.grad().sizes(), w.sizes());
      for (float v : w.grad().to_vector<float>()) EXPECT_EQ(v, 0.0f);
      EXPECT_EQ(b.grad().to_vector<float>(), std::vector<float>(4, static_cast<float>(xs[0])));
    }
  }
}

TEST(Fp8Autocast, RefusesWhatItCannotRun) {
  const Layer L = layer(100);
  std::string e;
#if !defined(MIXTAPE_WITH_CUDA)
  // A CUDA build runs it (tests/cuda_amp/test_fp8_autocast_cuda.cpp).
  e = error_of([] { Fp8Autocast r(CurrentScaling{}, nullptr, {}, DeviceType::CUDA); });
  EXPECT_TRUE(contains(e, "Fp8Autocast(cuda): this build has no CUDA backend")) << e;
#endif
  e = error_of([] { Fp8Autocast r(DelayedScaling{}); });
  EXPECT_TRUE(contains(e, "keeps per-module state; pass the model's Fp8Metas")) << e;
  Fp8Metas metas(DelayedScaling{}, L.named());
  DelayedScaling other;
  other.margin = 1.0f;
  e = error_of([&] { Fp8Autocast r(other, &metas); });
  EXPECT_TRUE(contains(e, "differs from the one the metas were made with")) << e;
  e = error_of([&] { Fp8Autocast r(CurrentScaling{}, &metas); });
  EXPECT_TRUE(contains(e, "takes no Fp8Metas")) << e;
  e = error_of([] { Fp8Autocast r(CurrentScaling{}, nullptr, {DType::Float16}); });
  EXPECT_TRUE(contains(e, "output_dtype must be BFloat16 or Float32, got Float16")) << e;
  // A weight the metas do not know, under delayed scaling.
  e = error_of([&] {
    Fp8Autocast r(DelayedScaling{}, &metas);
    linear(L.x, rnd({5, 40}, 101));
  });
  EXPECT_TRUE(contains(e, "linear (Fp8Autocast): under DelayedScaling(") && contains(e, "has no FP8 metadata")) << e;
  // MXFP8 without pad_tail: the dims it blocks are checked in forward (here M = 6 for the wgrad).
  MXFP8BlockScaling mx;
  mx.pad_tail = false;
  const Layer M = layer(102, 6, 64, 32);
  e = error_of([&] {
    Fp8Autocast r(mx);
    linear(M.x, M.w);
  });
  EXPECT_TRUE(contains(e, "MXFP8 block size 32 does not divide the reduction dim (6 values along dim 0")) << e;
  // A conv2d bias of the wrong size (read element by element by the FP8 path).
  e = error_of([&] {
    Fp8Autocast r(CurrentScaling{});
    conv2d(rnd({1, 2, 5, 5}, 103), rnd({4, 2, 3, 3}, 104), rnd({3}, 105));
  });
  EXPECT_TRUE(contains(e, "conv2d: bias must be 1-D with 4 elements")) << e;
  // Backward twice, and double backward.
  Tensor y;
  {
    Fp8Autocast r(CurrentScaling{});
    y = sum(linear(L.x, L.w, L.b));
  }
  y.backward();
  e = error_of([&] { y.backward(); });
  EXPECT_TRUE(contains(e, "backward through the FP8 GEMM a second time")) << e;
  {
    Fp8Autocast r(CurrentScaling{});
    y = sum(linear(L.x, L.w, L.b));
  }
  e = error_of([&] { y.backward({}, false, true); });
  EXPECT_TRUE(contains(e, "is not differentiable (create_graph")) << e;
}

// Bit for bit: same dtype, shape and bytes.
::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return ::testing::AssertionFailure() << "undefined";
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes())
    return ::testing::AssertionFailure() << a.describe() << " vs " << b.describe();
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  if (std::memcmp(ac.data_ptr(), bc.data_ptr(), ac.nbytes()) != 0)
    return ::testing::AssertionFailure() << "the bytes differ: " << a.describe();
  return ::testing::AssertionSuccess();
}

// A checkpointed segment is recomputed in its forward's FP8 region, with the scales the forward
// cast with and no amax recorded, so a few steps of training give the plain graph's gradients
// and leave the metas (histories, scales) as the plain run does, under every recipe, in both
// checkpoint modes, also when the segment opens the region itself (its recompute must not roll
// the histories again).
TEST(Fp8Autocast, CheckpointedSegmentsGiveThePlainGraphsGradientsAndMetadata) {
  const Tensor x = rnd({8, 2, 6, 6}, 120), target = rnd({8, 4}, 121);
  struct Net {
    Tensor k1 = rnd({4, 2, 3, 3}, 122, 0.3).requires_grad_(), c1 = zeros({4}).requires_grad_();
    Tensor w2 = rnd({16, 144}, 123, 0.08).requires_grad_(), b2 = zeros({16}).requires_grad_();
    Tensor w3 = rnd({4, 16}, 124, 0.25).requires_grad_();
    std::vector<std::pair<std::string, Tensor>> named() const {
      return {{"conv.weight", k1}, {"conv.bias", c1}, {"fc.weight", w2}, {"fc.bias", b2}, {"out.weight", w3}};
    }
    TensorList params() const { return {k1, c1, w2, b2, w3}; }
  };
  DelayedScaling delayed;
  delayed.amax_history_len = 3;  // rolls over within the run
  const char* names[] = {"delayed", "current", "mxfp8", "delayed, region inside the segment"};
  for (int which = 0; which < 4; ++which) {
    for (bool reentrant : {false, true}) {
      SCOPED_TRACE(std::string(names[which]) + (reentrant ? ", reentrant" : ", non-reentrant"));
      Net plain, ckpt;
      Fp8Metas plain_metas(delayed, plain.named()), ckpt_metas(delayed, ckpt.named());
      optim::SGDOptions so;
      so.lr = 0.05;
      optim::SGD plain_opt(plain.params(), so), ckpt_opt(ckpt.params(), so);
      auto step = [&](Net& n, Fp8Metas& metas, optim::SGD& opt, bool checkpointed) {
        auto segment = [&](const Tensor& in) {
          std::optional<Fp8Autocast> inner;
          if (which == 3) inner.emplace(delayed, &metas);
          const Tensor h = relu(conv2d(in, n.k1, n.c1, {1, 1}, {1, 1}));
          return relu(linear(h.reshape({8, 144}), n.w2, n.b2));
        };
        Tensor loss;
        {
          std::optional<Fp8Autocast> fp8;
          if (which == 0) fp8.emplace(delayed, &metas);
          if (which == 1) fp8.emplace(CurrentScaling{});
          if (which == 2) fp8.emplace(MXFP8BlockScaling{});
          autograd::CheckpointOptions co;
          co.use_reentrant = reentrant;
          const Tensor h = checkpointed ? autograd::checkpoint(segment, x, co) : segment(x);
          // (The segment's own region returns BF16: the last layer, outside it, runs in f32.)
          loss = mse_loss(linear(which == 3 ? h.to(DType::Float32) : h, n.w3), target);
        }
        opt.zero_grad();
        loss.backward();
      };
      for (int s = 0; s < 5; ++s) {
        step(plain, plain_metas, plain_opt, false);
        step(ckpt, ckpt_metas, ckpt_opt, true);
        for (size_t i = 0; i < plain.params().size(); ++i)
          EXPECT_TRUE(same_bits(plain.params()[i].grad(), ckpt.params()[i].grad())) << "step " << s << " param " << i;
        const StateDict a = plain_metas.state_dict(), b = ckpt_metas.state_dict();
        for (const auto& [key, t] : a) EXPECT_TRUE(same_bits(t, b.at(key))) << "step " << s << " " << key;
        plain_opt.step();
        ckpt_opt.step();
      }
      if (which == 0 || which == 3) {  // the metas took part: the scales moved from 1
        EXPECT_NE(plain_metas.at("fc").scale_of(Fp8Role::Input), 1.0f);
      }
    }
  }
}

// A segment whose forward ran outside any FP8 region is recomputed outside one too, even when
// backward runs inside an open Fp8Autocast: the gradients are the plain graph's.
TEST(Fp8Autocast, ASegmentForwardOutsideFp8IsRecomputedOutsideItWhenBackwardRunsInsideOne) {
  const Tensor x = rnd({8, 12}, 130);
  const Tensor w1 = rnd({16, 12}, 131, 0.3).requires_grad_(), w2 = rnd({4, 16}, 132, 0.3).requires_grad_();
  auto segment = [&](const Tensor& in) { return relu(linear(in, w1)); };
  TensorList grads[2];
  for (int checkpointed = 0; checkpointed < 2; ++checkpointed) {
    Tensor loss;
    {
      AutocastGuard bf16(DeviceType::CPU, DType::BFloat16);
      const Tensor h = checkpointed ? autograd::checkpoint(segment, x) : segment(x);
      loss = sum(linear(h, w2).to(DType::Float32));
    }
    w1.set_grad({});
    w2.set_grad({});
    {
      Fp8Autocast fp8(CurrentScaling{});
      loss.backward();
    }
    grads[checkpointed] = {w1.grad(), w2.grad()};
  }
  for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(same_bits(grads[0][i], grads[1][i])) << "param " << i;
}

// The scales change between a segment's forward and its backward (another region updated them):
// the recompute still casts with the forward's scales and records nothing into the new row 0,
// so gradients and metas equal the plain graph's.
TEST(Fp8Autocast, ARecomputeAfterAScaleUpdateCastsWithTheForwardsScalesAndRecordsNothing) {
  const Tensor x = rnd({8, 12}, 140), target = rnd({8, 4}, 141);
  DelayedScaling delayed;
  delayed.amax_history_len = 4;
  TensorList grads[2];
  StateDict metas_after[2];
  for (int checkpointed = 0; checkpointed < 2; ++checkpointed) {
    const Tensor w1 = rnd({16, 12}, 142, 0.3).requires_grad_(), w2 = rnd({4, 16}, 143, 0.3).requires_grad_();
    Fp8Metas metas(delayed, {{"fc1.weight", w1}, {"fc2.weight", w2}});
    auto segment = [&](const Tensor& in) { return relu(linear(in, w1)); };
    for (int s = 0; s < 2; ++s) {  // a step first, so that the scales are not all 1
      Tensor loss;
      {
        Fp8Autocast fp8(delayed, &metas);
        const Tensor h = checkpointed ? autograd::checkpoint(segment, x) : segment(x);
        loss = mse_loss(linear(h, w2), target);
      }
      if (s == 1) Fp8Autocast update(delayed, &metas);  // new scales, row 0 rolled and reset
      w1.set_grad({});
      w2.set_grad({});
      loss.backward();
    }
    grads[checkpointed] = {w1.grad(), w2.grad()};
    metas_after[checkpointed] = metas.state_dict();
  }
  for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(same_bits(grads[0][i], grads[1][i])) << "param " << i;
  for (const auto& [key, t] : metas_after[0]) EXPECT_TRUE(same_bits(t, metas_after[1].at(key))) << key;
}

TEST(Fp8Autocast, AConvAndLinearNetworkTrainsUnderEveryRecipe) {
  const Tensor x = rnd({16, 2, 6, 6}, 110), target = rnd({16, 4}, 111);
  for (int which = 0; which < 3; ++which) {
    Tensor k1 = rnd({4, 2, 3, 3}, 112, 0.3).requires_grad_(), c1 = zeros({4}).requires_grad_();
    Tensor w2 = rnd({4, 144}, 113, 0.08).requires_grad_(), b2 = zeros({4}).requires_grad_();
    std::vector<std::pair<std::string, Tensor>> named = {{"conv.weight", k1}, {"conv.bias", c1},
                                                         {"fc.weight", w2}, {"fc.bias", b2}};
    DelayedScaling delayed;
    delayed.amax_history_len = 16;
    Fp8Metas metas(delayed, named);
    ASSERT_EQ(metas.size(), 2u);
    optim::SGDOptions so;
    so.lr = 0.05;
    optim::SGD opt({k1, c1, w2, b2}, so);
    double first = 0, last = 0;
    for (int step = 0; step < 40; ++step) {
      Tensor loss;
      {
        std::optional<Fp8Autocast> fp8;
        if (which == 0) fp8.emplace(delayed, &metas);
        if (which == 1) fp8.emplace(CurrentScaling{});
        if (which == 2) fp8.emplace(MXFP8BlockScaling{});
        const Tensor h = relu(conv2d(x, k1, c1, {1, 1}, {1, 1}));
        loss = mse_loss(linear(h.reshape({16, 144}), w2, b2), target);
      }
      EXPECT_EQ(loss.dtype(), DType::Float32);  // mse_loss runs in f32 under BF16 autocast's rules
      opt.zero_grad();
      loss.backward();
      opt.step();
      (step == 0 ? first : last) = loss.item<double>();
    }
    EXPECT_LT(last, 0.9 * first) << "recipe " << which;
    if (which == 0) {
      EXPECT_GT(metas.at("conv").scale_of(Fp8Role::GradOutput), 1.0f);  // the history moved it
    }
  }
}

}  // namespace
}  // namespace mixtape::testing
