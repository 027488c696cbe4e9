// tests/ops/test_softmax_loss.cpp — softmax / log_softmax, the losses, cat / stack / argmax /
// index_select: behaviour (stability, 16-bit round-once, dtype handling, AMP policies, PyTorch's
// conventions) and every bad-input error by message substring. Their gradchecks (each gradient op
// included, for double backward) derive from the samples the ops declare with their definitions
// (tests/ops/test_op_samples.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include <mixtape/mixtape.h>

#include "ops/loss.h"
#include "ops/shape_ops.h"
#include "ops/softmax.h"

namespace mixtape::testing {
namespace {

Tensor i64(std::initializer_list<double> v) { return tensor(v, DType::Int64); }
Tensor i64(std::initializer_list<std::initializer_list<double>> v) { return tensor(v, DType::Int64); }

// ---- helpers ----
bool bit_equal(const Tensor& a, const Tensor& b) {
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.dtype() == cb.dtype() && ca.sizes() == cb.sizes() &&
         std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

template <typename F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing \"" << needle << "\", got none";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message \"" << e.what() << "\" lacks \"" << needle << "\"";
  }
}

bool all_finite(const Tensor& t) {
  for (double v : t.to_vector<double>())
    if (!std::isfinite(v)) return false;
  return true;
}

// ---- softmax ----
TEST(Softmax, LargeLogitsStayFinite) {
  Tensor x = tensor({{1000.0, 999.0, -1000.0}, {-1000.0, -1001.0, -1002.0}});
  Tensor y = softmax(x, 1), ly = log_softmax(x, 1);
  ASSERT_TRUE(all_finite(y));
  ASSERT_TRUE(all_finite(ly));
  EXPECT_NEAR(y.to_vector<double>()[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(ly.to_vector<double>()[3], -std::log(1.0 + std::exp(-1.0) + std::exp(-2.0)), 1e-6);
  EXPECT_FLOAT_EQ(ly.to_vector<double>()[2], static_cast<float>(-2000.0 - std::log(1.0 + std::exp(-1.0))));
  // f16 logits near the top of the f16 range (the log-probabilities must fit in f16 too).
  Tensor h = tensor({60000.0, 59000.0, 30000.0}, DType::Float16);
  EXPECT_TRUE(all_finite(softmax(h, 0)));
  EXPECT_TRUE(all_finite(log_softmax(h, 0)));
}

TEST(Softmax, MatchesTheDefinitionAlongEveryDim) {
  Generator g(3);
  Tensor x = randn({3, 4, 5}, DType::Float64, &g);
  for (int64_t dim : {0, 1, 2, -1}) {
    Tensor e = exp(x);
    Tensor want = e / sum(e, IntList{dim}, true);
    Tensor got = softmax(x, dim);
    std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-15) << "dim " << dim;
    std::vector<double> l = log_softmax(x, dim).to_vector<double>();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(l[i], std::log(b[i]), 1e-14) << "dim " << dim;
  }
}

TEST(Softmax, ZeroDimAndEmpty) {
  EXPECT_EQ(softmax(scalar_tensor(3.0), 0).item<float>(), 1.0f);
  EXPECT_EQ(log_softmax(scalar_tensor(3.0), -1).item<float>(), 0.0f);
  EXPECT_EQ(softmax(zeros({2, 0}), 1).sizes(), (IntList{2, 0}));
  EXPECT_EQ(softmax(zeros({0, 3}), 1).sizes(), (IntList{0, 3}));
}

TEST(Softmax, NonFiniteRowsFollowPyTorch) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> y = softmax(tensor({{-inf, 0.0, 1.0}, {-inf, -inf, -inf}, {NAN, 0.0, 1.0}}), 1).to_vector<double>();
  EXPECT_EQ(y[0], 0.0);  // a -inf logit gets probability 0
  EXPECT_TRUE(std::isfinite(y[1]) && std::isfinite(y[2]));
  for (int i = 3; i < 9; ++i) EXPECT_TRUE(std::isnan(y[static_cast<size_t>(i)])) << i;
}

TEST(Softmax, LogSoftmaxOfHalfWithDtypeFloat32ReturnsFloat32) {
  Generator g(5);
  Tensor x = randn({4, 9}, {}, &g).to(DType::Float16);
  Tensor y = log_softmax(x, 1, DType::Float32);
  EXPECT_EQ(y.dtype(), DType::Float32);
  EXPECT_TRUE(bit_equal(y, log_softmax(x.to(DType::Float32), 1)));
  EXPECT_EQ(softmax(x, 1, DType::Float64).dtype(), DType::Float64);
  // The input is converted first: f32 -> dtype f16 rounds the input, then computes.
  Tensor x32 = randn({4, 9}, {}, &g) * 3.0;
  EXPECT_TRUE(bit_equal(softmax(x32, 1, DType::Float16), softmax(x32.to(DType::Float16), 1)));
  // Integers need a dtype, as in PyTorch.
  EXPECT_EQ(softmax(tensor({1.0, 2.0}, DType::Int64), 0, DType::Float32).dtype(), DType::Float32);
  expect_error([] { softmax(tensor({1.0, 2.0}, DType::Int64), 0); }, "softmax: expected a floating input");
  expect_error([] { log_softmax(tensor({1.0, 2.0}), 0, DType::Int64); }, "log_softmax: dtype must be floating");
  expect_error([] { softmax(zeros({2, 3}), 2); }, "softmax: dimension out of range");
}

TEST(Softmax, GradientOfDtypeCallComesBackInInputDtype) {
  Tensor x = randn({3, 4}).to(DType::Float16).requires_grad_();
  Tensor y = log_softmax(x, 1, DType::Float32);
  (y * randn({3, 4})).sum().backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().dtype(), DType::Float16);
}

