// distributed/data_parallel.h — DistributedDataParallel: one model replica per rank, gradients
// averaged over the ranks in buckets whose all-reduce starts during backward
// (torch.nn.parallel.DistributedDataParallel).
//
// Invariant: after a synchronised backward every rank holds the same .grad for every parameter
// that some rank produced a gradient for (the sum over the ranks that did, divided by the world
// size), written when that backward ends; a parameter no rank produced one for keeps no .grad.
// The buckets are reduced in the same order on every rank, whatever order their gradients became
// ready in. Every training forward and every synchronised backward starts with a step check
// (a small collective): a rank that ran a training forward and then anything but a synchronised
// backward (its next forward, another collective) fails there, and so do the ranks reducing,
// each naming the ranks that skipped (docs/DISTRIBUTED.md, "Every rank reduces every step"). Under no_sync() nothing
// is communicated and gradients accumulate locally; the next synchronised backward averages the
// accumulated sums. Construction refuses ranks whose models differ (names, shapes, dtypes) and
// then copies rank 0's parameters and buffers to every rank. In sharded mode (shard_gradients,
// ZeRO-1) a synchronised backward instead hands each rank its chunk of every bucket's average and
// leaves no .grad on the parameters.
// The design (buckets, overlap, FP32 vs 16-bit reduction): docs/DISTRIBUTED.md. A step captured
// in a CUDA graph on NCCL captures the buckets' all-reduces; its step checks run at capture and
// not at replays; gradient_as_bucket_view and sharded mode are refused there (docs/DISTRIBUTED.md,
// "DDP in a CUDA graph").
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "models/module.h"

namespace mixtape::distributed {

struct DataParallelOptions {
  // Bucket capacities in bytes of the reduction dtype (PyTorch: 25 MiB, the first bucket 1 MiB,
  // so the first all-reduce starts early in backward). A parameter larger than a cap gets a
  // bucket of its own.
  int64_t bucket_cap_bytes = 25 << 20;
  int64_t first_bucket_cap_bytes = 1 << 20;
  // 16-bit gradients are summed in FP32 buckets (true, the default) or in their own dtype
  // (false: half the traffic; the overflow/underflow trade-off is in docs/DISTRIBUTED.md).
  // FP32 and FP64 gradients are always summed in their own dtype.
  bool reduce_16bit_in_fp32 = true;
  // The reduction precision as a choice (FSDP's MixedPrecision.reduce_dtype): when set (Float32,
  // BFloat16 or Float16), every gradient, whatever its dtype, is cast into buckets of this dtype,
  // summed in it and cast back; it replaces reduce_16bit_in_fp32. Float16 with predivide is
  // PyTorch's fp16_compress_hook (cast, divide, sum); Float16 without predivide under a
  // GradScaler is the loss-scaled FP16 reduction (the scaled gradients summed, an overflow inf on
  // every rank, skipped by the scaler). Underflow and overflow of each: docs/DISTRIBUTED.md,
  // "Reduction precision". On CUDA the buckets are reduced by NCCL (or through host memory).
  std::optional<DType> reduce_dtype;
  // Divide by the world size before summing (PyTorch does): the sum of the quotients cannot
  // overflow where every rank's gradient was finite, but 16-bit quotients may underflow. false
  // sums first and divides after, in the wider of the bucket's and the gradient's dtype.
  bool predivide = true;
  // PyTorch's gradient_as_bucket_view: each parameter's .grad, once reduced, is a view of its
  // place in the bucket, so the average is not copied out of the bucket and the gradients take
  // no memory besides the buckets. A backward's fresh gradients (mixtape accumulates out of
  // place) are still copied in; a .grad that is the view already (nothing accumulated since) is
  // not. Only buckets of the gradients' own dtype (a 16-bit gradient in an FP32 bucket keeps
  // its copy); the "used" counts then travel in a small all-reduce of their own per bucket.
  // Not under ZeroRedundancyOptimizer (whose shards hold the reduced
  // gradients). Bit for bit the gradients of the default (docs/DISTRIBUTED.md).
  bool gradient_as_bucket_view = false;
  // Copy rank 0's buffers (BatchNorm's running statistics) to every rank before each training
  // forward, as PyTorch does, so the replicas' buffers never drift apart.
  bool broadcast_buffers = true;
};

// What the last synchronised backward communicated and how much of it backward hid.
struct DataParallelStats {
  int buckets = 0;
  int64_t bytes = 0;           // this rank's bytes all-reduced (bucket dtype)
  double comm_seconds = 0;     // time the communication thread spent inside the all-reduces
  double exposed_seconds = 0;  // time the end of backward waited for them
  // The share of the all-reduce time that ran while backward was still computing.
  double hidden_fraction() const { return comm_seconds > 0 ? std::max(0.0, 1.0 - exposed_seconds / comm_seconds) : 0; }
};

class DistributedDataParallel : public nn::Module {
 public:
  DistributedDataParallel(std::shared_ptr<nn::Module> module, ProcessGroup& group, DataParallelOptions options = {});
  ~DistributedDataParallel() override;

