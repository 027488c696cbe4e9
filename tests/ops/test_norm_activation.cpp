// tests/ops/test_norm_activation.cpp — gelu, leaky_relu, clamp, where, batch_norm, layer_norm,
// dropout: double-backward checks against finite differences of the first derivative, 16-bit
// round-once checks, the running-statistics and AMP-dtype behaviour of batch_norm
// (docs/amp-behaviours.md behaviour 4), dropout's statistics and determinism, and every bad-input
// error. The Float64 gradchecks derive from the samples the ops declare with their definitions
// (tests/ops/test_op_samples.cpp). PyTorch values: see test_norm_activation_vs_torch.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <omp.h>

#include "leaf.h"
#include "ops/activation.h"
#include "ops/dropout.h"
#include "ops/normalization.h"

namespace mixtape::testing {
namespace {

constexpr DType F64 = DType::Float64;

// A seeded f64 leaf with every |value| in [0.25, 1.25): away from the kinks at 0.
Tensor nonzero_leaf(const IntList& sizes, uint64_t seed) {
  Tensor u = leaf(sizes, -1.0, 1.0, seed).detach();
  Tensor t = u + sign(u) * 0.25;
  return t.detach().requires_grad_();
}
Tensor constant(const IntList& sizes, double lo, double hi, uint64_t seed) { return leaf(sizes, lo, hi, seed).detach(); }

// ---- helpers ----
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}
#define EXPECT_ERROR_HAS(stmt, ...)                                         \
  do {                                                                      \
    std::string _err = error_of([&] { (void)(stmt); });                     \
    for (const char* _s : {__VA_ARGS__})                                    \
      EXPECT_NE(_err.find(_s), std::string::npos) << "missing '" << _s << "' in: " << _err; \
  } while (0)

bool bit_equal(const Tensor& a, const Tensor& b) {
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.dtype() == cb.dtype() && ca.sizes() == cb.sizes() &&
         std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}
std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }
// (x > 0) as a bool tensor (mixtape has no comparison op besides eq yet).
Tensor positive_mask(const Tensor& x) {
  std::vector<double> m;
  for (double v : vals(x)) m.push_back(v > 0 ? 1.0 : 0.0);
  return tensor(m, x.sizes(), DType::Bool);
}

// Double backward through the engine: S(inputs) = sum_i <d f / d input_i, v_i> with the first
// derivatives taken with create_graph; d S / d input_k by a second backward must match central
// differences of S (each S evaluation is a forward and a first-order backward). Same
// tolerances as gradcheck (atol 1e-5, rtol 1e-3, eps 1e-6): S is smooth at the sample points.
void expect_double_backward(const std::function<Tensor(const TensorList&)>& f, const TensorList& inputs,
                            const std::string& what) {
  TensorList v;
  for (size_t i = 0; i < inputs.size(); ++i) v.push_back(constant(inputs[i].sizes(), -1, 1, 100 + i));
  auto clear = [&] {
    for (const Tensor& x : inputs) x.set_grad(Tensor());
  };
  auto s_value = [&]() {
    clear();
    autograd::backward({f(inputs)});
    double s = 0;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].grad().defined()) s += (inputs[i].grad() * v[i]).sum().item<double>();
    return s;
  };
  clear();
  // retain_graph (as Tensor::backward implies with create_graph): the second backward may run
  // through nodes of the first graph again (layer_norm's statistics outputs).
  autograd::backward({f(inputs)}, {}, /*retain_graph=*/true, /*create_graph=*/true);
  Tensor S;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor g = inputs[i].grad();
    if (!g.defined() || !g.requires_grad()) continue;
    Tensor term = (g * v[i]).sum();
    S = S.defined() ? S + term : term;
  }
  ASSERT_TRUE(S.defined()) << what << ": no first derivative depends on the inputs";
  clear();
  autograd::backward({S});
  std::vector<std::vector<double>> analytic;
  for (const Tensor& x : inputs)
    analytic.push_back(x.grad().defined() ? vals(x.grad()) : std::vector<double>(static_cast<size_t>(x.numel()), 0.0));
  const double eps = 1e-6;
  int bad = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    for (int64_t e = 0; e < inputs[k].numel(); ++e) {
      const double x0 = get_element(inputs[k], e);
      set_element(inputs[k], e, x0 + eps);
      const double sp = s_value();
      set_element(inputs[k], e, x0 - eps);
      const double sm = s_value();
      set_element(inputs[k], e, x0);
      const double num = (sp - sm) / (2 * eps), a = analytic[k][static_cast<size_t>(e)];
      if (!(std::abs(a - num) <= 1e-5 + 1e-3 * std::abs(num)) && bad++ < 5)
        ADD_FAILURE() << what << ": d2 wrt input " << k << " element " << e << ": analytic " << a << " numeric " << num;
    }
  }
  clear();
}

