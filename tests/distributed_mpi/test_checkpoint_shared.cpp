// tests/distributed_mpi/test_checkpoint_shared.cpp — two ranks, DDP over a model whose Linear is
// used by two checkpointed (non-reentrant) segments, under FP16 autocast: every parameter's
// gradient is the average of the two ranks' local gradients (predivided, then summed: the same
// two roundings computed here), the same on both ranks.
#include <gtest/gtest.h>

#include "common/bit_equal.h"
#include "distributed/dist_test_util.h"
#include "distributed/shared_segments_model.h"

namespace mixtape {
namespace {

using distributed::DistributedDataParallel;
using dist_test::Segments;
using dist_test::SharedBySegments;

TEST(TwoRanksDDP, AveragesAParameterSharedByTwoCheckpointedSegments) {
  distributed::ProcessGroup& pg = *distributed::world();
  auto local = std::make_shared<SharedBySegments>(6, Segments::Plain);
  auto ck = std::make_shared<SharedBySegments>(6, Segments::Checkpointed);
  DistributedDataParallel ddp(ck, pg);
  auto gb = dist_test::global_batch(16, 2);
  Tensor x = gb.x.narrow(0, pg.rank() * 8, 8), y = gb.y.narrow(0, pg.rank() * 8, 8);
  for (nn::Module* m : {static_cast<nn::Module*>(local.get()), static_cast<nn::Module*>(&ddp)}) {
    Tensor loss;
    {
      amp::AutocastGuard ac(DeviceType::CPU, DType::Float16);
      loss = cross_entropy((*m)(x).to(DType::Float32), y);
    }
    loss.backward();
  }
  auto a = local->named_parameters(), b = ck->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    TensorList mine = pg.all_gather(a[i].second.grad());
    Tensor average = mine[0] * 0.5 + mine[1] * 0.5;
    EXPECT_FALSE(testing::bit_equal(mine[0], mine[1])) << a[i].first << ": the ranks' data should differ";
    EXPECT_TRUE(testing::bit_equal(average, b[i].second.grad())) << a[i].first;
  }
}

}  // namespace
}  // namespace mixtape
