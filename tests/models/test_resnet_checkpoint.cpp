// tests/models/test_resnet_checkpoint.cpp — ResNet with checkpoint_activations: the same loss,
// gradients and BatchNorm running statistics as without, and less memory kept for backward.
#include <gtest/gtest.h>

#include <cstring>

#include "mixtape/mixtape.h"
#include "common/bit_equal.h"

namespace mixtape::testing {
namespace {

struct Outcome {
  Tensor loss;
  StateDict grads, state;
  int64_t kept_bytes = 0;
};

Outcome step(bool checkpoint) {
  manual_seed(3);
  models::ResNet net(8, 10, 1);
  net.checkpoint_activations = checkpoint;
  Generator g(4);
  Tensor x = randn({4, 1, 12, 12}, {}, &g);
  Tensor y = tensor({1.0, 7.0, 3.0, 0.0}, DType::Int64);
  const int64_t before = memory_stats().current_bytes;
  Tensor loss = cross_entropy(net.forward(x), y);
  Outcome o;
  o.kept_bytes = memory_stats().current_bytes - before;
  loss.backward();
  o.loss = loss.detach();
  for (auto& [name, p] : net.named_parameters()) o.grads[name] = p.grad();
  o.state = net.state_dict();
  return o;
}

TEST(ResNetCheckpoint, SameLossGradientsAndRunningStatsAsWithout) {
  Outcome plain = step(false), ckpt = step(true);
  EXPECT_TRUE(bit_equal(plain.loss, ckpt.loss));
  ASSERT_EQ(plain.grads.size(), ckpt.grads.size());
  for (auto& [name, g] : plain.grads) EXPECT_TRUE(bit_equal(g, ckpt.grads.at(name))) << name;
  // running_mean/var and num_batches_tracked: updated once per forward, not again in the rerun
  for (auto& [name, t] : plain.state) EXPECT_TRUE(bit_equal(t, ckpt.state.at(name))) << name;
  EXPECT_EQ(ckpt.state.at("layer1.0.bn1.num_batches_tracked").item<int64_t>(), 1);
}

TEST(ResNetCheckpoint, KeepsLessForBackward) {
  Outcome plain = step(false), ckpt = step(true);
  EXPECT_LT(static_cast<double>(ckpt.kept_bytes), 0.6 * static_cast<double>(plain.kept_bytes))
      << ckpt.kept_bytes << " vs " << plain.kept_bytes;
}

}  // namespace
}  // namespace mixtape::testing