// ---- double backward through the engine ----
TEST(NormActivation, DoubleBackwardMatchesFiniteDifferences) {
  expect_double_backward([](const TensorList& x) { return (gelu(x[0]) * gelu(x[0], "tanh")).sum(); },
                         {leaf({5}, -2, 2, 31)}, "gelu");
  expect_double_backward([](const TensorList& x) { return (leaky_relu(x[0], 0.2) * x[1]).sum(); },
                         {nonzero_leaf({5}, 32), leaf({5}, -1, 1, 33)}, "leaky_relu");
  expect_double_backward(
      [](const TensorList& x) { return (clamp(x[0], -0.5, 0.5) * x[1]).sum(); },
      {tensor({-2.0, -0.3, 0.1, 0.45, 1.7}, F64).requires_grad_(), leaf({5}, -1, 1, 34)}, "clamp");
  expect_double_backward(
      [](const TensorList& x) {
        Tensor cond = tensor({1.0, 0.0, 1.0}, DType::Bool);
        return (where(cond, x[0] * x[0], x[1]) * x[1]).sum();
      },
      {leaf({2, 3}, -1, 1, 35), leaf({3}, -1, 1, 36)}, "where");
  expect_double_backward(
      [](const TensorList& x) {
        Generator g(77);
        return (dropout(x[0], 0.4, true, &g) * x[0]).sum();
      },
      {leaf({3, 4}, -1, 1, 37)}, "dropout");
  for (bool training : {true, false}) {
    expect_double_backward(
        [training](const TensorList& x) {
          Tensor rm = constant({3}, -0.5, 0.5, 21), rv = constant({3}, 0.5, 2.0, 22);
          Tensor y = batch_norm(x[0], rm, rv, x[1], x[2], training);
          return (y * y * constant(y.sizes(), -1, 1, 40)).sum();
        },
        {leaf({3, 3, 2}, -1, 1, 38), leaf({3}, 0.5, 2, 39), leaf({3}, -1, 1, 41)},
        training ? "batch_norm/train" : "batch_norm/eval");
  }
  expect_double_backward(
      [](const TensorList& x) {
        Tensor y = batch_norm(x[0], Tensor(), Tensor(), Tensor(), Tensor(), true);
        return (y * y * y * constant(y.sizes(), -1, 1, 40)).sum();
      },
      {leaf({4, 2}, -1, 1, 42)}, "batch_norm/train-noaffine");
  expect_double_backward(
      [](const TensorList& x) {
        Tensor y = layer_norm(x[0], {3, 2}, x[1], x[2]);
        return (y * y * constant(y.sizes(), -1, 1, 43)).sum();
      },
      {leaf({2, 3, 2}, -1, 1, 44), leaf({3, 2}, 0.5, 2, 45), leaf({3, 2}, -1, 1, 46)}, "layer_norm");
}

// ---- activations ----
TEST(NormActivation, GeluValues) {
  Tensor x = tensor({-2.0, -0.5, 0.0, 1.0, 3.0}, F64);
  std::vector<double> none = vals(gelu(x)), tanh_form = vals(gelu(x, "tanh"));
  std::vector<double> xs = vals(x);
  for (size_t i = 0; i < xs.size(); ++i) {
    const double t = xs[i];
    EXPECT_NEAR(none[i], 0.5 * t * (1 + std::erf(t / std::sqrt(2.0))), 1e-15);
    EXPECT_NEAR(tanh_form[i], 0.5 * t * (1 + std::tanh(std::sqrt(2 / M_PI) * (t + 0.044715 * t * t * t))), 1e-15);
  }
  EXPECT_NEAR(none[3], 0.8413447460685429, 1e-15);
  EXPECT_NEAR(tanh_form[3], 0.8411919906082768, 1e-15);
  EXPECT_ERROR_HAS(gelu(x, "exact"), "gelu", "'none' or 'tanh'", "'exact'");
  EXPECT_ERROR_HAS(gelu(tensor({1.0}, DType::Int64)), "gelu", "floating", "i64[1]");
}