TEST(Softmax, DtypeAttributeIsWhatAutocastSees) {
  // The autocast layer (FP32UnlessDtype) reads the attr named "dtype"; the kernel honours it
  // when the call arrives with the attr set and no explicit conversion.
  const OpSchema* op = find_op("softmax");
  ASSERT_NE(op, nullptr);
  Tensor x = randn({2, 5}).to(DType::Float16);
  Tensor y = dispatch1(*op, {x}, {{"dim", int64_t(1)}, {"dtype", DType::Float32}});
  EXPECT_EQ(y.dtype(), DType::Float32);
  EXPECT_TRUE(bit_equal(y, softmax(x.to(DType::Float32), 1)));
}

class SoftmaxReduced : public ::testing::TestWithParam<DType> {};

TEST_P(SoftmaxReduced, EqualsFloat32RoundedOnce) {
  // Computed in f32 from the 16-bit values and rounded once: bit-exact with the f32 op on the
  // same (exactly representable) inputs. inner = 300 > one 256-wide block for dim 0.
  const DType dt = GetParam();
  Generator g(7);
  Tensor x = (randn({5, 3, 100}, {}, &g) * 4.0).to(dt);
  Tensor x32 = x.to(DType::Float32);
  for (int64_t dim : {0, 1, 2}) {
    Tensor y = softmax(x, dim), ly = log_softmax(x, dim);
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_TRUE(bit_equal(y, softmax(x32, dim).to(dt))) << "softmax dim " << dim;
    EXPECT_TRUE(bit_equal(ly, log_softmax(x32, dim).to(dt))) << "log_softmax dim " << dim;
    Tensor gr = randn({5, 3, 100}, {}, &g).to(dt);
    EXPECT_TRUE(bit_equal(softmax_backward(gr, y, dim), softmax_backward(gr.to(DType::Float32), y.to(DType::Float32), dim).to(dt)));
    EXPECT_TRUE(bit_equal(log_softmax_backward(gr, ly, dim),
                          log_softmax_backward(gr.to(DType::Float32), ly.to(DType::Float32), dim).to(dt)));
  }
}
INSTANTIATE_TEST_SUITE_P(Float16AndBFloat16, SoftmaxReduced, ::testing::Values(DType::Float16, DType::BFloat16),
                         [](const auto& info) { return std::string(dtype_short(info.param)); });

TEST(Softmax, LargeInnerDimRunsInParallelAndMatchesSerial) {
  Generator g(9);
  Tensor x = randn({3, 64, 600}, {}, &g);  // > kParallelGrain elements, several blocks per outer
  Tensor y = softmax(x, 1);
  Tensor want = softmax(x.permute({0, 2, 1}).contiguous(), 2).permute({0, 2, 1});
  EXPECT_TRUE(bit_equal(y, want));
}

// Double backward through the tape (the saved softmax output carries its history): the Hessian-
// vector product from backward(create_graph) against a central difference of the gradient.
void expect_hvp_matches_finite_difference(const std::function<Tensor(const Tensor&)>& f, const IntList& sizes) {
  Generator gen(21);
  Tensor x0 = randn(sizes, DType::Float64, &gen), v = randn(sizes, DType::Float64, &gen);
  auto grad_at = [&](const Tensor& at) {
    Tensor x = at.detach().clone().requires_grad_();
    f(x).backward();
    return x.grad().detach();
  };
  Tensor x = x0.clone().requires_grad_();
  f(x).backward(Tensor(), /*retain_graph=*/true, /*create_graph=*/true);
  Tensor g = x.grad();
  ASSERT_TRUE(g.requires_grad()) << "create_graph left the gradient without history";
  x.set_grad(Tensor());
  (g * v).sum().backward();
  const double eps = 1e-6;
  std::vector<double> hv = x.grad().to_vector<double>();
  std::vector<double> fd = ((grad_at(x0 + v * eps) - grad_at(x0 - v * eps)) / (2 * eps)).to_vector<double>();
  for (size_t i = 0; i < hv.size(); ++i) EXPECT_NEAR(hv[i], fd[i], 1e-6 + 1e-4 * std::abs(fd[i])) << i;
}

TEST(Softmax, DoubleBackwardThroughTheTape) {
  Tensor w = randn({3, 5}, DType::Float64);
  expect_hvp_matches_finite_difference([&](const Tensor& x) { return (softmax(x, 1) * w).sum(); }, {3, 5});
  expect_hvp_matches_finite_difference([&](const Tensor& x) { return (log_softmax(x, 0) * w * w).sum(); }, {3, 5});
  Tensor t = i64({4, 0, -100});
  expect_hvp_matches_finite_difference(
      [&](const Tensor& x) { return cross_entropy(x, t, Tensor(), -100, Reduction::Mean, 0.2); }, {3, 5});
  expect_hvp_matches_finite_difference(
      [&](const Tensor& x) { return binary_cross_entropy(sigmoid(x), sigmoid(w)); }, {3, 5});
}

// ---- losses ----
TEST(NllLoss, ValuesFollowPyTorch) {
  Tensor logp = tensor({{-1.0, -2.0, -3.0}, {-0.5, -1.5, -2.5}, {-4.0, -0.25, -1.0}});
  Tensor t = i64({2, 0, 1});
  EXPECT_FLOAT_EQ(nll_loss(logp, t).item<float>(), (3.0f + 0.5f + 0.25f) / 3.0f);
  EXPECT_FLOAT_EQ(nll_loss(logp, t, Tensor(), -100, Reduction::Sum).item<float>(), 3.75f);
  Tensor w = tensor({2.0, 4.0, 1.0});
  // Mean divides by the sum of the weights of the targets: (1*3 + 2*0.5 + 4*0.25) / (1 + 2 + 4)
  EXPECT_FLOAT_EQ(nll_loss(logp, t, w).item<float>(), 5.0f / 7.0f);
  EXPECT_FLOAT_EQ(nll_loss(logp, i64({2, -100, 1}), w).item<float>(), 4.0f / 5.0f);
  std::vector<float> none = nll_loss(logp, i64({2, 7, 1}), w, 7, Reduction::None).to_vector<float>();
  EXPECT_EQ(none, (std::vector<float>{3.0f, 0.0f, 1.0f}));
  EXPECT_EQ(nll_loss(logp, t).dim(), 0);
  // Every target ignored: 0 / 0, NaN (as torch); Sum stays 0.
  EXPECT_TRUE(std::isnan(nll_loss(logp, i64({-100, -100, -100})).item<float>()));
  EXPECT_EQ(nll_loss(logp, i64({-100, -100, -100}), Tensor(), -100, Reduction::Sum).item<float>(), 0.0f);
  // 1-D input with a 0-d target.
  EXPECT_FLOAT_EQ(nll_loss(tensor({-1.0, -2.0}), scalar_tensor(1, DType::Int64)).item<float>(), 2.0f);
}

