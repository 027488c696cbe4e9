// tests/optim/test_clip_grad.cpp — clip_grad_norm_ beyond the torch fixture: non-finite grads
// (PyTorch's error_if_nonfinite=False behaviour), 16-bit grads, missing grads, errors; and
// clip_grad_norm_on_device_ (the norm and the clip kept on the device) against it, bit for bit;
// the three parts a sharded clip combines across processes.
#include <cmath>
#include <cstring>
#include <limits>

#include "optim_test_util.h"

namespace mixtape::testing {
namespace {

using optim::clip_grad_norm_;

Tensor with_grad(const Tensor& g) {
  Tensor p = zeros(g.sizes(), TensorOptions(g.dtype())).requires_grad_(true);
  p.set_grad(g);
  return p;
}

TEST(ClipGradNorm, HandComputedL2AndInf) {
  Tensor a = with_grad(tensor({3.0, 4.0})), b = with_grad(tensor({12.0}));
  const double total = clip_grad_norm_({a, b}, 6.5);
  EXPECT_EQ(total, 13.0);
  const float coef = static_cast<float>(6.5 / (13.0 + 1e-6));
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{3.0f * coef, 4.0f * coef}));
  Tensor c = with_grad(tensor({-5.0, 2.0}));
  EXPECT_EQ(clip_grad_norm_({c}, 10.0, INFINITY), 5.0);
  EXPECT_EQ(c.grad().to_vector<float>(), (std::vector<float>{-5.0f, 2.0f})) << "coef clamped to 1: unchanged";
}

// The three parts a sharded clip combines across processes (distributed::ZeroRedundancyOptimizer)
// give clip_grad_norm_'s numbers on one process; two halves of the grads combine to the same norm.
TEST(ClipGradNorm, ThePartsOfASplitClipAreClipGradNormsOwn) {
  for (double p : {2.0, 1.0, 3.0, double(INFINITY)}) {
    Tensor a = with_grad(tensor({3.0, -4.0})), b = with_grad(tensor({12.0, 0.5}));
    Tensor c = with_grad(tensor({3.0, -4.0})), d = with_grad(tensor({12.0, 0.5}));
    const double total = clip_grad_norm_({a, b}, 2.0, p);
    const double sa = optim::grad_norm_pow_sum({c}, p).item<double>(), sd = optim::grad_norm_pow_sum({d}, p).item<double>();
    const double split = optim::total_norm_from_pow_sum(std::isinf(p) ? std::max(sa, sd) : sa + sd, p);
    EXPECT_DOUBLE_EQ(split, total) << p;
    EXPECT_EQ(optim::grad_norm_pow_sum({c, d}, p).item<double>(), std::isinf(p) ? 12.0 : sa + sd) << p;
    optim::clip_grads_with_norm_({c, d}, 2.0, total);
    EXPECT_EQ(c.grad().to_vector<float>(), a.grad().to_vector<float>()) << p;
    EXPECT_EQ(d.grad().to_vector<float>(), b.grad().to_vector<float>()) << p;
  }
  EXPECT_EQ(optim::grad_norm_pow_sum({param_from({1}, {1}, DType::Float32)}).item<double>(), 0.0) << "no grads";
}

TEST(ClipGradNorm, NoClipLeavesGradsAndVersionsAlone) {
  Tensor a = with_grad(tensor({0.1, 0.2}));
  const uint32_t v = a.grad().version();
  clip_grad_norm_({a}, 1.0);
  EXPECT_EQ(a.grad().version(), v);
}

TEST(ClipGradNorm, MissingGradsAreIgnoredAndNoneGiveZero) {
  Tensor a = param_from({1}, {1}, DType::Float32), b = with_grad(tensor({2.0}));
  EXPECT_EQ(clip_grad_norm_({a}, 1.0), 0.0);
  EXPECT_EQ(clip_grad_norm_({a, b}, 1.0, 1.0), 2.0);
  EXPECT_FALSE(a.grad().defined());
}

TEST(ClipGradNorm, NonFiniteGradsFollowPyTorch) {
  // total = inf: coef = 0; finite grads become 0, the inf becomes NaN (inf * 0).
  Tensor a = with_grad(tensor({1.0, INFINITY})), b = with_grad(tensor({-2.0}));
  EXPECT_TRUE(std::isinf(clip_grad_norm_({a, b}, 1.0)));
  auto av = a.grad().to_vector<float>();
  EXPECT_EQ(av[0], 0.0f);
  EXPECT_TRUE(std::isnan(av[1]));
  EXPECT_EQ(b.grad().to_vector<float>()[0], 0.0f);
  EXPECT_TRUE(std::signbit(b.grad().to_vector<float>()[0])) << "-2 * 0 = -0";
  // total = NaN: coef = NaN; every grad becomes NaN.
  Tensor c = with_grad(tensor({1.0, NAN})), d = with_grad(tensor({3.0}));
  EXPECT_TRUE(std::isnan(clip_grad_norm_({c, d}, 1.0)));
  EXPECT_TRUE(std::isnan(d.grad().to_vector<float>()[0]));
  // The inf-norm propagates NaN too.
  Tensor e = with_grad(tensor({NAN, 1.0}));
  EXPECT_TRUE(std::isnan(clip_grad_norm_({e}, 1.0, INFINITY)));
}

