// distributed/zero_redundancy.cpp — the partition of DDP's buckets into per-rank pieces, the
// reduced shard handed to the pieces' .grad, the clip over every shard, and the all-gather of the
// updated pieces after each step.
#include "distributed/zero_redundancy.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>

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
  ckpt_index_.assign(params.size(), -1);
  groups_.assign(groups.size(), {});
  int64_t next_ckpt = 0;
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
      if (next_ckpt == 0) device_ = p.device();  // the first parameter's
      MT_CHECK(p.device() == device_, "ZeroRedundancyOptimizer: parameter '", name, "' is on ", p.device(),
               ", the first one on ", device_, "; the parameters must share one device (its collectives' buffers "
               "live there)");
      MT_CHECK(p.is_contiguous(), "ZeroRedundancyOptimizer: parameter '", name, "' (", p.describe(),
               ") is not contiguous; its shard pieces are views of its memory");
      group_of_[it->second] = static_cast<int>(g);
      ckpt_index_[it->second] = next_ckpt++;
      groups_[g].push_back(it->second);
    }
  }
  // Checked: what the unsharded optimizer does to a 16-bit parameter it keeps a master for, its
  // gradient accumulates in FP32 (DDP's buckets follow it, so this precedes the partition).
  for (const optim::ParamGroup& g : groups)
    for (const Tensor& p : g.params)
      if (is_reduced_float(p.dtype()) && !p.has_explicit_grad_dtype()) p.set_grad_dtype(DType::Float32);
  shapes_ = ddp_.bucket_shapes();
  partition();
  std::vector<optim::ParamGroup> shard_groups;
  inner_index_.assign(pieces().size(), 0);
  size_t inner_count = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<Tensor> mine;
    for (size_t j = 0; j < pieces().size(); ++j) {
      if (group_of_[pieces()[j].param] != static_cast<int>(g)) continue;
      mine.push_back(pieces()[j].shard);
      inner_index_[j] = inner_count++;
    }
    if (mine.empty()) {
      // Every rank's optimizer has every group (an LR schedule writes each group's lr alike).
      const Tensor& first = groups[g].params.front();
      mine.push_back(empty({0}, TensorOptions(first.dtype()).with_device(device_)).requires_grad_(true));
      ++inner_count;
    }
    shard_groups.emplace_back(std::move(mine), groups[g].options);
  }
  inner_ = make(std::move(shard_groups));
  MT_CHECK(inner_ != nullptr, "ZeroRedundancyOptimizer: the optimizer factory returned null");
  MT_CHECK(inner_->param_groups().size() == groups.size(), "ZeroRedundancyOptimizer: the factory's optimizer has ",
           inner_->param_groups().size(), " param groups, expected the ", groups.size(), " it was given");
  check_round_to_nearest();
  pre_hook_id_ = inner_->register_step_pre_hook([this] { check_step(); });
  hook_id_ = inner_->register_step_post_hook([this] { gather(); });
  // Last, in this order: shard_gradients may refuse (nothing outside this object refers to it
  // yet), and nothing after it throws, so no callback outlives a failed construction.
  ddp_.shard_gradients([this](size_t b, const Tensor& chunk, const std::vector<bool>& used) { receive(b, chunk, used); });
  if (group_.world_size() > 1)
    observer_id_ = group_.add_collective_observer([this](const std::string& what) {
      if (what.find(kFoundInfReduction) != std::string::npos) found_inf_reduced_ = true;
    });
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() {
  ddp_.shard_gradients({});
  if (observer_id_ >= 0) group_.remove_collective_observer(observer_id_);
  if (inner_) inner_->remove_step_post_hook(hook_id_), inner_->remove_step_pre_hook(pre_hook_id_);
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
  found_inf_reduced_ = false;  // new shard gradients: their flag is yet to be reduced
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

void ZeroRedundancyOptimizer::check_round_to_nearest() const {
  MT_CHECK(!inner_->stochastic_rounding(), "ZeroRedundancyOptimizer: the shard optimizer rounds stochastically; "
           "sharded steps support round-to-nearest only (every rank would draw the same random stream for "
           "different elements)");
  MT_CHECK(!inner_->capturable(), "ZeroRedundancyOptimizer: the shard optimizer is capturable; sharded steps "
           "are not (their all-gather is a host collective)");
}

void ZeroRedundancyOptimizer::check_step() const {
  check_round_to_nearest();
  // Each rank's shard holds different gradients, so its scaler's inf/NaN flag is its own: without
  // the reduction a rank whose shard overflowed skips while the others step, and they wait for it
  // in the all-gather until the collective timeout. Checked on every step that steps (a rank
  // that skips does not get here: the others stop here).
  MT_CHECK(group_.world_size() == 1 || !inner_->inv_scale_pending() || found_inf_reduced_,
           "ZeroRedundancyOptimizer: rank ", group_.rank(), " of ", group_.world_size(), ": a GradScaler steps the "
           "shard's optimizer, but its inf/NaN flag was not reduced over the ranks since the last backward. Each "
           "rank holds only its shard's gradients, so the ranks would disagree on skipping (one steps and waits in "
           "the all-gather for one that skipped). Call scaler.set_found_inf_reducer(distributed::found_inf_reducer("
           "group)) before the first step. Refused before the step changed anything");
}

void ZeroRedundancyOptimizer::gather() {
  autograd::NoGradGuard no_grad;
  const auto& params = ddp_.parameters_in_order();
  const int world = group_.world_size(), me = group_.rank();
  if (world == 1) return;  // the one rank's pieces are the whole model, updated in place
  for (const Gather& g : gathers_) {
    if (g.per_rank == 0) continue;
    Tensor flat = empty({world * g.per_rank}, TensorOptions(g.dtype).with_device(device_));
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
  // On the parameters' device on every rank, a rank with no pieces too: the ranks' collective
  // must take one path (NCCL or the host).
  Tensor part = optim::grad_norm_pow_sum(shards, norm_type).reshape({1}).to(device_).clone();
  group_.all_reduce(part, std::isinf(norm_type) ? ReduceOp::Max : ReduceOp::Sum);
  const double total = optim::total_norm_from_pow_sum(part.item<double>(), norm_type);
  optim::clip_grads_with_norm_(shards, max_norm, total);
  return total;
}

namespace {

Tensor i64_scalar(int64_t v) {
  Tensor t = Tensor::empty({}, TensorOptions(DType::Int64));
  *t.data_ptr<int64_t>() = v;
  return t;
}
std::string key(size_t i, const std::string& field) { return "state." + std::to_string(i) + "." + field; }

}  // namespace

// Every rank's pieces of every state field travel as f64 (exact for f32 and f64 values), one
// all-gather per field, each rank's pieces packed in order and padded to the largest shard; the
// step counts and which buffers exist, per piece, in one i64 all-gather first.
StateDict ZeroRedundancyOptimizer::state_dict() {
  autograd::NoGradGuard no_grad;
  const StateDict in = inner_->state_dict();
  const auto& params = ddp_.parameters_in_order();
  const int world = group_.world_size(), me = group_.rank();
  // The buffer names, the same list on every rank (a rank whose pieces never stepped has none).
  std::set<std::string> names;
  for (const auto& [k, t] : in) {
    if (k.rfind("state.", 0) != 0) continue;
    const std::string field = k.substr(k.find('.', 6) + 1);
    if (field != "step" && field != "master" && field != "written_stochastically") names.insert(field);
  }
  std::string mine_names;
  for (const std::string& n : names) mine_names += n + "\n";
  for (const std::string& other : group_.all_gather_string(mine_names))
    for (size_t at = 0, nl; (nl = other.find('\n', at)) != std::string::npos; at = nl + 1) names.insert(other.substr(at, nl - at));
  std::vector<std::string> fields{"master"};
  fields.insert(fields.end(), names.begin(), names.end());
  // Per rank: its pieces' offsets in the packed shard.
  int64_t most_pieces = 0, most_elements = 0;
  std::vector<std::vector<int64_t>> offset(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    int64_t n = 0;
    for (const Piece& pc : pieces_[static_cast<size_t>(r)]) offset[static_cast<size_t>(r)].push_back(n), n += pc.length;
    most_elements = std::max(most_elements, n);
    most_pieces = std::max(most_pieces, static_cast<int64_t>(pieces_[static_cast<size_t>(r)].size()));
  }
  const int64_t cols = 1 + static_cast<int64_t>(fields.size());  // the step, then one "present" per field
  Tensor meta = zeros({world * most_pieces * cols}, TensorOptions(DType::Int64));
  auto meta_at = [&](int r, size_t j, int64_t c) { return (r * most_pieces + static_cast<int64_t>(j)) * cols + c; };
  for (size_t j = 0; j < pieces().size(); ++j) {
    const size_t k = inner_index_[j];
    auto st = in.find(key(k, "step"));
    if (st != in.end()) meta.data_ptr<int64_t>()[meta_at(me, j, 0)] = st->second.item<int64_t>();
    for (size_t f = 0; f < fields.size(); ++f)
      meta.data_ptr<int64_t>()[meta_at(me, j, 1 + static_cast<int64_t>(f))] = in.count(key(k, fields[f])) ? 1 : 0;
  }
  if (world > 1) group_.all_gather_into(meta, meta.narrow(0, me * most_pieces * cols, most_pieces * cols));
  const int64_t* m = meta.data_ptr<int64_t>();
  // Each field's values of every rank's pieces.
  std::vector<Tensor> values;
  for (const std::string& f : fields) {
    Tensor flat = zeros({world * most_elements}, TensorOptions(DType::Float64));
    for (size_t j = 0; j < pieces().size(); ++j) {
      auto it = in.find(key(inner_index_[j], f));
      if (it != in.end())
        flat.narrow(0, me * most_elements + offset[static_cast<size_t>(me)][j], pieces()[j].length).copy_(it->second);
    }
    if (world > 1) group_.all_gather_into(flat, flat.narrow(0, me * most_elements, most_elements));
    values.push_back(flat);
  }
  // The unsharded optimizer's dict: its groups and options, then each parameter's state.
  StateDict out;
  for (const auto& [k, t] : in)
    if (k.rfind("rounding.", 0) == 0 || (k.rfind("param_groups.", 0) == 0 && k.substr(k.rfind('.')) != ".params"))
      out[k] = t;
  int64_t c = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::vector<double> idx;
    for (size_t n = 0; n < groups_[g].size(); ++n) idx.push_back(static_cast<double>(c++));
    out["param_groups." + std::to_string(g) + ".params"] =
        tensor(idx, {static_cast<int64_t>(idx.size())}, TensorOptions(DType::Int64));
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i : groups_[g]) {
      const Tensor& p = params[i].second;
      const size_t ci = static_cast<size_t>(ckpt_index_[i]);
      const DType state_dt = is_reduced_float(p.dtype()) ? DType::Float32 : p.dtype();
      // Every piece of a parameter has its history (the same backward reached all of them).
      int64_t step = 0;
      std::vector<bool> present(fields.size(), false);
      std::vector<Tensor> whole(fields.size());
      for (int r = 0; r < world; ++r) {
        const auto& ps = pieces_[static_cast<size_t>(r)];
        for (size_t j = 0; j < ps.size(); ++j) {
          if (ps[j].param != i) continue;
          step = m[meta_at(r, j, 0)];
          for (size_t f = 0; f < fields.size(); ++f) {
            if (!m[meta_at(r, j, 1 + static_cast<int64_t>(f))]) continue;
            present[f] = true;
            if (!whole[f].defined()) whole[f] = zeros({p.numel()}, TensorOptions(state_dt));
            whole[f].narrow(0, ps[j].begin, ps[j].length)
                .copy_(values[f].narrow(0, r * most_elements + offset[static_cast<size_t>(r)][j], ps[j].length));
          }
        }
      }
      if (is_reduced_float(p.dtype())) {
        MT_CHECK(present[0], "ZeroRedundancyOptimizer::state_dict: the master of parameter '", params[i].first,
                 "' is missing from the shards");
        out[key(ci, "master")] = whole[0].view(p.sizes());
        out[key(ci, "written_stochastically")] = i64_scalar(0);
      }
      if (step > 0) out[key(ci, "step")] = i64_scalar(step);
      for (size_t f = 1; f < fields.size(); ++f)
        if (present[f] && step > 0) out[key(ci, fields[f])] = whole[f].view(p.sizes());
    }
  }
  return out;
}