TEST(NllLoss, AllIgnoredMeanHasZeroGradient) {
  Tensor logp = randn({3, 4}).requires_grad_();
  nll_loss(logp, i64({-100, -100, -100})).backward();
  for (double v : logp.grad().to_vector<double>()) EXPECT_EQ(v, 0.0);
}

TEST(CrossEntropy, IsLogSoftmaxThenNllLoss) {
  Generator g(11);
  Tensor x = randn({6, 5}, DType::Float64, &g);
  Tensor t = i64({0, 4, 2, 2, -100, 1});
  Tensor w = tensor({1.0, 0.5, 2.0, 1.5, 0.25}, DType::Float64);
  for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum})
    EXPECT_TRUE(bit_equal(cross_entropy(x, t, w, -100, r), nll_loss(log_softmax(x, 1), t, w, -100, r)));
}

TEST(CrossEntropy, LabelSmoothingByHand) {
  // eps = 0.2, C = 3, no weight: (1 - eps) nll + eps / C * (-sum_c logp_c), averaged.
  Tensor x = tensor({{1.0, 2.0, 3.0}, {0.5, -0.5, 0.0}}, DType::Float64);
  Tensor lp = log_softmax(x, 1);
  std::vector<double> l = lp.to_vector<double>();
  const double nll = -(l[2] + l[3]) / 2.0, smooth = -(l[0] + l[1] + l[2] + l[3] + l[4] + l[5]) / 2.0;
  EXPECT_NEAR(cross_entropy(x, i64({2, 0}), Tensor(), -100, Reduction::Mean, 0.2).item<double>(),
              0.8 * nll + 0.2 / 3.0 * smooth, 1e-13);
  // Ignored positions contribute nothing to either term, and the mean counts only the rest.
  const double nll1 = -l[2], smooth1 = -(l[0] + l[1] + l[2]);
  EXPECT_NEAR(cross_entropy(x, i64({2, -100}), Tensor(), -100, Reduction::Mean, 0.2).item<double>(),
              0.8 * nll1 + 0.2 / 3.0 * smooth1, 1e-13);
  std::vector<double> none = cross_entropy(x, i64({2, -100}), Tensor(), -100, Reduction::None, 0.2).to_vector<double>();
  EXPECT_NEAR(none[0], 0.8 * nll1 + 0.2 / 3.0 * smooth1, 1e-13);
  EXPECT_EQ(none[1], 0.0);
}

TEST(CrossEntropy, MinusInfinityLogitAtAnIgnoredPositionStaysFinite) {
  // PyTorch masks the smoothing term with masked_fill, so an ignored row whose log-probabilities
  // hold -inf adds 0, not 0 * inf = NaN; the gradient stays finite too.
  const double inf = std::numeric_limits<double>::infinity();
  Tensor x = tensor({{1.0, 2.0, 3.0}, {-inf, 0.0, 1.0}}, DType::Float64).requires_grad_();
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    Tensor l = cross_entropy(x, i64({2, -100}), Tensor(), -100, r, 0.1);
    EXPECT_TRUE(all_finite(l)) << reduction_name(r);
    l.sum().backward();
    EXPECT_TRUE(all_finite(x.grad())) << reduction_name(r);
    x.set_grad(Tensor());
  }
}

TEST(CrossEntropy, OnHalfLogits) {
  // What autocast hands a loss when the model ran in f16. Outside autocast the result stays f16
  // (log_softmax rounds once to f16, nll_loss accumulates in f32 and rounds once).
  Generator g(13);
  Tensor x32 = randn({8, 10}, {}, &g) * 4.0;
  Tensor x16 = x32.to(DType::Float16);
  Tensor t = i64({0, 9, 3, 3, 5, 1, 7, 2});
  Tensor l16 = cross_entropy(x16, t);
  EXPECT_EQ(l16.dtype(), DType::Float16);
  EXPECT_EQ(l16.dim(), 0);
  const double want = cross_entropy(x16.to(DType::Float64), t).item<double>();
  // Each f16 log-probability is rounded once: <= half an ulp, 2^-7 absolute while |logp| < 32
  // (|logits| < 16 here); their mean is off by <= 2^-7, and rounding the mean (|loss| < 8:
  // <= 2^-9) keeps the total inside 2^-6.
  EXPECT_NEAR(l16.item<double>(), want, 0x1p-6);
  // Large f16 logits (around 30000, where exp overflows any float type) stay finite: the row
  // max is subtracted before exp.
  Tensor big = (x32 * 100.0 + 30000.0).to(DType::Float16);
  EXPECT_TRUE(std::isfinite(cross_entropy(big, t).item<double>()));
  EXPECT_TRUE(std::isfinite(cross_entropy(big, t, Tensor(), -100, Reduction::Mean, 0.1).item<double>()));
  // The gradient flows back to the f16 logits in f16.
  Tensor xl = x16.detach().requires_grad_();
  cross_entropy(xl, t, Tensor(), -100, Reduction::Mean, 0.1).backward();
  EXPECT_EQ(xl.grad().dtype(), DType::Float16);
  EXPECT_TRUE(all_finite(xl.grad()));
  // With dtype-f32 logits (what autocast's fp32 policy produces from f16) the loss is f32.
  EXPECT_EQ(cross_entropy(x16.to(DType::Float32), t).dtype(), DType::Float32);
}

