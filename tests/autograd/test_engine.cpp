// tests/autograd/test_engine.cpp — the tape and the backward engine: accumulation, graph
// retention, higher order, grad mode, hooks, version checks, tape printing, errors.
#include <gtest/gtest.h>

#include <mixtape/mixtape.h>

#include "common/error_of.h"

namespace mixtape {
namespace {

using testing::error_of;
std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

TEST(Engine, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = tensor({1.0, 2.0}, DType::Float64).requires_grad_();
  (x * x).sum().backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{2, 4}));
  (x * 3.0).sum().backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{5, 7}));  // 2x + 3 accumulated
  x.set_grad(Tensor());
  (x * 3.0).sum().backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{3, 3}));
}

TEST(Engine, DiamondGraphSumsBothPaths) {
  Tensor x = tensor({3.0}, DType::Float64).requires_grad_();
  Tensor a = x * 2.0, b = x * x;
  Tensor y = a * b;  // 2x^3 -> 6x^2 = 54
  y.sum().backward();
  EXPECT_DOUBLE_EQ(x.grad().item<double>(), 54.0);
}

TEST(Engine, DeepChainDoesNotOverflowTheStack) {
  Tensor x = tensor({1.0}, DType::Float64).requires_grad_();
  Tensor y = x;
  for (int i = 0; i < 20000; ++i) y = y * 1.0;
  y.sum().backward();
  EXPECT_EQ(x.grad().item<double>(), 1.0);
}

TEST(Engine, BackwardTwiceNeedsRetainGraph) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor y = (x * x).sum();
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{4, 8}));
  std::string err = error_of([&] { y.backward(); });
  EXPECT_NE(err.find("Trying to backward through the graph a second time"), std::string::npos) << err;
  EXPECT_NE(err.find("of mul was released"), std::string::npos) << err;
}

TEST(Engine, CreateGraphGivesSecondDerivatives) {
  Tensor x = tensor({2.0}, DType::Float64).requires_grad_();
  Tensor y = pow(x, 3.0).sum();
  y.backward(Tensor(), false, /*create_graph=*/true);
  Tensor g = x.grad();  // 3x^2 = 12, with history
  EXPECT_DOUBLE_EQ(g.item<double>(), 12.0);
  ASSERT_TRUE(g.requires_grad());
  x.set_grad(Tensor());
  g.sum().backward();
  EXPECT_DOUBLE_EQ(x.grad().item<double>(), 12.0);  // 6x
}

TEST(Engine, NoGradAndDetach) {
  Tensor x = ones({2}).requires_grad_();
  {
    NoGradGuard no_grad;
    Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_FALSE(autograd::GradMode::is_enabled());
  }
  EXPECT_TRUE(autograd::GradMode::is_enabled());
  Tensor d = (x * 2.0).detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_EQ(d.storage().get(), d.storage().get());
  // Exceptions restore grad mode (RAII).
  try {
    NoGradGuard g;
    throw Error("boom");
  } catch (const Error&) {
  }
  EXPECT_TRUE(autograd::GradMode::is_enabled());
}

TEST(Engine, RequiresGradRules) {
  EXPECT_NE(error_of([] { zeros({2}, DType::Int64).requires_grad_(); })
                .find("only floating-point tensors can require gradients, got Int64"),
            std::string::npos);
  Tensor x = ones({2}).requires_grad_();
  Tensor y = x * 2.0;
  EXPECT_FALSE(y.is_leaf());
  EXPECT_NE(error_of([&] { y.requires_grad_(false); }).find("only change requires_grad of leaf tensors"),
            std::string::npos);
}

TEST(Engine, LeafAndNonLeafHooks) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  std::vector<double> seen;
  x.register_hook([&](const Tensor& g) {
    seen = vals(g);
    return g * 10.0;  // replaces the gradient that is accumulated
  });
  Tensor h = x * 3.0;
  h.register_hook([](const Tensor& g) { return g + 1.0; });
  h.sum().backward();
  EXPECT_EQ(seen, (std::vector<double>{6, 6}));  // (1 + 1) * 3
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{60, 60}));
}