void ZeroRedundancyOptimizer::load_state_dict(const StateDict& sd) {
  const auto& params = ddp_.parameters_in_order();
  StateDict inner;
  std::vector<int64_t> count_in_group(groups_.size(), 0);
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string pk = "param_groups." + std::to_string(g) + ".params";
    auto it = sd.find(pk);
    MT_CHECK(it != sd.end() && it->second.defined(), "ZeroRedundancyOptimizer::load_state_dict: missing key '", pk,
             "' (the dict has fewer param groups than the ", groups_.size(), " of this optimizer)");
    MT_CHECK(it->second.numel() == static_cast<int64_t>(groups_[g].size()), "ZeroRedundancyOptimizer::load_state_dict: "
             "param group ", g, " has ", it->second.numel(), " parameters in the dict, ", groups_[g].size(), " here");
  }
  // Which state key belongs to which parameter: the dict numbers them group by group.
  std::map<int64_t, size_t> param_of;
  for (size_t i = 0; i < params.size(); ++i)
    if (ckpt_index_[i] >= 0) param_of[ckpt_index_[i]] = i;
  std::map<size_t, std::vector<std::pair<std::string, Tensor>>> state_of;  // ddp parameter -> (field, value)
  for (const auto& [k, t] : sd) {
    if (k.rfind("state.", 0) != 0) {
      if (k.rfind("param_groups.", 0) != 0 || k.substr(k.rfind('.')) != ".params") inner[k] = t;
      continue;
    }
    const size_t dot = k.find('.', 6);
    int64_t c = -1;
    try {
      c = std::stoll(k.substr(6, dot - 6));
    } catch (const std::exception&) {
    }
    MT_CHECK(dot != std::string::npos && param_of.count(c), "ZeroRedundancyOptimizer::load_state_dict: unexpected key '",
             k, "' (this optimizer has ", param_of.size(), " parameters)");
    const size_t i = param_of[c];
    const std::string field = k.substr(dot + 1);
    MT_CHECK(t.defined(), "ZeroRedundancyOptimizer::load_state_dict: key '", k, "' holds an undefined tensor");
    const bool per_element = field != "step" && field != "written_stochastically";
    MT_CHECK(!per_element || t.sizes() == params[i].second.sizes(), "ZeroRedundancyOptimizer::load_state_dict: '", k,
             "' must have the shape of parameter '", params[i].first, "' ", shape_str(params[i].second.sizes()),
             ", got ", t.describe());
    state_of[i].emplace_back(field, t);
  }
  // The shard optimizer's dict: its groups (pieces and placeholders) and its pieces' slices.
  size_t k = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::vector<double> idx;
    for (size_t j = 0; j < pieces().size(); ++j)
      if (group_of_[pieces()[j].param] == static_cast<int>(g)) idx.push_back(static_cast<double>(inner_index_[j]));
    if (idx.empty()) idx.push_back(static_cast<double>(k));  // the placeholder: no state
    k += idx.size();
    inner["param_groups." + std::to_string(g) + ".params"] =
        tensor(idx, {static_cast<int64_t>(idx.size())}, TensorOptions(DType::Int64));
  }
  for (size_t j = 0; j < pieces().size(); ++j) {
    const Piece& pc = pieces()[j];
    auto it = state_of.find(pc.param);
    if (it == state_of.end()) continue;
    for (const auto& [field, t] : it->second) {
      const bool per_element = field != "step" && field != "written_stochastically";
      inner[key(inner_index_[j], field)] =
          per_element ? t.contiguous().view({t.numel()}).narrow(0, pc.begin, pc.length).clone() : t;
    }
  }
  inner_->load_state_dict(inner);
}

int64_t ZeroRedundancyOptimizer::optimizer_state_bytes_all_ranks() {
  Tensor n = full({1}, inner_->state_bytes(), TensorOptions(DType::Int64));
  group_.all_reduce(n, ReduceOp::Sum);
  return n.item<int64_t>();
}

}  // namespace mixtape::distributed