// -sum_c w_c t'_c logp_c per row of (N, C) f64 logits, t' = t (1 - eps) + eps / C: the
// definition, written out with scalars.
std::vector<double> prob_rows_by_hand(const Tensor& x, const Tensor& t, const std::vector<double>& w, double eps) {
  const int64_t n = x.size(0), c = x.size(1);
  const std::vector<double> lp = log_softmax(x, 1).to_vector<double>(), tv = t.to_vector<double>();
  std::vector<double> rows(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k) {
      const size_t e = static_cast<size_t>(i * c + k);
      const double tk = tv[e] * (1.0 - eps) + eps / static_cast<double>(c);
      rows[static_cast<size_t>(i)] -= (w.empty() ? 1.0 : w[static_cast<size_t>(k)]) * tk * lp[e];
    }
  return rows;
}

TEST(CrossEntropy, ProbabilityTargetsByHand) {
  Generator g(19);
  Tensor x = randn({4, 3}, DType::Float64, &g) * 2.0;
  Tensor t = softmax(randn({4, 3}, DType::Float64, &g), 1);
  const std::vector<double> w = {2.0, 0.5, 1.0};
  Tensor wt = tensor({2.0, 0.5, 1.0}, DType::Float64);
  for (double eps : {0.0, 0.25}) {
    for (bool weighted : {false, true}) {
      const std::vector<double> rows = prob_rows_by_hand(x, t, weighted ? w : std::vector<double>{}, eps);
      const Tensor wd = weighted ? wt : Tensor();
      double total = 0;
      for (double r : rows) total += r;
      const std::vector<double> none = cross_entropy(x, t, wd, -100, Reduction::None, eps).to_vector<double>();
      ASSERT_EQ(none.size(), rows.size());
      for (size_t i = 0; i < rows.size(); ++i) EXPECT_NEAR(none[i], rows[i], 1e-13) << i;
      EXPECT_NEAR(cross_entropy(x, t, wd, -100, Reduction::Sum, eps).item<double>(), total, 1e-13);
      // Mean divides by the number of rows whatever the weights (the index form divides by the
      // targets' weight sum).
      EXPECT_NEAR(cross_entropy(x, t, wd, -100, Reduction::Mean, eps).item<double>(), total / 4.0, 1e-13);
    }
  }
  // (N, C, d): C is dim 1, one loss per (n, d) position; Mean divides by N * d.
  Tensor xs = randn({2, 3, 4}, DType::Float64, &g), ts = softmax(randn({2, 3, 4}, DType::Float64, &g), 1);
  Tensor none = cross_entropy(xs, ts, wt, -100, Reduction::None, 0.1);
  EXPECT_EQ(none.sizes(), (IntList{2, 4}));
  Tensor rows = cross_entropy(xs.permute({0, 2, 1}).reshape({8, 3}), ts.permute({0, 2, 1}).reshape({8, 3}), wt, -100,
                              Reduction::None, 0.1);
  const std::vector<double> a = none.to_vector<double>(), b = rows.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-13) << i;
  EXPECT_NEAR(cross_entropy(xs, ts, wt, -100, Reduction::Mean, 0.1).item<double>(), sum(rows).item<double>() / 8.0,
              1e-13);
  // (C) logits with a (C) target: a 0-d loss for every reduction but None's (C) -> ().
  Tensor x1 = tensor({0.5, -1.0, 2.0}, DType::Float64), t1 = tensor({0.2, 0.3, 0.5}, DType::Float64);
  const double want1 = prob_rows_by_hand(x1.reshape({1, 3}), t1.reshape({1, 3}), w, 0.0)[0];
  EXPECT_EQ(cross_entropy(x1, t1, wt, -100, Reduction::None).dim(), 0);
  EXPECT_NEAR(cross_entropy(x1, t1, wt).item<double>(), want1, 1e-13);
}

TEST(CrossEntropy, OneHotProbabilitiesEqualClassIndices) {
  Generator g(23);
  Tensor x = randn({5, 4}, DType::Float64, &g);
  Tensor idx = i64({3, 0, 2, 2, 1});
  Tensor onehot = zeros({5, 4}, DType::Float64);
  const std::vector<int64_t> iv = idx.to_vector<int64_t>();
  for (size_t i = 0; i < iv.size(); ++i) set_element(onehot, static_cast<int64_t>(i) * 4 + iv[i], 1.0);
  Tensor w = tensor({1.0, 0.5, 2.0, 1.5}, DType::Float64);
  for (double eps : {0.0, 0.1}) {
    for (Reduction r : {Reduction::None, Reduction::Sum, Reduction::Mean}) {
      const std::vector<double> a = cross_entropy(x, onehot, Tensor(), -100, r, eps).to_vector<double>();
      const std::vector<double> b = cross_entropy(x, idx, Tensor(), -100, r, eps).to_vector<double>();
      for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-13) << reduction_name(r) << " eps " << eps;
    }
    // With weights only Mean differs: the probability form divides by N, the index form by
    // sum_n w[t_n] (PyTorch's two definitions).
    const double sum_w = 1.5 + 1.0 + 2.0 + 2.0 + 0.5;
    const double total = cross_entropy(x, idx, w, -100, Reduction::Sum, eps).item<double>();
    EXPECT_NEAR(cross_entropy(x, onehot, w, -100, Reduction::Sum, eps).item<double>(), total, 1e-13);
    EXPECT_NEAR(cross_entropy(x, onehot, w, -100, Reduction::Mean, eps).item<double>(), total / 5.0, 1e-13);
    EXPECT_NEAR(cross_entropy(x, idx, w, -100, Reduction::Mean, eps).item<double>(), total / sum_w, 1e-13);
  }
}