  // Copies rank 0's buffers to every rank (training mode, broadcast_buffers), then module(x).
  Tensor forward(const Tensor& x) override;

  // Copies rank 0's buffers to every rank now (before an evaluation or a save: the replicas'
  // BatchNorm statistics drift apart by one local update after each training forward).
  void sync_buffers();

  nn::Module& module() { return *module_; }
  const std::shared_ptr<nn::Module>& module_ptr() const { return module_; }
  ProcessGroup& group() { return group_; }

  // While the guard lives, backward does not communicate (gradient accumulation's micro-batches).
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(ddp), was_(ddp.sync_) { ddp_.sync_ = false; }
    ~NoSync() { ddp_.sync_ = was_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool was_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  // The buckets' parameter names, in reduction order (for tests and docs).
  std::vector<std::vector<std::string>> bucket_layout() const;

  // ---- gradient sharding (ZeRO-1: distributed/zero_redundancy.h) ----
  // A bucket's gradient is `numel` elements (its parameters' in `params` order, parameter k at
  // `offsets[k]`), cut into world_size chunks of `chunk` elements (the last ones zero-padded):
  // chunk r is rank r's shard of the bucket.
  struct BucketShape {
    DType dtype;
    Device device;
    int64_t numel = 0, chunk = 0;
    std::vector<size_t> params;    // indices into parameters()
    std::vector<int64_t> offsets;
  };
  // The trainable parameters, in registration order (what BucketShape::params index).
  const std::vector<std::pair<std::string, Tensor>>& parameters_in_order() const { return params_; }
  // The buckets for the parameters' current grad dtypes (rebuilt first where they changed).
  std::vector<BucketShape> bucket_shapes();
  // Sharded mode (`sink` set): every synchronised backward reduce-scatters each bucket instead of
  // all-reducing it, hands this rank's chunk of it, averaged, to sink(bucket, chunk, used), where
  // used[k] says whether any rank produced a gradient for the bucket's parameter k, and then drops
  // every parameter's .grad (packed into the buckets, they hold this rank's local sums only). The
  // buckets may not be rebuilt while sharded: a grad dtype changed afterwards is an error. An
  // empty sink returns to all-reduce.
  using ShardSink = std::function<void(size_t bucket, const Tensor& chunk, const std::vector<bool>& used)>;
  void shard_gradients(ShardSink sink);
  bool sharded() const { return static_cast<bool>(sink_); }
  const DataParallelStats& last_stats() const { return stats_; }

  std::string extra_repr() const override;

 private:
  // `flat` is world_size chunks of `stride` = chunk + params.size() elements: chunk k holds the
  // bucket's gradient elements [k * chunk, (k + 1) * chunk) (zeros past numel), then one "had a
  // .grad" count per parameter (every chunk the same counts, so a rank that receives only its own
  // chunk learns them all). The same layout whether all-reduced or reduce-scattered, so both
  // reduce the same buffer with the same call (on MPI, bit for bit: docs/DISTRIBUTED.md). A view
  // bucket (gradient_as_bucket_view) has no counts in `flat` (stride == chunk): see `views`.
  struct Bucket {
    std::vector<size_t> params;          // indices into params_
    std::vector<int64_t> offsets;        // element offset of each in the bucket's gradient
    DType dtype;
    Device device;
    // reduce_dtype set: every parameter's grad dtype (buckets do not mix them then). Divided
    // after the sum in the gradient's dtype where that is wider than the bucket's (!predivide).
    std::optional<DType> grad_dtype;
    bool divide_late = false;
    // gradient_as_bucket_view: `flat` holds the gradient elements only (stride == chunk, so
    // parameter k is the contiguous [offsets[k], offsets[k] + numel)), and the used counts
    // travel in `counts` (f64, one per parameter), all-reduced after `flat`.
    bool views = false;
    Tensor counts;
    Work counts_work;
    int64_t numel = 0;
    int64_t chunk = 0, stride = 0;
    Tensor flat;
    Tensor shard;                        // sharded mode: this rank's chunk, reduced
    bool all_used_here = false;          // this backward: every parameter had a .grad on this rank
    size_t pending = 0;                  // parameters not yet ready this backward
    bool launched = false;
    Work work;
  };
  void check_replicas_match();
  std::vector<DType> grad_dtypes() const;
  void broadcast_from_rank0(const TensorList& tensors);
  void build_buckets();
  // fn(element offset in the parameter, position in `flat`, length) for each run of bucket
  // parameter k's elements that lies in one chunk.
  template <typename Fn>
  void for_each_run(const Bucket& b, size_t k, Fn fn) const;
  void on_grad_ready(size_t param_index);
  void launch(size_t bucket_index);
  void finish_backward();
  void reset_backward_state();
  // The step check: an i64[2 * world] max-reduced, slot r rank r's status, slot world + r the
  // number of training forwards it had run. Returns the Work (its tensor in step_check_).
  enum Status : int64_t { kReducing = 1, kNotReducing = 2 };
  Work start_step_check(Status mine);
  // Throws, and marks the group failed, if the ranks' statuses or forward counts differ; `doing`
  // says what this rank is doing (for its message).
  void verify_step_check(Status mine, const std::string& doing);
  void on_collective(const std::string& what);
  // Marks DDP's own collectives (step checks, buckets, buffer broadcasts): not "another collective".
  struct OwnCollectives {
    explicit OwnCollectives(bool& f) : f_(f), was_(f) { f_ = true; }
    ~OwnCollectives() { f_ = was_; }
    bool& f_;
    bool was_;
  };

  std::shared_ptr<nn::Module> module_;
  ProcessGroup& group_;
  DataParallelOptions options_;
  std::vector<std::pair<std::string, Tensor>> params_;  // trainable, registration order
  std::vector<size_t> bucket_of_;                        // param index -> bucket
  std::vector<bool> ready_;                              // this backward
  std::vector<Bucket> buckets_;
  std::vector<DType> built_for_;                         // the grad dtypes buckets_ were made for
  std::vector<int> hook_ids_;
  size_t next_launch_ = 0;
  bool armed_ = false;  // a backward has reached a hook and queued finish_backward
  bool sync_ = true;
  int64_t forwards_ = 0;  // training forwards run (every rank runs as many)
  bool due_ = false;      // a training forward ran; its backward has not reduced (or run under no_sync) yet
  Tensor step_check_;
  Work step_work_;
  int observer_id_ = -1;
  ShardSink sink_;
  bool own_collectives_ = false;
  DataParallelStats stats_;
};

// For GradScaler::set_found_inf_reducer: the max of every rank's flag, an all-reduce labelled
// kFoundInfReduction (ZeroRedundancyOptimizer watches for it: a GradScaler's step of its shard
// without that reduction first is refused).
inline constexpr char kFoundInfReduction[] = "GradScaler found_inf";
std::function<void(const Tensor&)> found_inf_reducer(ProcessGroup& group);

}  // namespace mixtape::distributed