TEST(NormActivation, LeakyReluAndClampSubgradients) {
  // leaky_relu'(0) = slope (PyTorch tests x > 0); clamp' = 1 on the closed interval.
  Tensor x = tensor({-1.0, 0.0, 2.0}, F64).requires_grad_();
  leaky_relu(x, 0.25).sum().backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{0.25, 0.25, 1.0}));
  EXPECT_EQ(vals(leaky_relu(x.detach(), 0.25)), (std::vector<double>{-0.25, 0.0, 2.0}));

  Tensor y = tensor({-1.0, -0.5, 0.0, 0.5, 1.0, NAN}, F64).requires_grad_();
  Tensor c = clamp(y, -0.5, 0.5);
  std::vector<double> cv = vals(c);
  EXPECT_EQ(std::vector<double>(cv.begin(), cv.end() - 1), (std::vector<double>{-0.5, -0.5, 0.0, 0.5, 0.5}));
  EXPECT_TRUE(std::isnan(cv.back()));  // NaN passes through
  c.sum().backward();
  EXPECT_EQ(vals(y.grad()), (std::vector<double>{0, 1, 1, 1, 0, 0}));  // bounds included; NaN gets 0
  // min > max: every value becomes max (PyTorch's order), no gradient anywhere.
  EXPECT_EQ(vals(clamp(tensor({-3.0, 0.0, 3.0}), 1.0, -1.0)), (std::vector<double>{-1, -1, -1}));
  // Integers: integer bounds; bounds beyond the dtype's range act as its ends.
  Tensor i = tensor({-5.0, 0.0, 7.0, 300.0}, DType::Int64);
  Tensor ci = clamp(i, -2.0, 5.0);
  EXPECT_EQ(ci.dtype(), DType::Int64);
  EXPECT_EQ(vals(ci), (std::vector<double>{-2, 0, 5, 5}));
  EXPECT_EQ(vals(clamp(tensor({0.0, 200.0, 255.0}, DType::UInt8), -10.0, 1e30)), (std::vector<double>{0, 200, 255}));
  EXPECT_EQ(vals(clamp(tensor({-9.0, 9.0}, DType::Int64), -1e300, 1e300)), (std::vector<double>{-9, 9}));
  EXPECT_ERROR_HAS(clamp(i, 0.5, std::nullopt), "clamp", "integer bounds", "min=0.5");
  EXPECT_ERROR_HAS(clamp(x, std::nullopt, std::nullopt), "clamp", "at least one of min or max");
  EXPECT_ERROR_HAS(clamp(tensor({1.0}, DType::Bool), 0.0, 1.0), "clamp", "bool");
  EXPECT_ERROR_HAS(leaky_relu(tensor({1.0}, DType::Int32)), "leaky_relu", "floating", "i32[1]");
}

TEST(NormActivation, WhereBroadcastsPromotesAndRoutesGradients) {
  Tensor cond = tensor({1.0, 0.0}, {2, 1}, DType::Bool);
  Tensor a = tensor({1.0, 2.0, 3.0}, F64).requires_grad_();          // (3)
  Tensor b = tensor({10.0, 20.0}, {2, 1}, DType::Float32).requires_grad_();
  Tensor y = where(cond, a, b);
  EXPECT_EQ(y.dtype(), F64);
  EXPECT_EQ(y.sizes(), (IntList{2, 3}));
  EXPECT_EQ(vals(y), (std::vector<double>{1, 2, 3, 20, 20, 20}));
  (y * tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}}, F64)).sum().backward();
  EXPECT_EQ(vals(a.grad()), (std::vector<double>{1, 2, 3}));  // row 0 only, summed over rows
  EXPECT_EQ(b.grad().dtype(), DType::Float32);                  // back in b's own dtype
  EXPECT_EQ(vals(b.grad()), (std::vector<double>{0, 15}));
  // Wrapped numbers promote weakly: f16 with a Python-style 0.1 stays f16.
  Tensor h = tensor({1.0, 2.0}, DType::Float16);
  Tensor hw = where(tensor({1.0, 0.0}, DType::Bool), h, wrapped_scalar(0.1));
  EXPECT_EQ(hw.dtype(), DType::Float16);
  EXPECT_EQ(vals(hw)[1], static_cast<double>(static_cast<float>(Half(0.1f))));
  // Integers and bool select too (a byte copy).
  EXPECT_EQ(vals(where(tensor({0.0, 1.0}, DType::Bool), tensor({1.0, 2.0}, DType::Int64),
                       tensor({7.0, 8.0}, DType::Int64))),
            (std::vector<double>{7, 2}));
  // A strided (transposed) operand.
  Tensor t = tensor({{1.0, 2.0}, {3.0, 4.0}}, F64).t();
  EXPECT_EQ(vals(where(tensor({1.0, 0.0}, DType::Bool), t, wrapped_scalar(0.0))), (std::vector<double>{1, 0, 2, 0}));
  EXPECT_ERROR_HAS(where(tensor({1.0, 0.0}), a, a), "where", "condition", "bool", "f32[2]");
  EXPECT_ERROR_HAS(where(tensor({1.0, 0.0}, DType::Bool), a, a), "where", "[2]", "[3]");
  EXPECT_ERROR_HAS(where(tensor({1.0}, DType::Bool), a, Tensor()), "where", "other", "undefined");
  EXPECT_ERROR_HAS(gelu(Tensor()), "gelu", "undefined");
  EXPECT_ERROR_HAS(clamp(Tensor(), 0.0, 1.0), "clamp", "undefined");
}

