// tests/distributed/test_checkpoint_shared.cpp — DDP (a world of one) over a model whose
// parameter is used by two checkpointed segments: non-reentrant checkpointing accumulates its
// gradient once per backward through the forward's graph, so DDP's hook fires once and the
// gradients are the plain model's bit for bit (FP32 and FP16 autocast); the reentrant mode
// accumulates once per segment, which DDP refuses once the bucket has left.
// The two-process average: tests/distributed_mpi/test_checkpoint_shared.cpp.
#include <gtest/gtest.h>

#include <optional>

#include "common/bit_equal.h"
#include "common/error_of.h"
#include "dist_test_util.h"
#include "shared_segments_model.h"

namespace mixtape {
namespace {

using distributed::DistributedDataParallel;
using dist_test::Segments;
using dist_test::SharedBySegments;

distributed::ProcessGroup& group() { return distributed::init_process_group(); }

TEST(DataParallelOfOne, AcceptsAParameterSharedByTwoCheckpointedSegments) {
  for (bool fp16 : {false, true}) {
    SCOPED_TRACE(fp16 ? "FP16 autocast" : "FP32");
    auto plain = std::make_shared<SharedBySegments>(4, Segments::Plain);
    auto ck = std::make_shared<SharedBySegments>(4, Segments::Checkpointed);
    DistributedDataParallel ddp(ck, group());
    for (int step = 0; step < 2; ++step) {  // the second backward accumulates onto the first
      auto batch = dist_test::global_batch(8, step);
      for (nn::Module* m : {static_cast<nn::Module*>(plain.get()), static_cast<nn::Module*>(&ddp)}) {
        std::optional<amp::AutocastGuard> ac;
        if (fp16) ac.emplace(DeviceType::CPU, DType::Float16);
        Tensor loss = cross_entropy((*m)(batch.x).to(DType::Float32), batch.y);
        ac.reset();
        loss.backward();
      }
      EXPECT_EQ(ddp.last_stats().buckets, 1);
      auto a = plain->named_parameters(), b = ck->named_parameters();
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_TRUE(b[i].second.grad().defined()) << b[i].first;
        EXPECT_TRUE(testing::bit_equal(a[i].second.grad(), b[i].second.grad())) << a[i].first << " step " << step;
      }
    }
  }
}

TEST(DataParallelOfOne, RefusesAParameterSharedByTwoReentrantSegments) {
  auto ck = std::make_shared<SharedBySegments>(4, Segments::Reentrant);
  DistributedDataParallel ddp(ck, group());
  auto batch = dist_test::global_batch(8, 0);
  std::string e = testing::error_of([&] { cross_entropy(ddp(batch.x), batch.y).backward(); });
  EXPECT_NE(e.find("received a second gradient in one backward after its bucket's all-reduce had started"), std::string::npos) << e;
}

}  // namespace
}  // namespace mixtape
