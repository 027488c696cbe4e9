// distributed/zero_redundancy.cpp — the partition of DDP's buckets into per-rank pieces, the
// reduced shard handed to the pieces' .grad, the clip over every shard, and the all-gather of the
// updated pieces after each step.
#include "distributed/zero_redundancy.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "autograd/grad_mode.h"
#include "ops/creation.h"
#include "optim/clip_grad.h"

namespace mixtape::distributed {
namespace {

std::vector<optim::ParamGroup> one_group(DistributedDataParallel& ddp) {
  std::vector<Tensor> ps;
  for (const auto& [name, p] : ddp.parameters_in_order()) ps.push_back(p);
  return {optim::ParamGroup(ps)};
}

}  // namespace

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(DistributedDataParallel& ddp, OptimizerFactory make)
    : ZeroRedundancyOptimizer(ddp, one_group(ddp), std::move(make)) {}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(DistributedDataParallel& ddp, std::vector<optim::ParamGroup> groups,
                                                 OptimizerFactory make)
    : ddp_(ddp), group_(ddp.group()) {
  MT_CHECK(static_cast<bool>(make), "ZeroRedundancyOptimizer: the optimizer factory is empty");
  MT_CHECK(!ddp_.sharded(), "ZeroRedundancyOptimizer: this DistributedDataParallel already shards its gradients for "
           "another ZeroRedundancyOptimizer");
  const auto& params = ddp_.parameters_in_order();
  std::map<const TensorImpl*, size_t> index;
  for (size_t i = 0; i < params.size(); ++i) index[params[i].second.impl()] = i;
  group_of_.assign(params.size(), -1);
  for (size_t g = 0; g < groups.size(); ++g) {
    MT_CHECK(!groups[g].params.empty(), "ZeroRedundancyOptimizer: param group ", g, " has no parameters");
    for (const Tensor& p : groups[g].params) {
      MT_CHECK(p.defined(), "ZeroRedundancyOptimizer: param group ", g, " holds an undefined tensor");
      auto it = index.find(p.impl());
      MT_CHECK(it != index.end(), "ZeroRedundancyOptimizer: param group ", g, " holds ", p.describe(),
               p.name().empty() ? "" : " '" + p.name() + "'",
               ", which is not a trainable parameter of the DistributedDataParallel's module");
      const std::string& name = params[it->second].first;
      MT_CHECK(group_of_[it->second] < 0, "ZeroRedundancyOptimizer: parameter '", name,
               "' appears in more than one place; every parameter may be in only one param group, once");
      MT_CHECK(p.device().is_cpu(), "ZeroRedundancyOptimizer: parameter '", name, "' is on ", p.device(),
               "; sharding supports CPU parameters only so far (reduce_scatter and all_gather_into take CPU "
               "tensors)");
      MT_CHECK(p.is_contiguous(), "ZeroRedundancyOptimizer: parameter '", name, "' (", p.describe(),
               ") is not contiguous; its shard pieces are views of its memory");
      group_of_[it->second] = static_cast<int>(g);
      // What the unsharded optimizer does to a 16-bit parameter it keeps a master for: its
      // gradient accumulates in FP32 (DDP's buckets follow it, so this precedes the partition).
      if (is_reduced_float(p.dtype()) && !p.has_explicit_grad_dtype()) p.set_grad_dtype(DType::Float32);
    }
  }
  shapes_ = ddp_.bucket_shapes();
  partition();
  std::vector<optim::ParamGroup> shard_groups;
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<Tensor> mine;
    for (const Piece& pc : pieces()) if (group_of_[pc.param] == static_cast<int>(g)) mine.push_back(pc.shard);
    if (mine.empty()) {
      // Every rank's optimizer has every group (an LR schedule writes each group's lr alike).
      const Tensor& first = groups[g].params.front();
      mine.push_back(empty({0}, TensorOptions(first.dtype())).requires_grad_(true));
    }
    shard_groups.emplace_back(std::move(mine), groups[g].options);
  }
  inner_ = make(std::move(shard_groups));
  MT_CHECK(inner_ != nullptr, "ZeroRedundancyOptimizer: the optimizer factory returned null");
  MT_CHECK(inner_->param_groups().size() == groups.size(), "ZeroRedundancyOptimizer: the factory's optimizer has ",
           inner_->param_groups().size(), " param groups, expected the ", groups.size(), " it was given");
  hook_id_ = inner_->register_step_post_hook([this] { gather(); });
  ddp_.shard_gradients([this](size_t b, const Tensor& chunk, const std::vector<bool>& used) { receive(b, chunk, used); });
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() {
  ddp_.shard_gradients({});
  if (inner_) inner_->remove_step_post_hook(hook_id_);
}

void ZeroRedundancyOptimizer::partition() {
  const auto& params = ddp_.parameters_in_order();
  const int world = group_.world_size(), me = group_.rank();
  pieces_.assign(static_cast<size_t>(world), {});
  for (size_t b = 0; b < shapes_.size(); ++b) {
    const auto& s = shapes_[b];
    for (int r = 0; r < world; ++r) {
      const int64_t lo = r * s.chunk, hi = std::min(s.numel, lo + s.chunk);
      for (size_t k = 0; k < s.params.size(); ++k) {
        const size_t i = s.params[k];
        if (group_of_[i] < 0) continue;  // in no group: nobody updates it, as unsharded
        const int64_t from = std::max(lo, s.offsets[k]), to = std::min(hi, s.offsets[k] + params[i].second.numel());
        if (from >= to) continue;
        Piece pc{.param = i, .begin = from - s.offsets[k], .length = to - from, .bucket = b, .slot = k,
                 .chunk_offset = from - lo, .shard = Tensor()};
        if (r == me) {
          const Tensor& p = params[i].second;
          pc.shard = p.as_strided_alias({pc.length}, {1}, p.storage_offset() + pc.begin);
          pc.shard.requires_grad_(true);
          pc.shard.set_name(params[i].first + "[" + std::to_string(pc.begin) + ":" +
                            std::to_string(pc.begin + pc.length) + "]");
        }
        pieces_[static_cast<size_t>(r)].push_back(std::move(pc));
      }
    }
  }
  // One all-gather per parameter dtype, each rank's pieces packed in order, padded to the largest.
  std::map<int, size_t> by_dtype;
  for (int r = 0; r < world; ++r) {
    const auto& ps = pieces_[static_cast<size_t>(r)];
    for (size_t j = 0; j < ps.size(); ++j) {
      const DType dt = params[ps[j].param].second.dtype();
      auto it = by_dtype.find(static_cast<int>(dt));
      if (it == by_dtype.end()) {
        it = by_dtype.emplace(static_cast<int>(dt), gathers_.size()).first;
        gathers_.push_back(Gather{.dtype = dt, .per_rank = 0, .at = std::vector<std::vector<std::pair<size_t, int64_t>>>(
                                                                      static_cast<size_t>(world))});
      }
      auto& at = gathers_[it->second].at[static_cast<size_t>(r)];
      const int64_t off = at.empty() ? 0 : at.back().second + ps[at.back().first].length;
      at.emplace_back(j, off);
    }
  }
  for (Gather& g : gathers_)
    for (int r = 0; r < world; ++r) {
      const auto& at = g.at[static_cast<size_t>(r)];
      if (!at.empty())
        g.per_rank = std::max(g.per_rank, at.back().second + pieces_[static_cast<size_t>(r)][at.back().first].length);
    }
}

void ZeroRedundancyOptimizer::receive(size_t bucket, const Tensor& chunk, const std::vector<bool>& used) {
  autograd::NoGradGuard no_grad;
  for (const Piece& pc : pieces()) {
    if (pc.bucket != bucket || !used[pc.slot]) continue;  // no rank produced a gradient: it keeps none
    Tensor avg = chunk.narrow(0, pc.chunk_offset, pc.length);
    if (avg.dtype() != pc.shard.grad_dtype()) avg = avg.to(pc.shard.grad_dtype());
    const Tensor g = pc.shard.grad();
    if (g.defined())
      const_cast<Tensor&>(g).add_(avg);  // not zeroed since the last synchronised backward: accumulates
    else
      pc.shard.set_grad(avg);  // a view of the bucket's reduced chunk (fresh every backward)
  }
}

void ZeroRedundancyOptimizer::gather() {
  MT_CHECK(!inner_->stochastic_rounding(), "ZeroRedundancyOptimizer: the shard optimizer rounds stochastically; "
           "sharded steps support round-to-nearest only (every rank would draw the same random stream for "
           "different elements)");
  MT_CHECK(!inner_->capturable(), "ZeroRedundancyOptimizer: the shard optimizer is capturable; sharded steps "
           "are not (their all-gather is a host collective)");
  autograd::NoGradGuard no_grad;
  const auto& params = ddp_.parameters_in_order();
  const int world = group_.world_size(), me = group_.rank();
  if (world == 1) return;  // the one rank's pieces are the whole model, updated in place
  for (const Gather& g : gathers_) {
    if (g.per_rank == 0) continue;
    Tensor flat = empty({world * g.per_rank}, TensorOptions(g.dtype));
    Tensor mine = flat.narrow(0, me * g.per_rank, g.per_rank);
    const auto& my_at = g.at[static_cast<size_t>(me)];
    int64_t used = 0;
    for (const auto& [j, off] : my_at) {
      const Piece& pc = pieces()[j];
      mine.narrow(0, off, pc.length).copy_(pc.shard);
      used = off + pc.length;
    }
    if (used < g.per_rank) mine.narrow(0, used, g.per_rank - used).zero_();
    group_.all_gather_into(flat, mine);
    for (int r = 0; r < world; ++r) {
      if (r == me) continue;
      for (const auto& [j, off] : g.at[static_cast<size_t>(r)]) {
        const Piece& pc = pieces_[static_cast<size_t>(r)][j];
        const Tensor& p = params[pc.param].second;
        p.as_strided_alias({pc.length}, {1}, p.storage_offset() + pc.begin)
            .copy_(flat.narrow(0, r * g.per_rank + off, pc.length));
      }
    }
  }
}

double ZeroRedundancyOptimizer::clip_grad_norm_(double max_norm, double norm_type) {
  autograd::NoGradGuard no_grad;
  MT_CHECK(!std::isnan(max_norm), "ZeroRedundancyOptimizer::clip_grad_norm_: max_norm is NaN");
  std::vector<Tensor> shards;
  for (const Piece& pc : pieces()) shards.push_back(pc.shard);
  Tensor part = optim::grad_norm_pow_sum(shards, norm_type).reshape({1}).clone();
  group_.all_reduce(part, std::isinf(norm_type) ? ReduceOp::Max : ReduceOp::Sum);
  const double total = optim::total_norm_from_pow_sum(part.item<double>(), norm_type);
  optim::clip_grads_with_norm_(shards, max_norm, total);
  return total;
}

int64_t ZeroRedundancyOptimizer::optimizer_state_bytes_all_ranks() {
  Tensor n = full({1}, inner_->state_bytes(), TensorOptions(DType::Int64));
  group_.all_reduce(n, ReduceOp::Sum);
  return n.item<int64_t>();
}

}  // namespace mixtape::distributed