TEST(CrossEntropy, ProbabilityTargetsGradientsAndEdges) {
  // d/dlogits = sum_c(w t') softmax - w t' (per row, / N for Mean); d/dtarget = -(1 - eps) w logp.
  Generator g(29);
  Tensor x = (randn({3, 4}, DType::Float64, &g)).requires_grad_();
  Tensor t = softmax(randn({3, 4}, DType::Float64, &g), 1).requires_grad_();
  Tensor w = tensor({1.0, 2.0, 0.5, 1.5}, DType::Float64);
  const double eps = 0.2;
  cross_entropy(x, t, w, -100, Reduction::Mean, eps).backward();
  NoGradGuard no_grad;
  Tensor ts = t.detach() * (1.0 - eps) + eps / 4.0;
  Tensor wts = ts * w.reshape({1, 4});
  Tensor gx = (softmax(x.detach(), 1) * sum(wts, IntList{1}, true) - wts) / 3.0;
  Tensor gt = -(log_softmax(x.detach(), 1) * w.reshape({1, 4})) * ((1.0 - eps) / 3.0);
  const std::vector<double> ax = x.grad().to_vector<double>(), bx = gx.to_vector<double>();
  const std::vector<double> at = t.grad().to_vector<double>(), bt = gt.to_vector<double>();
  for (size_t i = 0; i < ax.size(); ++i) EXPECT_NEAR(ax[i], bx[i], 1e-14) << i;
  for (size_t i = 0; i < at.size(); ++i) EXPECT_NEAR(at[i], bt[i], 1e-14) << i;
  // An empty batch: Mean is 0 / 0 = NaN (as PyTorch), Sum 0, None empty.
  Tensor e = zeros({0, 4}, DType::Float64);
  EXPECT_TRUE(std::isnan(cross_entropy(e, e).item<double>()));
  EXPECT_EQ(cross_entropy(e, e, Tensor(), -100, Reduction::Sum).item<double>(), 0.0);
  EXPECT_EQ(cross_entropy(e, e, Tensor(), -100, Reduction::None).sizes(), (IntList{0}));
  // Any negative ignore_index is accepted and unused, as in PyTorch.
  EXPECT_EQ(cross_entropy(x.detach(), t.detach(), Tensor(), -1).item<double>(),
            cross_entropy(x.detach(), t.detach()).item<double>());
  // Dtypes promote: f32 logits with an f64 target give f64.
  EXPECT_EQ(cross_entropy(x.detach().to(DType::Float32), t.detach()).dtype(), DType::Float64);
}

TEST(CrossEntropy, ProbabilityTargetsUnderAutocastRunInFloat32) {
  // cross_entropy is on the fp32 list: under autocast 16-bit logits, probability targets and
  // weights are cast up and the loss is the f32 one on the cast values, bit for bit; the
  // gradients come back to the 16-bit leaves in their own dtype.
  Generator g(31);
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    Tensor x = (randn({6, 5}, {}, &g) * 3.0).to(dt).requires_grad_();
    Tensor t = softmax(randn({6, 5}, {}, &g), 1).to(dt).requires_grad_();
    Tensor w = (rand({5}, {}, &g) + 0.5).to(dt);
    Tensor l;
    {
      amp::AutocastGuard ac(DeviceType::CPU, dt);
      l = cross_entropy(x, t, w, -100, Reduction::Mean, 0.1);
    }
    EXPECT_EQ(l.dtype(), DType::Float32) << dtype_name(dt);
    Tensor want = cross_entropy(x.detach().to(DType::Float32), t.detach().to(DType::Float32), w.to(DType::Float32),
                                -100, Reduction::Mean, 0.1);
    EXPECT_TRUE(bit_equal(l.detach(), want)) << dtype_name(dt);
    l.backward();
    EXPECT_EQ(x.grad().dtype(), dt);
    EXPECT_EQ(t.grad().dtype(), dt);
    EXPECT_TRUE(all_finite(x.grad()));
    // Outside autocast the loss stays in the 16-bit dtype (each op rounds once).
    EXPECT_EQ(cross_entropy(x.detach(), t.detach(), w).dtype(), dt);
  }
}

TEST(MseLoss, Values) {
  Tensor x = tensor({1.0, 2.0, 3.0}), y = tensor({1.5, 2.0, 1.0});
  EXPECT_FLOAT_EQ(mse_loss(x, y).item<float>(), (0.25f + 0.0f + 4.0f) / 3.0f);
  EXPECT_FLOAT_EQ(mse_loss(x, y, Reduction::Sum).item<float>(), 4.25f);
  EXPECT_EQ(mse_loss(x, y, Reduction::None).to_vector<float>(), (std::vector<float>{0.25f, 0.0f, 4.0f}));
  EXPECT_EQ(mse_loss(x.to(DType::Float16), y).dtype(), DType::Float32);  // promoted
  // f16: one rounding of the f32 result.
  Tensor a = randn({33}).to(DType::Float16), b = randn({33}).to(DType::Float16);
  EXPECT_TRUE(bit_equal(mse_loss(a, b, Reduction::None), mse_loss(a.to(DType::Float32), b.to(DType::Float32), Reduction::None).to(DType::Float16)));
}

TEST(BinaryCrossEntropy, ClampsLogAtMinus100AndGradientStaysFinite) {
  Tensor p = tensor({0.0, 1.0, 0.5}).requires_grad_();
  Tensor t = tensor({1.0, 0.0, 1.0});
  Tensor l = binary_cross_entropy(p, t, Tensor(), Reduction::None);
  std::vector<float> v = l.to_vector<float>();
  EXPECT_EQ(v[0], 100.0f);
  EXPECT_EQ(v[1], 100.0f);
  EXPECT_FLOAT_EQ(v[2], std::log(2.0f));
  l.sum().backward();
  std::vector<float> g = p.grad().to_vector<float>();
  EXPECT_FLOAT_EQ(g[0], -1e12f);  // (p - t) / max(p (1 - p), 1e-12)
  EXPECT_FLOAT_EQ(g[1], 1e12f);
  EXPECT_FLOAT_EQ(g[2], -2.0f);
}