// 16-bit pointwise ops equal the f32 computation rounded once, bit for bit.
class NormActivationReduced : public ::testing::TestWithParam<DType> {};
TEST_P(NormActivationReduced, PointwiseRoundOnce) {
  const DType dt = GetParam();
  Generator gen(51);
  Tensor x = (randn({257}, {}, &gen) * 3.0).to(dt), g = randn({257}, {}, &gen).to(dt);
  auto f32 = [](const Tensor& t) { return t.to(DType::Float32); };
  auto check = [&](const char* name, const Tensor& got, const Tensor& want32) {
    EXPECT_EQ(got.dtype(), dt) << name;
    EXPECT_TRUE(bit_equal(got, want32.to(dt))) << name << " in " << dtype_name(dt);
  };
  check("gelu", gelu(x), gelu(f32(x)));
  check("gelu tanh", gelu(x, "tanh"), gelu(f32(x), "tanh"));
  check("leaky_relu", leaky_relu(x, 0.1), leaky_relu(f32(x), 0.1));
  check("clamp", clamp(x, -0.3, 1.1), clamp(f32(x), -0.3, 1.1));
  check("gelu_grad", gelu_grad(g, x, false), gelu_grad(f32(g), f32(x), false));
  check("gelu_grad tanh", gelu_grad(g, x, true), gelu_grad(f32(g), f32(x), true));
  check("leaky_relu_grad", leaky_relu_grad(g, x, 0.1), leaky_relu_grad(f32(g), f32(x), 0.1));
  check("clamp_grad", clamp_grad(g, x, -0.3, 1.1), clamp_grad(f32(g), f32(x), -0.3, 1.1));
  Tensor cond = positive_mask(x);
  check("where", where(cond, x, g), where(cond, f32(x), f32(g)));
  Generator d1(9), d2(9);
  check("dropout", dropout(x, 0.3, true, &d1), dropout(f32(x), 0.3, true, &d2));
  check("layer_norm", layer_norm(x.view({1, 257}), {257}), layer_norm(f32(x).view({1, 257}), {257}));
}
INSTANTIATE_TEST_SUITE_P(Dtypes, NormActivationReduced, ::testing::Values(DType::Float16, DType::BFloat16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_short(i.param)); });

// ---- batch_norm ----
// Reference batch statistics of x (N, C, *) per channel, in double.
struct Stats {
  std::vector<double> mean, var, var_unbiased;
};
Stats channel_stats(const Tensor& x) {
  const int64_t N = x.size(0), C = x.size(1), S = x.numel() / (N * C);
  std::vector<double> v = vals(x);
  Stats s{std::vector<double>(C), std::vector<double>(C), std::vector<double>(C)};
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0, sq = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < S; ++j) sum += v[static_cast<size_t>((n * C + c) * S + j)];
    const double m = sum / static_cast<double>(N * S);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < S; ++j) sq += std::pow(v[static_cast<size_t>((n * C + c) * S + j)] - m, 2);
    s.mean[c] = m;
    s.var[c] = sq / static_cast<double>(N * S);
    s.var_unbiased[c] = sq / static_cast<double>(N * S - 1);
  }
  return s;
}

