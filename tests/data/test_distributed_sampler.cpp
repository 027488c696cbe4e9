// tests/data/test_distributed_sampler.cpp — DistributedSampler's shards (PyTorch's layout: padding
// or drop_last, rank r takes every world-th index from r) and the DataLoader with a sampler.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "common/error_of.h"
#include "data/dataloader.h"
#include "data/sampler.h"
#include "ops/creation.h"

namespace mixtape::data {
namespace {

using mixtape::testing::error_of;

TEST(DistributedSampler, ShardsAreDisjointAndCoverTheDatasetWhenTheWorldDividesIt) {
  const int64_t n = 12;
  std::multiset<int64_t> all;
  for (int r = 0; r < 3; ++r) {
    DistributedSampler s(n, 3, r, {.shuffle = true, .seed = 7});
    auto idx = s.indices(0);
    EXPECT_EQ(static_cast<int64_t>(idx.size()), 4);
    EXPECT_EQ(s.size(), 4);
    all.insert(idx.begin(), idx.end());
  }
  EXPECT_EQ(all.size(), 12u);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(all.count(i), 1u) << i;
}

TEST(DistributedSampler, PadsWithTheFirstIndicesOrDropsTheTailLikePyTorch) {
  // torch.utils.data.DistributedSampler(range(10), num_replicas=4, rank=r, shuffle=False):
  // padded to 12 with indices 0, 1 -> rank 0: [0, 4, 8], 1: [1, 5, 9], 2: [2, 6, 0], 3: [3, 7, 1].
  const std::vector<std::vector<int64_t>> padded = {{0, 4, 8}, {1, 5, 9}, {2, 6, 0}, {3, 7, 1}};
  // drop_last=True: 8 indices -> rank r: [r, r + 4].
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(DistributedSampler(10, 4, r, {.shuffle = false}).indices(0), padded[static_cast<size_t>(r)]);
    EXPECT_EQ(DistributedSampler(10, 4, r, {.shuffle = false, .drop_last = true}).indices(0),
              (std::vector<int64_t>{r, r + 4}));
  }
  // A dataset smaller than the world: the permutation repeats.
  EXPECT_EQ(DistributedSampler(2, 5, 4, {.shuffle = false}).indices(0), (std::vector<int64_t>{0}));
}

TEST(DistributedSampler, ShuffleIsSeededPerEpochAndTheSameOnEveryRank) {
  DistributedSampler a0(100, 2, 0, {.seed = 3}), a1(100, 2, 1, {.seed = 3}), again(100, 2, 0, {.seed = 3});
  EXPECT_EQ(a0.indices(5), again.indices(5));
  EXPECT_NE(a0.indices(0), a0.indices(1));
  // Rank r's shard is the strided slice of the one epoch permutation every rank computes.
  auto perm = seeded_permutation(100, 3, 4);
  auto s0 = a0.indices(4), s1 = a1.indices(4);
  for (size_t i = 0; i < 50; ++i) {
    EXPECT_EQ(s0[i], perm[2 * i]);
    EXPECT_EQ(s1[i], perm[2 * i + 1]);
  }
}

TEST(DistributedSampler, BadArgumentsAreNamed) {
  EXPECT_NE(error_of([] { DistributedSampler(10, 2, 2); }).find("rank 2 is not in [0, 2)"), std::string::npos);
  EXPECT_NE(error_of([] { DistributedSampler(10, 0, 0); }).find("world_size must be >= 1"), std::string::npos);
  EXPECT_NE(error_of([] { DistributedSampler(0, 2, 0); }).find("the dataset is empty"), std::string::npos);
}

TEST(DataLoaderWithSampler, VisitsTheShardInOrderAndCountsItsBatches) {
  auto ds = std::make_shared<TensorDataset>(arange(10, TensorOptions(DType::Float32)).view({10, 1}), arange(10, TensorOptions(DType::Int64)));
  auto sampler = std::make_shared<DistributedSampler>(10, 2, 1, DistributedSamplerOptions{.shuffle = false});
  DataLoader loader(ds, {.batch_size = 2, .prefetch = 0, .sampler = sampler});
  EXPECT_EQ(loader.num_batches(), 3);
  std::vector<int64_t> seen;
  for (const Batch& b : loader)
    for (int64_t v : b.target.to_vector<int64_t>()) seen.push_back(v);
  EXPECT_EQ(seen, (std::vector<int64_t>{1, 3, 5, 7, 9}));
  EXPECT_NE(error_of([&] { DataLoader(ds, {.shuffle = true, .sampler = sampler}); }).find("mutually exclusive"),
            std::string::npos);
}

TEST(SeededPermutation, IsPinnedAndIsTheDataLoadersShuffle) {
  // Pinned: every training run's data order is this permutation, so a change to it (which
  // would make old runs irreproducible) fails here. (The Fisher-Yates loop moved here from the
  // DataLoader unchanged.)
  EXPECT_EQ(seeded_permutation(12, 9, 2), (std::vector<int64_t>{4, 8, 1, 0, 7, 3, 11, 10, 6, 5, 2, 9}));
  auto ds = std::make_shared<TensorDataset>(arange(12, TensorOptions(DType::Float32)).view({12, 1}),
                                            arange(12, TensorOptions(DType::Int64)));
  DataLoader loader(ds, {.batch_size = 12, .shuffle = true, .seed = 9, .prefetch = 0});
  std::vector<int64_t> seen;
  loader.set_epoch(2);
  for (const Batch& b : loader)
    for (int64_t v : b.target.to_vector<int64_t>()) seen.push_back(v);
  EXPECT_EQ(seen, seeded_permutation(12, 9, 2));
  // One rank of a world of one sees exactly the single process's order.
  EXPECT_EQ(DistributedSampler(12, 1, 0, {.seed = 9}).indices(2), seeded_permutation(12, 9, 2));
}

}  // namespace
}  // namespace mixtape::data
