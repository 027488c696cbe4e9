// data/sampler.h — which samples an epoch visits, in what order: the seeded permutation the
// DataLoader shuffles with, and DistributedSampler (torch.utils.data.DistributedSampler), which
// gives each rank of a data-parallel job its own shard.
// Invariant: indices(e) depends only on the constructor's arguments and e, so every rank (and a
// resumed run) computes the same permutation without communicating.
#pragma once
#include <cstdint>
#include <vector>

namespace mixtape::data {

// 0..n-1 in the order of a Fisher–Yates shuffle driven by the Philox stream of (seed, epoch).
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed, int64_t epoch);

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The dataset indices of epoch `epoch` (the DataLoader passes its own epoch counter).
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
  // How many indices every epoch has.
  virtual int64_t size() const = 0;
};

struct DistributedSamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;      // the same on every rank
  bool drop_last = false; // false: pad with the permutation's first indices to a multiple of
                          // the world size; true: drop the tail that does not divide evenly
};

// Rank `rank` of `world_size` gets every world_size-th index of the (padded or truncated)
// epoch permutation, starting at `rank`: the shards are disjoint (apart from the padding) and
// together cover the dataset. PyTorch's layout; its permutation comes from torch's generator,
// this one from seeded_permutation, so the orders differ.
class DistributedSampler final : public Sampler {
 public:
  DistributedSampler(int64_t dataset_size, int world_size, int rank, DistributedSamplerOptions options = {});
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return per_rank_; }

 private:
  int64_t n_;
  int world_, rank_;
  DistributedSamplerOptions opt_;
  int64_t per_rank_;
};

}  // namespace mixtape::data