TEST(BatchNorm, TrainingUpdatesRunningStatsInPlaceAndBumpsVersions) {
  Generator gen(61);
  Tensor x = randn({4, 3, 5}, F64, &gen) * 2.0 + 1.0;
  Tensor w = tensor({1.5, 0.5, -1.0}, F64).requires_grad_(), b = tensor({0.1, 0.2, 0.3}, F64).requires_grad_();
  Tensor rm = tensor({0.5, -0.5, 0.0}, F64), rv = tensor({1.0, 2.0, 0.5}, F64);
  const std::vector<double> rm0 = vals(rm), rv0 = vals(rv);
  const uint32_t vm = rm.version(), vv = rv.version();
  const double momentum = 0.25, eps = 1e-3;
  Tensor y = batch_norm(x, rm, rv, w, b, true, momentum, eps);
  const Stats s = channel_stats(x);
  std::vector<double> rmv = vals(rm), rvv = vals(rv);
  for (size_t c = 0; c < 3; ++c) {
    EXPECT_NEAR(rmv[c], (1 - momentum) * rm0[c] + momentum * s.mean[c], 1e-14);
    EXPECT_NEAR(rvv[c], (1 - momentum) * rv0[c] + momentum * s.var_unbiased[c], 1e-14);  // unbiased
  }
  EXPECT_GT(rm.version(), vm);
  EXPECT_GT(rv.version(), vv);
  // The update is not on the tape; the output normalises with the biased batch variance.
  EXPECT_FALSE(rm.requires_grad());
  EXPECT_EQ(rm.grad_fn(), nullptr);
  EXPECT_TRUE(y.requires_grad());
  std::vector<double> xv = vals(x), yv = vals(y), wv = vals(w), bv = vals(b);
  for (size_t i = 0; i < xv.size(); ++i) {
    const size_t c = (i / 5) % 3;
    EXPECT_NEAR(yv[i], (xv[i] - s.mean[c]) / std::sqrt(s.var[c] + eps) * wv[c] + bv[c], 1e-13);
  }
  // A copy of a running statistic saved for some other backward sees the in-place write.
  Tensor p = tensor({1.0, 2.0, 3.0}, F64).requires_grad_();
  Tensor z = (p * rm).sum();
  batch_norm(x, rm, rv, Tensor(), Tensor(), true);
  EXPECT_ERROR_HAS(z.backward(), "in-place");
  // Two training forwards, then the first one's backward: batch_norm saves no running statistic.
  Tensor x2 = x.detach().requires_grad_();
  Tensor y1 = batch_norm(x2, rm, rv, w, b, true);
  batch_norm(x2, rm, rv, w, b, true);
  EXPECT_NO_THROW(y1.sum().backward());
}

TEST(BatchNorm, EvalUsesRunningStats) {
  Generator gen(62);
  Tensor x = randn({3, 2, 2, 2}, F64, &gen);
  Tensor rm = tensor({0.3, -0.2}, F64), rv = tensor({0.8, 1.7}, F64);
  Tensor w = tensor({2.0, -0.5}, F64), b = tensor({0.5, 1.0}, F64);
  const uint32_t vm = rm.version();
  Tensor y = batch_norm(x, rm, rv, w, b, false, 0.1, 1e-5);
  EXPECT_EQ(rm.version(), vm);  // eval never writes
  EXPECT_EQ(vals(rm), (std::vector<double>{0.3, -0.2}));
  std::vector<double> xv = vals(x), yv = vals(y);
  const double m[2] = {0.3, -0.2}, v[2] = {0.8, 1.7}, ww[2] = {2.0, -0.5}, bb[2] = {0.5, 1.0};
  for (size_t i = 0; i < xv.size(); ++i) {
    const size_t c = (i / 4) % 2;
    EXPECT_NEAR(yv[i], (xv[i] - m[c]) / std::sqrt(v[c] + 1e-5) * ww[c] + bb[c], 1e-14);
  }
  // Training without running statistics (track_running_stats=False) works and writes nothing.
  EXPECT_NO_THROW(batch_norm(x, Tensor(), Tensor(), w, b, true));
}