TEST(ClipGradNorm, SixteenBitGradsNormInF64ClipRoundedOnce) {
  Generator gen(8);
  Tensor g32 = randn({300}, {}, &gen);
  Tensor g16 = g32.to(DType::Float16);
  Tensor p = with_grad(g16.clone());
  double sum = 0;
  for (float v : g16.to_vector<float>()) sum += double(v) * double(v);
  const double total = clip_grad_norm_({p}, 1.0);
  EXPECT_DOUBLE_EQ(total, std::sqrt(sum));
  const float coef = static_cast<float>(1.0 / (total + 1e-6));
  auto got = p.grad();
  auto src = g16.to_vector<float>();
  for (int64_t i = 0; i < 300; ++i)
    ASSERT_EQ(half_bits(got, i), Half(src[static_cast<size_t>(i)] * coef).bits) << "element " << i;
  // Mixed dtypes: one total over all of them.
  Tensor q = with_grad(tensor({2.0}, TensorOptions(DType::Float64)));
  Tensor r = with_grad(tensor({0.5}, TensorOptions(DType::BFloat16)));
  EXPECT_EQ(clip_grad_norm_({q, r}, 100.0, 1.0), 2.5);
}

// The device form gives the host form's total and clipped grads bit for bit, over every dtype,
// norm type, a clip and a no-clip, and non-finite grads; its total is a 0-d f64 tensor.
TEST(ClipGradNormOnDevice, MatchesTheHostFormBitForBit) {
  Generator gen(11);
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::vector<double>> specials = {{}, {inf}, {std::nan("")}};
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16})
    for (double p : {2.0, 1.0, 3.0, inf})
      for (double max_norm : {0.5, 1e6})
        for (const std::vector<double>& special : specials) {
          SCOPED_TRACE(std::string(dtype_name(dt)) + " p " + std::to_string(p) + " max " + std::to_string(max_norm) +
                       " specials " + std::to_string(special.size()));
          std::vector<Tensor> a, b;
          for (int64_t n : {37, 1, 300}) {
            Tensor g = randn({n}, {}, &gen).to(dt);
            if (n == 1 && !special.empty()) g = full({1}, special[0]).to(dt);
            a.push_back(with_grad(g.clone()));
            b.push_back(with_grad(g.clone()));
          }
          a.push_back(zeros({2}).requires_grad_(true));  // no grad: ignored by both
          b.push_back(zeros({2}).requires_grad_(true));
          const double host = clip_grad_norm_(a, max_norm, p);
          const Tensor dev = optim::clip_grad_norm_on_device_(b, max_norm, p);
          ASSERT_EQ(dev.dtype(), DType::Float64);
          ASSERT_EQ(dev.dim(), 0);
          const double got = dev.item<double>();
          EXPECT_TRUE(std::memcmp(&got, &host, sizeof host) == 0 || (std::isnan(got) && std::isnan(host)))
              << got << " vs " << host;
          for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(same_bits(b[i].grad(), a[i].grad())) << "grad " << i;
        }
  EXPECT_EQ(optim::clip_grad_norm_on_device_({zeros({2}).requires_grad_(true)}, 1.0).item<double>(), 0.0);
  expect_error([&] { optim::clip_grad_norm_on_device_({with_grad(tensor({1.0}))}, 1.0, 0.0); },
               {"clip_grad_norm_: norm_type must be > 0 or inf, got 0"});
}

TEST(ClipGradNorm, Errors) {
  Tensor a = with_grad(tensor({1.0}));
  expect_error([&] { clip_grad_norm_({a}, 1.0, 0.0); }, {"clip_grad_norm_: norm_type must be > 0 or inf, got 0"});
  expect_error([&] { clip_grad_norm_({a}, 1.0, -INFINITY); }, {"norm_type must be > 0 or inf"});
  expect_error([&] { clip_grad_norm_({a}, NAN); }, {"max_norm is NaN"});
  expect_error([&] { clip_grad_norm_({Tensor()}, 1.0); }, {"undefined parameter"});
}

}  // namespace
}  // namespace mixtape::testing
