// distributed/zero_redundancy.h — ZeroRedundancyOptimizer: ZeRO stage 1 over a
// DistributedDataParallel (PyTorch's ZeroRedundancyOptimizer, DeepSpeed's stage 1): each rank keeps
// the optimizer state (FP32 masters, moments) of its shard of the parameters only, receives only
// its shard of the averaged gradients (the buckets reduce-scattered), updates that shard, and the
// ranks all-gather the updated parameters.
//
// The partition: every DDP bucket's flat gradient (numel elements) is cut into world_size chunks of
// ceil(numel / world_size) elements; rank r owns chunk r of every bucket, so a parameter may be
// split between ranks, and every rank holds within one element per bucket of 1/N of the elements.
// Rank r's shard is a list of pieces (a parameter's elements [begin, begin + length)); each piece
// is a 1-D tensor over the parameter's own memory (no copy), the parameter the wrapped optimizer
// sees. Invariant: after every step every rank's model holds the same values, bit for bit those of
// DistributedDataParallel with the unsharded optimizer (the same reduction of the same buffers;
// the same elementwise update of every element; 16-bit parameters get their master's RNE). The
// design, the memory formula, its communication and what is refused: docs/DISTRIBUTED.md, "ZeRO-1".
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "core/state_dict.h"
#include "distributed/data_parallel.h"
#include "optim/optimizer.h"

namespace mixtape::distributed {

class ZeroRedundancyOptimizer {
 public:
  // Makes the optimizer of this rank's shard from param groups of pieces (the groups of
  // ZeroRedundancyOptimizer's constructor, with their options, in order), e.g.
  //   [](std::vector<optim::ParamGroup> g) { return std::make_unique<optim::Adam>(std::move(g), opts); }
  using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>)>;

  // `groups` are what the unsharded optimizer would get: trainable parameters of ddp's module.
  // Puts ddp in sharded mode (DistributedDataParallel::shard_gradients) until destroyed, and sets
  // grad_dtype Float32 on 16-bit parameters (as an optimizer does) before partitioning the buckets.
  // Refused: parameters not in ddp, parameters on more than one device (CPU, or one CUDA device:
  // the collectives then run on NCCL or through host memory), non-contiguous parameters, an optimizer that rounds
  // stochastically or is capturable (here and at every step). ddp must outlive the wrapper.
  ZeroRedundancyOptimizer(DistributedDataParallel& ddp, std::vector<optim::ParamGroup> groups, OptimizerFactory make);
  // Every trainable parameter of ddp's module, one group.
  ZeroRedundancyOptimizer(DistributedDataParallel& ddp, OptimizerFactory make);
  ~ZeroRedundancyOptimizer();
  ZeroRedundancyOptimizer(const ZeroRedundancyOptimizer&) = delete;
  ZeroRedundancyOptimizer& operator=(const ZeroRedundancyOptimizer&) = delete;

  // The shard's optimizer: what GradScaler::unscale_/step, the LR schedules and zero_grad take.
  // Its groups are the constructor's, in order (a group this rank holds no element of has one
  // empty [0] parameter, so every rank's optimizer has the same groups). Its step() (directly or
  // through a GradScaler) ends by all-gathering the parameters: every rank must step together
  // (with a GradScaler, set its found_inf reducer, distributed::found_inf_reducer: an inf in one
  // rank's shard must skip every rank's step). A GradScaler's step without that reduction since
  // the last synchronised backward is refused, before anything changes (on more than one rank:
  // the ranks would disagree on skipping, docs/DISTRIBUTED.md, "The GradScaler").
  optim::Optimizer& optimizer() { return *inner_; }
  void step() { inner_->step(); }
  void zero_grad(bool set_to_none = true) { inner_->zero_grad(set_to_none); }

  // clip_grad_norm_ over the whole model's averaged gradients, each rank scaling its shard's: the
  // partial sums of |g|^p (a max for inf) all-reduced (a collective: every rank calls it). The
  // same total norm as the unsharded clip_grad_norm_ up to the order of its f64 additions (the
  // inf norm exactly); returns it.
  double clip_grad_norm_(double max_norm, double norm_type = 2.0);

  // Optimizer state on this rank (optim::Optimizer::state_bytes: masters and buffers), and its
  // sum over the ranks, which is what the unsharded optimizer holds (a collective).
  int64_t optimizer_state_bytes() const { return inner_->state_bytes(); }
  int64_t optimizer_state_bytes_all_ranks();

  // The unsharded optimizer's state_dict (optim::Optimizer::state_dict, its keys and values: the
  // parameters numbered group by group as given to the constructor), assembled from every rank's
  // shard: a collective (all-gathers, every rank receives the whole dict; rank 0 saves it). It
  // resumes unsharded on one process, or sharded on any world size through load_state_dict.
  StateDict state_dict();
  // Takes such a dict (every rank passes the whole of it) and loads this rank's pieces of it into
  // the shard's optimizer (whose load_state_dict checks the rest). No communication.
  void load_state_dict(const StateDict& sd);

  struct Piece {
    size_t param;          // index into ddp.parameters_in_order()
    int64_t begin, length; // elements of that parameter (flattened)
    size_t bucket, slot;   // its bucket, and its parameter's position in it
    int64_t chunk_offset;  // where it starts in the rank's chunk of the bucket
    Tensor shard;          // the 1-D alias of those elements the optimizer updates (this rank's)
  };
  // The pieces of rank `rank`'s shard, in bucket order (shard tensors: this rank's only).
  const std::vector<Piece>& pieces(int rank) const { return pieces_.at(static_cast<size_t>(rank)); }
  const std::vector<Piece>& pieces() const { return pieces(group_.rank()); }

 private:
  void partition();
  void receive(size_t bucket, const Tensor& chunk, const std::vector<bool>& used);
  void gather();
  void check_round_to_nearest() const;
  // Before every step of the shard's optimizer: refuses a GradScaler's step whose found_inf was
  // not reduced over the ranks.
  void check_step() const;

  DistributedDataParallel& ddp_;
  ProcessGroup& group_;
  std::vector<int> group_of_;  // per ddp parameter: its param group, -1 if in none
  std::vector<std::vector<size_t>> groups_;  // per param group: its ddp parameter indices, as given
  std::vector<int64_t> ckpt_index_;  // per ddp parameter: its index in the state dict (-1: in no group)
  std::vector<size_t> inner_index_;  // per piece of this rank: its parameter index in the shard's optimizer
  std::vector<DistributedDataParallel::BucketShape> shapes_;
  std::vector<std::vector<Piece>> pieces_;  // per rank
  struct Gather {
    DType dtype;
    int64_t per_rank = 0;                   // the largest shard of this dtype (the others padded)
    std::vector<std::vector<std::pair<size_t, int64_t>>> at;  // per rank: (piece, offset) of its pieces
  };
  std::vector<Gather> gathers_;  // one per parameter dtype
  Device device_ = Device::CPU();  // every parameter's (the all-gathers' buffers live there)
  std::unique_ptr<optim::Optimizer> inner_;
  int hook_id_ = -1, pre_hook_id_ = -1, observer_id_ = -1;
  // A found_inf reduction (kFoundInfReduction) ran on the group since the last synchronised
  // backward handed this rank its shard: a GradScaler stepping the shard decides with every rank.
  bool found_inf_reduced_ = false;
};

}  // namespace mixtape::distributed