// Behaviour 4 (docs/amp-behaviours.md): f16/bf16 input with f32 weight, bias and running statistics ->
// 16-bit output, f32 statistics, updated. Expected: the f32 computation on the same values.
// Derivation of the tolerance (zero): both paths read the same values (a 16-bit number is exact
// in f32), accumulate the statistics in f64 in the same order, and form the same per-channel
// f64 coefficients, so the f32 running statistics are identical; each output element is the
// same float expression x * scale + shift rounded once -- to f16 directly, or to f32 (where it
// is already exact: it was computed in float) and then to f16. Same for the backward. So the
// 16-bit results equal the f32 ones rounded to 16 bits, bit for bit.
TEST_P(NormActivationReduced, BatchNormHalfInputWithFloatParams) {
  const DType dt = GetParam();
  // 9 values per row (shorter than the 32 statistics lanes), and 340 (a tail of 20 lanes; 16-bit
  // rows are widened in blocks of 256: a full block and a partial one).
  for (const IntList& shape : {IntList{8, 4, 3, 3}, IntList{3, 4, 20, 17}}) {
    SCOPED_TRACE(shape_str(shape));
    Generator gen(63);
    Tensor x16 = (randn(shape, {}, &gen) * 3.0 + 1.0).to(dt);
    Tensor x32 = x16.to(DType::Float32);
    auto params = [] {
      return std::vector<Tensor>{tensor({0.1, 0.2, -0.3, 0.0}), tensor({1.0, 2.0, 0.5, 1.5}),
                                 tensor({1.0, 0.5, -2.0, 1.5}).requires_grad_(), tensor({0.0, 0.1, 0.2, 0.3}).requires_grad_()};
    };
    auto p16 = params(), p32 = params();
    Tensor xg16 = x16.detach().requires_grad_(), xg32 = x32.detach().requires_grad_();
    Tensor y16 = batch_norm(xg16, p16[0], p16[1], p16[2], p16[3], true);
    Tensor y32 = batch_norm(xg32, p32[0], p32[1], p32[2], p32[3], true);
    EXPECT_EQ(y16.dtype(), dt);
    EXPECT_EQ(p16[0].dtype(), DType::Float32);
    EXPECT_TRUE(bit_equal(y16, y32.to(dt)));
    EXPECT_TRUE(bit_equal(p16[0], p32[0])) << "running_mean";
    EXPECT_TRUE(bit_equal(p16[1], p32[1])) << "running_var";
    EXPECT_NE(vals(p16[0]), (std::vector<double>{static_cast<float>(0.1), static_cast<float>(0.2),
                                                 static_cast<float>(-0.3), 0.0}));  // updated
    Tensor gout = randn(shape, {}, &gen).to(dt);
    (y16 * gout).sum().backward();
    (y32 * gout.to(DType::Float32)).sum().backward();
    EXPECT_EQ(xg16.grad().dtype(), dt);
    EXPECT_EQ(p16[2].grad().dtype(), DType::Float32);
    EXPECT_TRUE(bit_equal(xg16.grad(), xg32.grad().to(dt))) << "grad x";
    // grad w, b: sums of products of the same values; f64 accumulation of f32 vs 16-bit-valued
    // terms is identical term by term (the 16-bit gradient was rounded to 16 bits before the sum
    // in neither path: both sum g (16-bit exact) times xhat in f64).
    EXPECT_TRUE(bit_equal(p16[2].grad(), p32[2].grad())) << "grad weight";
    EXPECT_TRUE(bit_equal(p16[3].grad(), p32[3].grad())) << "grad bias";
    // Eval: same statement with the running statistics.
    EXPECT_TRUE(bit_equal(batch_norm(x16, p16[0], p16[1], p16[2], p16[3], false),
                          batch_norm(x32, p32[0], p32[1], p32[2], p32[3], false).to(dt)));
  }
}

TEST(BatchNorm, AmpPolicies) {
  EXPECT_EQ(find_op("batch_norm")->amp_policy, AmpPolicy::None);  // on no autocast list
  EXPECT_EQ(find_op("layer_norm")->amp_policy, AmpPolicy::FP32);  // PyTorch's fp32 list
  for (const char* op : {"gelu", "leaky_relu", "clamp", "where", "dropout"})
    EXPECT_EQ(find_op(op)->amp_policy, AmpPolicy::None) << op;
}