TEST(BinaryCrossEntropy, WithLogitsMatchesTheNaiveFormWhereThatIsAccurate) {
  Generator g(17);
  Tensor x = randn({4, 3}, DType::Float64, &g) * 2.0, t = rand({4, 3}, DType::Float64, &g);
  Tensor w = tensor({0.5, 1.0, 2.0}, DType::Float64), pw = tensor({3.0, 1.0, 0.25}, DType::Float64);
  Tensor p = sigmoid(x);
  // PyTorch's definition: -w (pw t log p + (1 - t) log(1 - p)).
  Tensor naive = -(w * (pw * t * log(p) + (1.0 - t) * log(1.0 - p)));
  std::vector<double> a = binary_cross_entropy_with_logits(x, t, w, pw, Reduction::None).to_vector<double>();
  std::vector<double> b = naive.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12);
  EXPECT_NEAR(binary_cross_entropy_with_logits(x, t).item<double>(),
              binary_cross_entropy(p, t).item<double>(), 1e-12);
  // Stable where sigmoid saturates: x = -200, t = 1 costs 200 (BCE on sigmoid would clamp at 100).
  EXPECT_FLOAT_EQ(binary_cross_entropy_with_logits(tensor({-200.0}), tensor({1.0})).item<float>(), 200.0f);
  EXPECT_EQ(binary_cross_entropy_with_logits(tensor({200.0}), tensor({1.0})).item<float>(), 0.0f);
}

TEST(Losses, ReturnZeroDimForMeanAndSum) {
  Tensor x = rand({2, 3}) * 0.8 + 0.1, t = rand({2, 3});
  for (Reduction r : {Reduction::Mean, Reduction::Sum}) {
    EXPECT_EQ(mse_loss(x, t, r).dim(), 0);
    EXPECT_EQ(binary_cross_entropy(x, t, Tensor(), r).dim(), 0);
    EXPECT_EQ(binary_cross_entropy_with_logits(x, t, Tensor(), Tensor(), r).dim(), 0);
    EXPECT_EQ(cross_entropy(x, i64({0, 2}), Tensor(), -100, r, 0.1).dim(), 0);
  }
  EXPECT_EQ(cross_entropy(x, i64({0, 2}), Tensor(), -100, Reduction::None).sizes(), (IntList{2}));
}

TEST(Losses, AmpPolicies) {
  auto policy = [](const char* name) {
    const OpSchema* op = find_op(name);
    EXPECT_NE(op, nullptr) << name;
    return op ? op->amp_policy : AmpPolicy::None;
  };
  EXPECT_EQ(policy("softmax"), AmpPolicy::FP32UnlessDtype);
  EXPECT_EQ(policy("log_softmax"), AmpPolicy::FP32UnlessDtype);
  for (const char* name : {"nll_loss", "cross_entropy", "mse_loss", "binary_cross_entropy_with_logits"})
    EXPECT_EQ(policy(name), AmpPolicy::FP32) << name;
  EXPECT_EQ(policy("cat"), AmpPolicy::None);  // on no CUDA autocast list (docs/autocast-policy.md)
  const OpSchema* bce = find_op("binary_cross_entropy");
  ASSERT_NE(bce, nullptr);
  EXPECT_NE(bce->cuda_autocast_ban.find("binary_cross_entropy (and BCELoss) are unsafe to autocast"), std::string::npos);
  EXPECT_NE(bce->cuda_autocast_ban.find("binary_cross_entropy_with_logits"), std::string::npos);
  EXPECT_TRUE(find_op("cross_entropy")->composite != nullptr);
  EXPECT_FALSE(find_op("argmax")->differentiable);
}

