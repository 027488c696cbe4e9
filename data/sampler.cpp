// data/sampler.cpp — the seeded permutation and the per-rank shards.
#include "data/sampler.h"

#include <numeric>
#include <utility>

#include "core/error.h"
#include "core/rng.h"

namespace mixtape::data {

std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  Generator g(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch));
  auto r = g.reserve(order.size());
  for (size_t i = order.size(); i > 1; --i) {
    uint64_t w = (uint64_t(philox_word(r.seed, r.offset, 2 * (i - 1))) << 32) | philox_word(r.seed, r.offset, 2 * (i - 1) + 1);
    std::swap(order[i - 1], order[w % i]);
  }
  return order;
}

DistributedSampler::DistributedSampler(int64_t dataset_size, int world_size, int rank, DistributedSamplerOptions options)
    : n_(dataset_size), world_(world_size), rank_(rank), opt_(options) {
  MT_CHECK(world_size >= 1, "DistributedSampler: world_size must be >= 1, got ", world_size);
  MT_CHECK(rank >= 0 && rank < world_size, "DistributedSampler: rank ", rank, " is not in [0, ", world_size, ")");
  MT_CHECK(dataset_size >= 0, "DistributedSampler: dataset size must be >= 0, got ", dataset_size);
  // As PyTorch: drop_last keeps floor(n / world) per rank, otherwise ceil(n / world) with padding.
  per_rank_ = opt_.drop_last ? n_ / world_ : (n_ + world_ - 1) / world_;
  MT_CHECK(n_ > 0, "DistributedSampler: the dataset is empty");
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> all;
  if (opt_.shuffle) {
    all = seeded_permutation(n_, opt_.seed, epoch);
  } else {
    all.resize(static_cast<size_t>(n_));
    std::iota(all.begin(), all.end(), 0);
  }
  const size_t total = static_cast<size_t>(per_rank_ * world_);
  if (all.size() > total) {
    all.resize(total);
  } else {
    // Pad by repeating the permutation from its start (several times over if the dataset is
    // smaller than the world).
    for (size_t i = 0; all.size() < total; ++i) all.push_back(all[i]);
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(per_rank_));
  for (size_t i = static_cast<size_t>(rank_); i < total; i += static_cast<size_t>(world_)) mine.push_back(all[i]);
  return mine;
}

}  // namespace mixtape::data