TEST(BatchNorm, BadInputs) {
  Tensor x = zeros({4, 3}), c3 = ones({3});
  EXPECT_ERROR_HAS(batch_norm(zeros({5}), c3, c3, c3, c3, true), "batch_norm", "(N, C)", "f32[5]");
  EXPECT_ERROR_HAS(batch_norm(x, c3, c3, ones({4}), c3, true), "batch_norm", "weight", "[3]", "f32[4]");
  EXPECT_ERROR_HAS(batch_norm(x, ones({2}), c3, c3, c3, true), "batch_norm", "running_mean", "[3]", "f32[2]");
  EXPECT_ERROR_HAS(batch_norm(x, c3, c3, c3, ones({3, 1}), true), "batch_norm", "bias", "f32[3, 1]");
  EXPECT_ERROR_HAS(batch_norm(zeros({1, 3}), c3, c3, c3, c3, true), "batch_norm", "more than 1 value per channel",
                   "f32[1, 3]");
  EXPECT_ERROR_HAS(batch_norm(x, Tensor(), Tensor(), c3, c3, false), "batch_norm", "evaluation mode");
  EXPECT_ERROR_HAS(batch_norm(x, c3, Tensor(), c3, c3, true), "batch_norm", "only running_mean");
  EXPECT_ERROR_HAS(batch_norm(zeros({4, 3}, DType::Int64), c3, c3, c3, c3, true), "batch_norm", "floating", "i64");
  EXPECT_ERROR_HAS(batch_norm(x, zeros({3}, DType::Int64), c3, c3, c3, true), "batch_norm", "running_mean",
                   "floating", "i64[3]");
  EXPECT_ERROR_HAS(batch_norm(Tensor(), c3, c3, c3, c3, true), "batch_norm", "undefined");
  EXPECT_ERROR_HAS(batch_norm_backward(zeros({4, 2}), x, c3, c3, c3, true, 1e-5), "batch_norm_backward", "grad_out",
                   "[4, 3]", "f32[4, 2]");
}

// ---- layer_norm ----
TEST(LayerNorm, ValuesAndBadInputs) {
  Generator gen(71);
  Tensor x = randn({2, 3, 4}, F64, &gen), w = randn({3, 4}, F64, &gen), b = randn({3, 4}, F64, &gen);
  Tensor y = layer_norm(x, {3, 4}, w, b, 1e-3);
  std::vector<double> xv = vals(x), yv = vals(y), wv = vals(w), bv = vals(b);
  for (size_t r = 0; r < 2; ++r) {
    double m = 0, v = 0;
    for (size_t j = 0; j < 12; ++j) m += xv[r * 12 + j] / 12;
    for (size_t j = 0; j < 12; ++j) v += std::pow(xv[r * 12 + j] - m, 2) / 12;
    for (size_t j = 0; j < 12; ++j)
      EXPECT_NEAR(yv[r * 12 + j], (xv[r * 12 + j] - m) / std::sqrt(v + 1e-3) * wv[j] + bv[j], 1e-14);
  }
  EXPECT_ERROR_HAS(layer_norm(x, {3}), "layer_norm", "normalized_shape [3]", "(*, 3)", "f64[2, 3, 4]");
  EXPECT_ERROR_HAS(layer_norm(x, {2, 3, 4, 1}), "layer_norm", "normalized_shape");
  EXPECT_ERROR_HAS(layer_norm(x, {}), "layer_norm", "at least one dim");
  EXPECT_ERROR_HAS(layer_norm(x, {4}, ones({3})), "layer_norm", "weight", "[4]", "f32[3]");
  EXPECT_ERROR_HAS(layer_norm(x, {4}, Tensor(), ones({4, 1})), "layer_norm", "bias", "f32[4, 1]");
  EXPECT_ERROR_HAS(layer_norm(zeros({2, 4}, DType::Int64), {4}), "layer_norm", "floating", "i64[2, 4]");
  EXPECT_ERROR_HAS(layer_norm(Tensor(), {4}), "layer_norm", "undefined");
}

// 16-bit x (no autocast) with f32 affine parameters: f16 output equal to the f32 computation
// rounded once, bit for bit (same derivation as for batch_norm: identical f64 statistics and
// the same float expression per element). Its gradient comes back in f16 and f32.
TEST_P(NormActivationReduced, LayerNormRoundsOnce) {
  const DType dt = GetParam();
  Generator gen(72);
  Tensor x16 = (randn({5, 2, 8}, {}, &gen) * 2.0).to(dt);
  Tensor w = randn({2, 8}, {}, &gen), b = randn({2, 8}, {}, &gen);
  Tensor y16 = layer_norm(x16, {2, 8}, w, b);
  EXPECT_EQ(y16.dtype(), dt);
  EXPECT_TRUE(bit_equal(y16, layer_norm(x16.to(DType::Float32), {2, 8}, w, b).to(dt)));
  Tensor xg = x16.detach().requires_grad_(), wg = w.detach().requires_grad_();
  layer_norm(xg, {2, 8}, wg, b).sum().backward();
  EXPECT_EQ(xg.grad().dtype(), dt);
  EXPECT_EQ(wg.grad().dtype(), DType::Float32);
}

