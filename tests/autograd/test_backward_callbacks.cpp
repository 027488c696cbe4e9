// tests/autograd/test_backward_callbacks.cpp — post-accumulate-grad hooks and end-of-backward
// callbacks (what DistributedDataParallel builds on): when they run, in what order, with
// nested (checkpointed) backwards, and after errors.
#include <gtest/gtest.h>

#include <vector>

#include "autograd/checkpoint.h"
#include "autograd/engine.h"
#include "common/error_of.h"
#include "ops/creation.h"
#include "ops/pointwise.h"
#include "ops/reduce.h"

namespace mixtape {
namespace {

using testing::error_of;

TEST(PostAccumulateGradHook, SeesTheAccumulatedGradAndCanBeRemoved) {
  Tensor w = full({3}, 2.0, DType::Float64).requires_grad_();
  std::vector<double> seen;
  int id = w.register_post_accumulate_grad_hook([&](const Tensor& leaf) { seen.push_back(leaf.grad().to_vector<double>()[0]); });
  (w * 3.0).sum().backward();
  (w * 4.0).sum().backward();  // accumulates: the hook sees 3 + 4
  EXPECT_EQ(seen, (std::vector<double>{3.0, 7.0}));
  w.remove_post_accumulate_grad_hook(id);
  (w * 1.0).sum().backward();
  EXPECT_EQ(seen.size(), 2u);
}

TEST(PostAccumulateGradHook, RefusedOnNonLeavesAndTensorsWithoutGrad) {
  Tensor w = ones({2}).requires_grad_();
  Tensor y = w * 2.0;
  EXPECT_NE(error_of([&] { y.register_post_accumulate_grad_hook([](const Tensor&) {}); }).find("computed by an op"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ones({2}).register_post_accumulate_grad_hook([](const Tensor&) {}); })
                .find("does not require grad"),
            std::string::npos);
}

TEST(QueueCallback, RunsOnceAfterEveryNodeOfTheOutermostBackward) {
  Tensor a = ones({2}).requires_grad_(), b = ones({2}).requires_grad_();
  std::vector<std::string> events;
  bool queued = false;
  auto hook = [&](const char* name) {
    return [&, name](const Tensor&) {
      events.push_back(name);
      if (!queued) {
        queued = true;
        autograd::queue_callback([&] { events.push_back("end"); });
      }
    };
  };
  a.register_post_accumulate_grad_hook(hook("a"));
  b.register_post_accumulate_grad_hook(hook("b"));
  ((a * 2.0) + (b * 3.0)).sum().backward();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events.back(), "end");
  EXPECT_FALSE(autograd::in_backward());
}

TEST(QueueCallback, WaitsForTheOuterBackwardWhenQueuedInsideACheckpointedSegment) {
  Tensor w = full({4}, 0.5).requires_grad_();
  Tensor x = ones({4}).requires_grad_();
  std::vector<std::string> events;
  w.register_post_accumulate_grad_hook([&](const Tensor&) {
    events.push_back("w");
    autograd::queue_callback([&] { events.push_back("end"); });
  });
  x.register_post_accumulate_grad_hook([&](const Tensor&) { events.push_back("x"); });
  Tensor h = autograd::checkpoint([&](const Tensor& in) { return in * w; }, x * 1.0);
  h.sum().backward();
  // w's gradient comes from the segment's own (nested) backward; x's after it, in the outer one.
  EXPECT_EQ(events, (std::vector<std::string>{"w", "x", "end"}));
}

TEST(QueueCallback, OutsideBackwardIsAnErrorAndAFailedBackwardDropsPendingCallbacks) {
  EXPECT_NE(error_of([] { autograd::queue_callback([] {}); }).find("no backward is running"), std::string::npos);
  Tensor w = ones({2}).requires_grad_();
  int ran = 0;
  w.register_post_accumulate_grad_hook([&](const Tensor&) {
    autograd::queue_callback([&] { ++ran; });
    MT_ERROR("hook failed");
  });
  EXPECT_NE(error_of([&] { (w * 2.0).sum().backward(); }).find("hook failed"), std::string::npos);
  EXPECT_EQ(ran, 0);
  EXPECT_FALSE(autograd::in_backward());
  // The next backward starts clean: nothing left over runs.
  Tensor v = ones({2}).requires_grad_();
  (v * 2.0).sum().backward();
  EXPECT_EQ(ran, 0);
}

}  // namespace
}  // namespace mixtape
