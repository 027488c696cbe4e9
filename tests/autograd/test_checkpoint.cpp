// tests/autograd/test_checkpoint.cpp — autograd::checkpoint: same gradients as the plain
// graph (bit for bit), dropout and autocast replayed, fewer tensors kept alive, misuse errors.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>

#include "autograd/checkpoint.h"
#include "common/error_of.h"
#include "common/bit_equal.h"
#include "mixtape/mixtape.h"

namespace mixtape::testing {
namespace {

using autograd::checkpoint;

struct Block {
  Tensor w1, b1, w2;
  explicit Block(uint64_t seed) {
    Generator g(seed);
    w1 = randn({16, 8}, {}, &g).requires_grad_();
    b1 = randn({16}, {}, &g).requires_grad_();
    w2 = randn({8, 16}, {}, &g).requires_grad_();
  }
  Tensor forward(const Tensor& x, double p_drop) const {
    Tensor h = relu(linear(x, w1, b1));
    if (p_drop > 0) h = dropout(h, p_drop, /*training=*/true);
    return linear(h, w2) + x;  // a residual, so the input's gradient has two paths
  }
  std::vector<Tensor> params() const { return {w1, b1, w2}; }
};

struct Grads {
  Tensor loss, x;
  std::vector<Tensor> p;
};

Grads run(bool use_checkpoint, double p_drop, bool autocast16) {
  Block a(1), b(2);
  Generator gx(3);
  Tensor x = randn({4, 8}, {}, &gx).requires_grad_();
  manual_seed(42);
  Tensor loss;
  {
    std::optional<amp::AutocastGuard> ac;
    if (autocast16) ac.emplace(DeviceType::CPU, DType::Float16);
    auto seg_a = [&](const Tensor& t) { return a.forward(t, p_drop); };
    auto seg_b = [&](const Tensor& t) { return b.forward(t, p_drop); };
    Tensor h = use_checkpoint ? checkpoint(seg_a, x) : seg_a(x);
    h = use_checkpoint ? checkpoint(seg_b, h) : seg_b(h);
    loss = sum(h.to(DType::Float32) * h.to(DType::Float32));
  }
  loss.backward();
  Grads g{loss.detach(), x.grad(), {}};
  for (const Block* blk : {&a, &b})
    for (const Tensor& p : blk->params()) g.p.push_back(p.grad());
  return g;
}

void expect_same(const Grads& plain, const Grads& ckpt) {
  EXPECT_TRUE(bit_equal(plain.loss, ckpt.loss));
  EXPECT_TRUE(bit_equal(plain.x, ckpt.x));
  ASSERT_EQ(plain.p.size(), ckpt.p.size());
  for (size_t i = 0; i < plain.p.size(); ++i) {
    ASSERT_TRUE(ckpt.p[i].defined()) << "param " << i;
    EXPECT_TRUE(bit_equal(plain.p[i], ckpt.p[i])) << "param " << i;
  }
}

TEST(Checkpoint, GradientsEqualThePlainGraphBitForBit) { expect_same(run(false, 0.0, false), run(true, 0.0, false)); }

TEST(Checkpoint, DropoutDrawsTheSameMaskWhenRecomputed) {
  Grads plain = run(false, 0.3, false), ckpt = run(true, 0.3, false);
  expect_same(plain, ckpt);
  // and the masks mattered: without dropout the gradients differ
  EXPECT_FALSE(bit_equal(plain.x, run(false, 0.0, false).x));
}

TEST(Checkpoint, RecomputesUnderTheForwardsAutocastSettings) {
  Grads plain = run(false, 0.0, true), ckpt = run(true, 0.0, true);  // backward runs outside the region
  expect_same(plain, ckpt);
  EXPECT_FALSE(bit_equal(plain.x, run(false, 0.0, false).x));  // f16 really was used
}

TEST(Checkpoint, ParametersGetGradientsEvenWhenNoInputRequiresGrad) {
  Block a(1);
  Tensor x = ones({2, 8});
  Tensor y = checkpoint([&](const Tensor& t) { return a.forward(t, 0.0); }, x);
  ASSERT_TRUE(y.requires_grad());
  sum(y).backward();
  for (const Tensor& p : a.params()) EXPECT_TRUE(p.grad().defined());
}

TEST(Checkpoint, KeepsOnlyTheSegmentInputsAlive) {
  auto kept_bytes = [](bool use_checkpoint) {
    Block blk(5);
    Tensor x = ones({256, 8}).requires_grad_();
    const int64_t before = memory_stats().current_bytes;
    Tensor h = x;
    for (int i = 0; i < 6; ++i)
      h = use_checkpoint ? checkpoint([&](const Tensor& t) { return blk.forward(t, 0.0); }, h) : blk.forward(h, 0.0);
    const int64_t kept = memory_stats().current_bytes - before;
    sum(h).backward();
    return kept;
  };
  int64_t plain = kept_bytes(false), ckpt = kept_bytes(true);
  // plain keeps ~3 [256,16] activations + outputs per block; checkpointed one [256,8] per block
  EXPECT_LT(static_cast<double>(ckpt), 0.4 * static_cast<double>(plain)) << ckpt << " vs " << plain;
}

TEST(Checkpoint, AnInPlaceChangeToASavedInputIsAnError) {
  Block blk(6);
  Tensor x = ones({2, 8});  // saved by the checkpoint (the block's parameters require grad)
  Tensor y = checkpoint([&](const Tensor& t) { return blk.forward(t, 0.0); }, x);
  mul_(x, 2.0);
  std::string e = error_of([&] { sum(y).backward(); });
  EXPECT_NE(e.find("checkpoint input 0"), std::string::npos) << e;
}

TEST(Checkpoint, UnderNoGradItIsAPlainCall) {
  Block blk(7);
  NoGradGuard ng;
  Tensor y = checkpoint([&](const Tensor& t) { return blk.forward(t, 0.0); }, ones({2, 8}));
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
}

}  // namespace
}  // namespace mixtape::testing