TEST(Losses, BadInputs) {
  Tensor logp = log_softmax(randn({3, 5}), 1);
  expect_error([&] { nll_loss(logp, i64({0, 7, 1})); }, "nll_loss: target 7 at position [1] is out of bounds");
  expect_error([&] { nll_loss(logp, i64({0, -1, 1})); }, "target -1 at position [1] is out of bounds");
  expect_error([&] { nll_loss(log_softmax(randn({2, 5, 3}), 1), i64({{0, 1, 2}, {3, 5, 0}})); },
               "target 5 at position [1, 1] is out of bounds: expected a class in [0, 5)");
  expect_error([&] { cross_entropy(randn({3, 5}), i64({0, 5, 1})); }, "target 5 at position [1] is out of bounds");
  expect_error([&] { nll_loss(logp, tensor({0.0, 1.0, 2.0})); }, "nll_loss: target must hold Int64 class indices, got f32[3]");
  expect_error([&] { nll_loss(logp, rand({3, 5})); }, "nll_loss: target must hold Int64 class indices, got f32[3, 5] "
               "(class-probability targets are not supported)");
  expect_error([&] { nll_loss(logp, i64({0, 1})); }, "nll_loss: expected target of shape [3] for input f32[3, 5], got i64[2]");
  expect_error([&] { cross_entropy(randn({3, 5, 2}), i64({0, 1, 2})); }, "cross_entropy: expected target of shape [3, 2]");
  expect_error([&] { nll_loss(logp, i64({0, 1, 2}), ones({4})); }, "nll_loss: weight must be 1-D of size C = 5 (one weight per class), got f32[4]");
  expect_error([&] { nll_loss(scalar_tensor(1.0), scalar_tensor(0, DType::Int64)); }, "nll_loss: expected input of shape");
  expect_error([&] { cross_entropy(randn({3, 5}), i64({0, 1, 2}), Tensor(), -100, Reduction::Mean, 1.5); },
               "cross_entropy: label_smoothing must be between 0.0 and 1.0, got 1.5");
  expect_error([&] { nll_loss(logp, i64({0, 1, 2}), ones({5}).requires_grad_()); },
               "nll_loss: weight f32[5] requires grad, but nll_loss is not differentiable with respect to weight");
  // cross_entropy with class-probability targets
  expect_error([&] { cross_entropy(randn({3, 5}), tensor({0.0, 1.0, 2.0})); },
               "cross_entropy: a floating target holds class probabilities and must have the logits' shape [3, 5] "
               "(logits f32[3, 5]), got target f32[3]; class indices must be Int64");
  expect_error([&] { cross_entropy(randn({3, 5, 2}), rand({3, 2, 5})); },
               "must have the logits' shape [3, 5, 2] (logits f32[3, 5, 2]), got target f32[3, 2, 5]");
  expect_error([&] { cross_entropy(randn({3, 5}), zeros({3, 5}, DType::Int64)); },
               "cross_entropy: a target of the logits' shape [3, 5] holds class probabilities and must be floating, "
               "got i64[3, 5] (class indices have shape [3])");
  expect_error([&] { cross_entropy(randn({3, 5}), rand({3, 5}), Tensor(), 0); },
               "cross_entropy: ignore_index 0 is not supported with class-probability targets (f32[3, 5])");
  expect_error([&] { cross_entropy(randn({3, 5}), rand({3, 5}), ones({4})); },
               "cross_entropy: weight must be 1-D of size C = 5 (one weight per class), got f32[4]");
  expect_error([&] { cross_entropy(randn({3, 5}), rand({3, 5}), ones({1, 5})); },
               "cross_entropy: weight must be 1-D of size C = 5 (one weight per class), got f32[1, 5]");
  expect_error([&] { cross_entropy(randn({3, 5}), rand({3, 5}), ones({5}, DType::Int64)); },
               "cross_entropy: expected a floating weight, got i64[5]");
  expect_error([&] { cross_entropy(randn({3, 5}), rand({3, 5}), ones({5}).requires_grad_()); },
               "cross_entropy: weight f32[5] requires grad");
  expect_error([&] { cross_entropy(randn({3, 5}), rand({3, 5}), Tensor(), -100, Reduction::Mean, -0.1); },
               "cross_entropy: label_smoothing must be between 0.0 and 1.0, got -0.1");
  expect_error([&] { cross_entropy(zeros({3, 5}, DType::Int64), rand({3, 5})); },
               "cross_entropy: expected a floating logits, got i64[3, 5]");
  expect_error([&] { cross_entropy(scalar_tensor(1.0), scalar_tensor(0.5)); },
               "cross_entropy: expected logits of shape (N, C), (N, C, d1, ...) or (C), got f32[]");
  expect_error([&] { mse_loss(randn({4, 1}), randn({4})); },
               "mse_loss: target f32[4] must have the same shape as input f32[4, 1]");
  expect_error([&] { mse_loss(randn({4}), tensor({1.0, 2.0, 3.0, 4.0}, DType::Int64)); }, "mse_loss: expected a floating target");
  expect_error([] { binary_cross_entropy(tensor({0.5, 1.5}), tensor({1.0, 0.0})); },
               "binary_cross_entropy: all elements of input should be between 0 and 1");
  expect_error([] { binary_cross_entropy(tensor({0.5, NAN}), tensor({1.0, 0.0})); }, "got nan at position [1]");
  expect_error([] { binary_cross_entropy(tensor({0.5}), tensor({1.0, 0.0})); }, "binary_cross_entropy: target f32[2] must have the same shape");
  expect_error([] { binary_cross_entropy(tensor({0.5, 0.5}), tensor({1.0, 0.0}), ones({3})); },
               "binary_cross_entropy: weight f32[3] must be broadcastable to the input's shape [2]");
  expect_error([] { binary_cross_entropy_with_logits(randn({2, 3}), rand({2, 3}), Tensor(), ones({2})); },
               "binary_cross_entropy_with_logits: pos_weight f32[2] must be broadcastable");
  expect_error([] { binary_cross_entropy_with_logits(randn({2, 3}), rand({2, 3}), Tensor(), ones({3}).requires_grad_()); },
               "pos_weight f32[3] requires grad");
}

// ---- cat / stack / argmax / index_select ----
TEST(Cat, ValuesAndPromotion) {
  Tensor a = tensor({{1.0, 2.0}}), b = tensor({{3.0, 4.0}, {5.0, 6.0}}, DType::Float16);
  Tensor c = cat({a, b}, 0);
  EXPECT_EQ(c.dtype(), DType::Float32);
  EXPECT_EQ(c.sizes(), (IntList{3, 2}));
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(cat({b, tensor({{7.0, 8.0}}, DType::Int64)}).dtype(), DType::Float16);  // int + f16 -> f16
  EXPECT_EQ(cat({tensor({1.0}, DType::Int64), tensor({2.0}, DType::Int32)}).dtype(), DType::Int64);
  EXPECT_EQ(cat({b.to(DType::BFloat16), b}).dtype(), DType::Float32);  // f16 with bf16 -> f32, as PyTorch
  // Non-contiguous inputs, negative dim.
  Tensor t = tensor({{1.0, 2.0}, {3.0, 4.0}}).t();
  EXPECT_EQ(cat({t, t}, -1).to_vector<float>(), (std::vector<float>{1, 3, 1, 3, 2, 4, 2, 4}));
  // Gradients come back in each input's dtype.
  Tensor x = randn({2, 3}).requires_grad_(), y = randn({2, 1}).to(DType::Float16).requires_grad_();
  cat({x, y}, 1).sum().backward();
  EXPECT_EQ(x.grad().dtype(), DType::Float32);
  EXPECT_EQ(y.grad().dtype(), DType::Float16);
  EXPECT_EQ(y.grad().sizes(), (IntList{2, 1}));
}