// ---- dropout ----
TEST(Dropout, KeepFractionScaleAndIdentity) {
  const int64_t n = 100000;
  const double p = 0.3;
  Tensor x = ones({n}, F64);
  Generator gen(81);
  Tensor y = dropout(x, p, true, &gen);
  int64_t kept = 0;
  for (double v : vals(y)) {
    if (v != 0) {
      ++kept;
      EXPECT_EQ(v, 1.0 / (1.0 - p));
    }
  }
  // Kept count ~ Binomial(n, 1 - p): mean n (1 - p), sigma sqrt(n p (1 - p)) = 144.9; 4 sigma.
  const double sigma = std::sqrt(n * p * (1 - p));
  EXPECT_LT(std::abs(static_cast<double>(kept) - n * (1 - p)), 4 * sigma) << kept;
  // Identity: the same tensor, no RNG drawn.
  const uint64_t off = gen.offset();
  EXPECT_TRUE(dropout(x, p, false, &gen).is_same(x));
  EXPECT_TRUE(dropout(x, 0.0, true, &gen).is_same(x));
  EXPECT_EQ(gen.offset(), off);
  // p = 1: zeros (and zero gradient), nothing drawn.
  Tensor xr = tensor({1.0, -2.0, 3.0}, F64).requires_grad_();
  Tensor z = dropout(xr, 1.0, true, &gen);
  EXPECT_EQ(vals(z), (std::vector<double>{0, 0, 0}));
  z.sum().backward();
  EXPECT_EQ(vals(xr.grad()), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(gen.offset(), off);
}

TEST(Dropout, GradientIsMaskTimesScale) {
  Generator gen(82);
  Tensor x = randn({50}, F64, &gen).requires_grad_();
  Generator g1(5);
  Tensor y = dropout(x, 0.5, true, &g1);
  y.backward(ones({50}, F64));
  std::vector<double> yv = vals(y), gv = vals(x.grad());
  for (size_t i = 0; i < yv.size(); ++i) EXPECT_EQ(gv[i], yv[i] != 0 ? 2.0 : 0.0);
}

TEST(Dropout, DeterministicForASeedOnAnyThreadCount) {
  const int64_t n = 3 * 32768 + 5;  // above cpu::kParallelGrain: the parallel path
  Tensor x = ones({n}, DType::Float32);
  Generator a(99), b(99);
  Tensor ya = dropout(x, 0.2, true, &a);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  Tensor yb = dropout(x, 0.2, true, &b);
  omp_set_num_threads(threads);
  EXPECT_TRUE(bit_equal(ya, yb));
  EXPECT_EQ(a.offset(), b.offset());
  EXPECT_EQ(a.offset(), static_cast<uint64_t>((n + 3) / 4));  // n words = ceil(n / 4) blocks
  // Element i uses word i of the reserved stream.
  std::vector<double> v = vals(ya);
  for (int64_t i : {int64_t(0), int64_t(1), int64_t(5), n / 2, n - 1}) {
    const bool keep = uniform_from_bits(philox_word(99, 0, static_cast<uint64_t>(i))) < 0.8;
    EXPECT_EQ(v[static_cast<size_t>(i)] != 0, keep) << i;
  }
  // The next draw continues the stream: a different mask.
  EXPECT_FALSE(bit_equal(dropout(x, 0.2, true, &a), ya));
  // The default generator is used when none is passed, and manual_seed makes it repeatable.
  manual_seed(7);
  Tensor d1 = dropout(x, 0.2, true);
  manual_seed(7);
  EXPECT_TRUE(bit_equal(dropout(x, 0.2, true), d1));
  // A non-contiguous input: element i is the i-th in row-major logical order.
  Tensor m = randn({6, 5});
  Generator c1(3), c2(3);
  EXPECT_TRUE(bit_equal(dropout(m.t(), 0.5, true, &c1), dropout(m.t().contiguous(), 0.5, true, &c2)));
}

TEST(Dropout, BadInputs) {
  Tensor x = ones({4});
  EXPECT_ERROR_HAS(dropout(x, -0.1, true), "dropout", "between 0 and 1", "p=-0.1");
  EXPECT_ERROR_HAS(dropout(x, 1.5, false), "dropout", "between 0 and 1", "p=1.5");
  EXPECT_ERROR_HAS(dropout(x, NAN, true), "dropout", "between 0 and 1");
  EXPECT_ERROR_HAS(dropout(ones({4}, DType::Int64), 0.5, true), "dropout", "floating", "i64[4]");
}

}  // namespace
}  // namespace mixtape::testing