TEST(Engine, RetainGradOnNonLeaf) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor h = x * x;
  h.retain_grad();
  (h * 3.0).sum().backward();
  EXPECT_EQ(vals(h.grad()), (std::vector<double>{3, 3}));
  Tensor k = x * 2.0;
  (k * 1.0).sum().backward();
  EXPECT_FALSE(k.grad().defined());  // not retained
}

TEST(Engine, InPlaceChangeOfSavedTensorIsCaught) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor w = tensor({3.0, 4.0});
  Tensor y = (x * w).sum();  // mul saves w
  w.add_(ones({2}));
  std::string err = error_of([&] { y.backward(); });
  EXPECT_NE(err.find("modified by an in-place operation: input 1 of mul (f32[2]) is at version 1; expected version 0"),
            std::string::npos)
      << err;
}

TEST(Engine, InPlaceOnLeafRequiringGradIsRefused) {
  Tensor x = ones({2}).requires_grad_();
  EXPECT_NE(error_of([&] { x.mul_(2.0); }).find("a leaf tensor that requires grad"), std::string::npos);
  {
    NoGradGuard g;
    x.mul_(2.0);  // what optimizers do
  }
  EXPECT_EQ(vals(x), (std::vector<double>{2, 2}));
}

TEST(Engine, UndefinedInputsAreErrorsNotCrashes) {
  EXPECT_NE(error_of([] { relu(Tensor()); }).find("relu: input 0 is an undefined tensor"), std::string::npos);
  EXPECT_NE(error_of([] { add(ones({1}), Tensor()); }).find("add: input 1 is an undefined tensor"), std::string::npos);
}

TEST(Engine, BackwardOnNonScalarNeedsGradient) {
  Tensor x = ones({2}).requires_grad_();
  Tensor y = x * 2.0;
  EXPECT_NE(error_of([&] { y.backward(); }).find("grad can be implicitly created only for scalar outputs, got f32[2]"),
            std::string::npos);
  y.backward(tensor({1.0, 0.5}));
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{2, 1}));
  EXPECT_NE(error_of([] { ones({1}).backward(); }).find("does not require grad"), std::string::npos);
}

TEST(Engine, GradientsComeBackInTheLeafDtype) {
  Tensor w = tensor({0.5, 0.25}).requires_grad_();
  Tensor y = (w.to(DType::Float16) * tensor({2.0, 4.0}, DType::Float16)).sum();
  EXPECT_EQ(y.dtype(), DType::Float16);  // sum of f16 accumulates in f32, returns f16 (as PyTorch)
  y.backward();
  EXPECT_EQ(w.grad().dtype(), DType::Float32);
  EXPECT_EQ(vals(w.grad()), (std::vector<double>{2, 4}));
  Tensor h = tensor({1.0}, DType::Float16).requires_grad_();
  (h * h).sum().backward();
  EXPECT_EQ(h.grad().dtype(), DType::Float16);
}

TEST(Engine, SequenceNumbersOrderTheTape) {
  Tensor x = tensor({1.0}).requires_grad_().set_name("x");
  Tensor a = exp(x);
  Tensor b = a * 2.0;
  Tensor c = b + a;
  EXPECT_LT(a.grad_fn()->seq_nr(), b.grad_fn()->seq_nr());
  EXPECT_LT(b.grad_fn()->seq_nr(), c.grad_fn()->seq_nr());
  std::string tape = autograd::tape_string(c.sum());
  size_t e = tape.find("ExpBackward"), m = tape.find("MulBackward"), ad = tape.find("AddBackward"),
         s = tape.find("SumBackward");
  ASSERT_NE(e, std::string::npos) << tape;
  EXPECT_LT(e, m);
  EXPECT_LT(m, ad);
  EXPECT_LT(ad, s);
  EXPECT_NE(tape.find("AccumulateGrad(x f32[1])"), std::string::npos) << tape;
  EXPECT_NE(tape.find("exp(f32[1]) -> f32[1]  saved: out0 f32[1]"), std::string::npos) << tape;
  EXPECT_NE(tape.find("(4 ops"), std::string::npos) << tape;
}

}  // namespace
}  // namespace mixtape