TEST(Cat, ManyInputs) {
  // More inputs than one op call records (64): joined in groups, values and gradients intact.
  TensorList ts;
  for (int i = 0; i < 150; ++i) ts.push_back(full({1, 2}, static_cast<double>(i), DType::Float64).requires_grad_());
  ts.push_back(zeros({0}, DType::Float64).requires_grad_());  // a legacy empty tensor in the last group
  Tensor c = stack(TensorList(ts.begin(), ts.begin() + 150), 0).squeeze(1);
  Tensor d = cat(ts, 0);
  EXPECT_EQ(d.sizes(), (IntList{150, 2}));
  EXPECT_TRUE(bit_equal(c, d));
  EXPECT_EQ(get_element(d, 2 * 149 + 1), 149.0);
  (d * arange(0, 300, 1, TensorOptions(DType::Float64)).reshape({150, 2})).sum().backward();
  EXPECT_EQ(ts[149].grad().to_vector<double>(), (std::vector<double>{298.0, 299.0}));
  EXPECT_EQ(ts[150].grad().sizes(), (IntList{0}));
}

TEST(Cat, StackAndBadInputs) {
  Tensor s = stack({tensor({1.0, 2.0}), tensor({3.0, 4.0})}, -1);
  EXPECT_EQ(s.sizes(), (IntList{2, 2}));
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{1, 3, 2, 4}));
  EXPECT_EQ(stack({scalar_tensor(1.0), scalar_tensor(2.0)}).sizes(), (IntList{2}));
  expect_error([] { cat({}, 0); }, "cat: expected a non-empty list of tensors");
  expect_error([] { cat({zeros({2, 3}), zeros({2, 4}), zeros({3, 4})}, 1); },
               "cat: sizes of tensors must match except in dimension 1: expected size 2 but got size 3 in dimension 0 for tensor 2");
  expect_error([] { cat({zeros({2, 3}), zeros({2})}, 0); }, "cat: tensors must have the same number of dimensions");
  expect_error([] { cat({zeros({2}), scalar_tensor(1.0)}); }, "cat: zero-dimensional tensor (at position 1) cannot be concatenated");
  expect_error([] { cat({zeros({2, 3})}, 2); }, "cat: dimension out of range");
  expect_error([] { stack({}); }, "stack: expected a non-empty list of tensors");
  expect_error([] { stack({zeros({2, 3}), zeros({2, 4})}); }, "stack: expects each tensor to be equal size, but got f32[2, 3] at entry 0 and f32[2, 4] at entry 1");
}

TEST(Argmax, FirstIndexOfTheMaxNanWins) {
  Tensor x = tensor({{1.0, 5.0, 5.0, 2.0}, {7.0, 0.0, 7.0, -1.0}, {1.0, NAN, 9.0, NAN}});
  EXPECT_EQ(argmax(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(argmax(x, 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 2, 2}));
  EXPECT_EQ(argmax(x).item<int64_t>(), 9);
  EXPECT_EQ(argmax(x, 1, true).sizes(), (IntList{3, 1}));
  EXPECT_EQ(argmax(x, std::nullopt, true).sizes(), (IntList{1, 1}));
  EXPECT_EQ(argmax(x, -1).dtype(), DType::Int64);
  EXPECT_EQ(argmax(tensor({3.0, 1.0, 3.0}, DType::Int64)).item<int64_t>(), 0);
  EXPECT_EQ(argmax(tensor({0.5, 2.5, 1.0}, DType::Float16)).item<int64_t>(), 1);
  Tensor xr = randn({2, 3}).requires_grad_();
  EXPECT_FALSE(argmax(xr, 1).requires_grad());
  expect_error([] { argmax(zeros({0})); }, "argmax: cannot take the argmax of an empty tensor");
  expect_error([] { argmax(zeros({2, 0}), 1); }, "argmax: cannot reduce dimension 1 of size 0");
  EXPECT_EQ(argmax(zeros({0, 3}), 1).sizes(), (IntList{0}));
}

TEST(IndexSelect, ValuesRepeatedIndicesAndErrors) {
  Tensor x = tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}});
  EXPECT_EQ(index_select(x, 1, i64({2, 0, 2})).to_vector<float>(), (std::vector<float>{3, 1, 3, 6, 4, 6}));
  EXPECT_EQ(index_select(x, 0, i64({1})).to_vector<float>(), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(index_select(x.t(), 0, i64({2, 2})).to_vector<float>(), (std::vector<float>{3, 6, 3, 6}));
  EXPECT_EQ(index_select(x, 1, scalar_tensor(1, DType::Int64)).sizes(), (IntList{2, 1}));
  EXPECT_EQ(index_select(x, 1, tensor(std::vector<double>{}, {0}, DType::Int64)).sizes(), (IntList{2, 0}));
  // Repeated indices accumulate their gradients (f16: in f32, rounded once).
  Tensor h = ones({2, 3}, DType::Float16).requires_grad_();
  index_select(h, 1, i64({2, 0, 2, 2})).sum().backward();
  EXPECT_EQ(h.grad().dtype(), DType::Float16);
  EXPECT_EQ(h.grad().to_vector<float>(), (std::vector<float>{1, 0, 3, 1, 0, 3}));
  expect_error([&] { index_select(x, 1, i64({0, 3})); }, "index_select: index 3 at position 1 is out of bounds for dimension 1 with size 3");
  expect_error([&] { index_select(x, 0, i64({-1})); }, "index -1 at position 0 is out of bounds");
  expect_error([&] { index_select(x, 0, tensor({0.0})); }, "index_select: index must be Int64, got f32[1]");
  expect_error([&] { index_select(x, 0, i64({{0, 1}})); }, "index_select: index must be 1-D, got i64[1, 2]");
  expect_error([&] { index_select(x, 2, i64({0})); }, "index_select: dimension out of range");
}

}  // namespace
}  // namespace mixtape::testing
