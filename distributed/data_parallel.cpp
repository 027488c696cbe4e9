// distributed/data_parallel.cpp — replica checks, rank 0's state to every rank, gradient buckets
// reduced during backward, and the end-of-backward write-back.
#include "distributed/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <sstream>
#include <tuple>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#if MIXTAPE_WITH_CUDA
#include "core/cuda/graph.h"  // cuda::is_capturing, cuda::check_not_capturing
#endif
#include "ops/creation.h"

namespace mixtape::distributed {
namespace {

std::string replica_description(const nn::Module& m) {
  std::ostringstream os;
  for (const auto& [name, t] : m.named_parameters())
    os << "parameter '" << name << "' " << layout_of(t) << (t.requires_grad() ? "" : " (frozen)") << "\n";
  for (const auto& [name, t] : m.named_buffers()) os << "buffer '" << name << "' " << layout_of(t) << "\n";
  return os.str();
}

// Whether `g` is exactly the 1-D bucket region `view` (same memory, contiguous, same size and
// dtype): a .grad left by gradient_as_bucket_view that nothing replaced since.
bool is_view_of(const Tensor& g, const Tensor& view) {
  return g.defined() && g.dtype() == view.dtype() && g.numel() == view.numel() && g.is_contiguous() &&
         g.data_ptr() == view.data_ptr();
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string l; std::getline(is, l);) out.push_back(l);
  return out;
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, ProcessGroup& group,
                                                 DataParallelOptions options)
    : nn::Module("DistributedDataParallel"), module_(std::move(module)), group_(group), options_(options) {
  MT_CHECK(module_, "DistributedDataParallel: the module is null");
  MT_CHECK(options_.bucket_cap_bytes > 0 && options_.first_bucket_cap_bytes > 0,
           "DistributedDataParallel: bucket capacities must be positive, got ", options_.bucket_cap_bytes, " and ",
           options_.first_bucket_cap_bytes);
  MT_CHECK(!options_.reduce_dtype || *options_.reduce_dtype == DType::Float32 ||
               *options_.reduce_dtype == DType::BFloat16 || *options_.reduce_dtype == DType::Float16,
           "DistributedDataParallel: reduce_dtype must be Float32, BFloat16 or Float16 (or unset), got ",
           options_.reduce_dtype ? dtype_name(*options_.reduce_dtype) : "");
  register_module("module", module_);
  for (auto& [name, t] : module_->named_parameters())
    if (t.requires_grad()) params_.emplace_back(name, t);
  check_replicas_match();
  TensorList state = module_->parameters();
  for (const Tensor& b : module_->buffers()) state.push_back(b);
  broadcast_from_rank0(state);
  build_buckets();
  for (size_t i = 0; i < params_.size(); ++i)
    hook_ids_.push_back(params_[i].second.register_post_accumulate_grad_hook([this, i](const Tensor&) { on_grad_ready(i); }));
  if (group_.world_size() > 1)
    observer_id_ = group_.add_collective_observer([this](const std::string& what) { on_collective(what); });
}

DistributedDataParallel::~DistributedDataParallel() {
  if (observer_id_ >= 0) group_.remove_collective_observer(observer_id_);
  for (size_t i = 0; i < params_.size(); ++i) params_[i].second.remove_post_accumulate_grad_hook(hook_ids_[i]);
}

void DistributedDataParallel::check_replicas_match() {
  const std::string mine = replica_description(*module_);
  const auto all = group_.all_gather_string(mine);
  const auto ref = lines(all[0]);
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const auto other = lines(all[r]);
    size_t i = 0;
    while (i < ref.size() && i < other.size() && ref[i] == other[i]) ++i;
    std::string diff = i < ref.size() && i < other.size()
                           ? "rank 0 has " + ref[i] + ", rank " + std::to_string(r) + " has " + other[i]
                       : i < ref.size() ? "rank " + std::to_string(r) + " lacks " + ref[i]
                                        : "rank " + std::to_string(r) + " has an extra " + other[i];
    MT_ERROR("DistributedDataParallel: the replicas differ (", ref.size(), " tensors on rank 0, ", other.size(),
             " on rank ", r, "): ", diff, ". Every rank must build the same model.");
  }
}

void DistributedDataParallel::broadcast_from_rank0(const TensorList& tensors) {
  if (group_.world_size() == 1) return;
  // One broadcast per (device, dtype): pack, send, unpack.
  std::map<std::pair<std::string, int>, TensorList> groups;
  for (const Tensor& t : tensors) groups[{t.device().str(), static_cast<int>(t.dtype())}].push_back(t);
  autograd::NoGradGuard no_grad;
  for (auto& [key, ts] : groups) {
    int64_t n = 0;
    for (const Tensor& t : ts) n += t.numel();
    Tensor flat = empty({n}, TensorOptions(ts[0].dtype()).with_device(ts[0].device()));
    int64_t off = 0;
    for (const Tensor& t : ts) {
      flat.narrow(0, off, t.numel()).view(t.sizes()).copy_(t);
      off += t.numel();
    }
    group_.broadcast(flat, 0, /*check_layout=*/false);  // the replica check at construction covers it
    off = 0;
    for (const Tensor& t : ts) {
      const_cast<Tensor&>(t).copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  }
}

std::vector<DType> DistributedDataParallel::grad_dtypes() const {
  std::vector<DType> out;
  for (const auto& [name, p] : params_) out.push_back(p.grad_dtype());
  return out;
}

void DistributedDataParallel::build_buckets() {
  // Reverse registration order: roughly the order backward produces the gradients in.
  // (device, bucket dtype, grad dtype or -1) -> bucket being filled; with reduce_dtype a bucket
  // holds one grad dtype (where to divide depends on it).
  std::map<std::tuple<std::string, int, int>, size_t> open;
  buckets_.clear();
  built_for_ = grad_dtypes();
  bucket_of_.assign(params_.size(), 0);
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor& p = params_[k].second;
    const DType g = p.grad_dtype();
    const bool sixteen = g == DType::Float16 || g == DType::BFloat16;
    const DType dt = options_.reduce_dtype ? *options_.reduce_dtype
                     : sixteen && options_.reduce_16bit_in_fp32 ? DType::Float32
                                                                 : g;
    const auto key = std::make_tuple(p.device().str(), static_cast<int>(dt), options_.reduce_dtype ? static_cast<int>(g) : -1);
    auto it = open.find(key);
    const int64_t bytes = p.numel() * static_cast<int64_t>(element_size(dt));
    if (it != open.end()) {
      Bucket& b = buckets_[it->second];
      const int64_t cap = it->second == 0 ? options_.first_bucket_cap_bytes : options_.bucket_cap_bytes;
      if ((b.numel * static_cast<int64_t>(element_size(dt))) + bytes > cap) open.erase(it), it = open.end();
    }
    if (it == open.end()) {
      buckets_.push_back(Bucket{.dtype = dt, .device = p.device()});
      if (options_.reduce_dtype) {
        buckets_.back().grad_dtype = g;
        buckets_.back().divide_late = !options_.predivide && element_size(g) > element_size(dt);
      }
      it = open.insert_or_assign(key, buckets_.size() - 1).first;
    }
    Bucket& b = buckets_[it->second];
    b.params.push_back(k);
    b.offsets.push_back(b.numel);
    b.numel += p.numel();
    bucket_of_[k] = it->second;
  }
  // Each chunk ends with one count per parameter: 1 from every rank that had a .grad for it, so
  // the ranks learn in the same reduction which parameters no rank produced a gradient for.
  const int64_t world = group_.world_size();
  for (Bucket& b : buckets_) {
    b.chunk = (b.numel + world - 1) / world;
    b.views = options_.gradient_as_bucket_view &&
              std::all_of(b.params.begin(), b.params.end(), [&](size_t k) { return params_[k].second.grad_dtype() == b.dtype; });
    // Without the counts between the chunks, chunk c still starts the c-th N-th of the buffer, so
    // a ring all-reduce adds each element's values in the order it does with them (the same bits).
    b.stride = b.chunk + (b.views ? 0 : static_cast<int64_t>(b.params.size()));
    if (b.views) b.counts = zeros({static_cast<int64_t>(b.params.size())}, TensorOptions(DType::Float64));
    b.flat = zeros({world * b.stride}, TensorOptions(b.dtype).with_device(b.device));  // the padding stays 0
  }
  ready_.assign(params_.size(), false);
  reset_backward_state();
}

void DistributedDataParallel::reset_backward_state() {
  for (Bucket& b : buckets_) {
    b.pending = b.params.size();
    b.launched = false;
    b.work = Work();
  }
  std::fill(ready_.begin(), ready_.end(), false);
  next_launch_ = 0;
  armed_ = false;
}

void DistributedDataParallel::sync_buffers() {
  TensorList bufs = module_->buffers();
  if (!bufs.empty()) broadcast_from_rank0(bufs);
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  if (armed_) {
    // An error interrupted the last backward: its gradients were not averaged, and if some
    // buckets had left the ranks may have issued different collectives. (PyTorch: "Expected to
    // have finished reduction in the prior iteration".)
    bool any_left = false;
    for (Bucket& b : buckets_) any_left = any_left || b.launched;
    std::string wait_error;
    try {
      for (Bucket& b : buckets_)
        if (b.launched) b.work.wait();
    } catch (const std::exception& e) {
      wait_error = std::string(" (waiting for them: ") + e.what() + ")";
    }
    reset_backward_state();
    MT_ERROR("DistributedDataParallel: the previous backward was interrupted by an error before its gradients were "
             "averaged", any_left ? "; some buckets had already been sent, so the replicas may now differ" : "",
             wait_error, ". Restart from a checkpoint.");
  }
  if (is_training()) {
    OwnCollectives own(own_collectives_);
    if (sync_ && group_.world_size() > 1) {
      // A rank still due from its previous forward skipped that backward: its peers are in the
      // step check of their reductions, which this one meets.
      start_step_check(kNotReducing).wait();
      verify_step_check(kNotReducing, "at its next training forward");
    }
    ++forwards_;
    due_ = sync_ && group_.world_size() > 1;
    if (options_.broadcast_buffers) sync_buffers();
  }
  return (*module_)(x);
}

Work DistributedDataParallel::start_step_check(Status mine) {
  const int world = group_.world_size();
  std::vector<double> v(static_cast<size_t>(2 * world), 0.0);
  v[static_cast<size_t>(group_.rank())] = static_cast<double>(mine);
  v[static_cast<size_t>(world + group_.rank())] = static_cast<double>(forwards_);
  step_check_ = tensor(v, {2 * world}, TensorOptions(DType::Int64));
  return group_.all_reduce_async(step_check_, ReduceOp::Max, "DistributedDataParallel step check");
}

void DistributedDataParallel::verify_step_check(Status mine, const std::string& doing) {
  const int world = group_.world_size();
  const auto v = step_check_.to_vector<int64_t>();
  std::vector<int> skipped, reducing;
  bool same_count = true;
  for (int r = 0; r < world; ++r) {
    (v[static_cast<size_t>(r)] == kReducing ? reducing : skipped).push_back(r);
    same_count = same_count && v[static_cast<size_t>(world + r)] == forwards_;
  }
  if ((reducing.empty() || skipped.empty()) && same_count) return;
  auto names = [](const std::vector<int>& rs) {
    std::string s = rs.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < rs.size(); ++i) s += (i ? ", " : "") + std::to_string(rs[i]);
    return s;
  };
  std::string why;
  if (!reducing.empty() && !skipped.empty() && mine == kReducing) {
    why = names(skipped) + " did not reduce the gradients of training forward #" + std::to_string(forwards_) +
          " with this rank: it ran no synchronised backward after that forward (it went on to its next forward or "
          "another collective)";
  } else if (!reducing.empty() && !skipped.empty()) {
    why = names(reducing) + " reduced the gradients of training forward #" + std::to_string(forwards_) +
          ", but this rank (" + std::to_string(group_.rank()) + ") ran no synchronised backward after it and is " + doing;
  } else {
    why = "the ranks are at different training forwards (";
    for (int r = 0; r < world; ++r)
      why += (r ? ", " : "") + std::string("rank ") + std::to_string(r) + " ran " +
             std::to_string(v[static_cast<size_t>(world + r)]);
    why += "): a rank skipped an iteration or ran a forward the others did not";
  }
  // The reducing ranks queued their buckets behind the check: no later collective of any rank
  // can pair up with the others' any more.
  group_.mark_failed("DistributedDataParallel's step check");
  MT_ERROR("DistributedDataParallel: ", why, ". Every rank must run a synchronised backward after each training "
           "forward, in step with the others (a rank with an empty shard too: a forward and backward on zero "
           "samples, or every rank skips alike). The process group is unusable now.");
}

void DistributedDataParallel::on_collective(const std::string& what) {
  if (own_collectives_ || !due_) return;
  // Another collective after a training forward, before its backward: fine if every rank does
  // it (still due afterwards), fatal if a peer is reducing that forward's gradients meanwhile.
  OwnCollectives own(own_collectives_);
  start_step_check(kNotReducing).wait();
  verify_step_check(kNotReducing, "issuing " + what);
}

void DistributedDataParallel::on_grad_ready(size_t i) {
  if (!sync_) {
    due_ = false;  // the forward's backward ran, locally (no_sync): nothing to reduce this time
    return;
  }
  if (!armed_) {
    MT_CHECK(autograd::in_backward(), "DistributedDataParallel: a gradient of '", params_[i].first,
             "' was accumulated outside backward()");
    // An optimizer made after DDP gives its 16-bit parameters FP32 gradients (grad_dtype): the
    // buckets follow (every rank has the same model and optimizer, so all rebuild alike).
    if (grad_dtypes() != built_for_) {
      MT_CHECK(!sink_, "DistributedDataParallel: the gradient dtypes of the parameters changed after the "
               "ZeroRedundancyOptimizer partitioned its buckets (set grad_dtype before making it); the shards no "
               "longer match the buckets");
      build_buckets();
    }
#if MIXTAPE_WITH_CUDA
    // A step captured in a CUDA graph (docs/DISTRIBUTED.md, "DDP in a CUDA graph"): the buckets'
    // NCCL all-reduces are captured; what reads the reduction on the host is not.
    if (options_.gradient_as_bucket_view)
      cuda::check_not_capturing("DistributedDataParallel (gradient_as_bucket_view)",
                                "all-reduces the used counts through host memory and MPI");
    if (sink_)
      cuda::check_not_capturing("DistributedDataParallel (sharded: ZeroRedundancyOptimizer)",
                                "hands each bucket's shard to the optimizer with host-side bookkeeping");
#endif
    armed_ = true;
    stats_ = {};
    autograd::queue_callback([this] { finish_backward(); });
    if (group_.world_size() > 1) {
      OwnCollectives own(own_collectives_);
      step_work_ = start_step_check(kReducing);  // ahead of the buckets; read in finish_backward
    }
    due_ = false;
  }
  Bucket& b = buckets_[bucket_of_[i]];
  if (ready_[i]) {
    MT_CHECK(!b.launched, "DistributedDataParallel: parameter '", params_[i].first, "' received a second gradient in "
             "one backward after its bucket's all-reduce had started (is it used in a segment checkpointed with "
             "use_reentrant = true, whose inner backward accumulates its own gradient? The default, non-reentrant "
             "checkpoint accumulates once); the later gradient would not be averaged");
    return;  // accumulated again before its bucket left: the bucket copies the final sum
  }
  ready_[i] = true;
  if (--b.pending > 0) return;
  // Launch in bucket order only: every rank must issue the same all-reduces in the same order.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch(next_launch_++);
}

template <typename Fn>
void DistributedDataParallel::for_each_run(const Bucket& b, size_t k, Fn fn) const {
  const int64_t start = b.offsets[k], end = start + params_[b.params[k]].second.numel();
  for (int64_t e = start; e < end;) {
    const int64_t c = e / b.chunk, in = e - c * b.chunk, len = std::min(end - e, b.chunk - in);
    fn(e - start, c * b.stride + in, len);
    e += len;
  }
}

void DistributedDataParallel::launch(size_t bi) {
  Bucket& b = buckets_[bi];
  autograd::NoGradGuard no_grad;
  const int world = group_.world_size();
  std::vector<double> used(b.params.size());
  for (size_t j = 0; j < b.params.size(); ++j) {
    const Tensor& p = params_[b.params[j]].second;
    Tensor g = p.grad();
    used[j] = g.defined() ? 1.0 : 0.0;
    if (b.views) {
      Tensor view = b.flat.narrow(0, b.offsets[j], p.numel());
      if (!g.defined())
        view.zero_();
      else if (!is_view_of(g, view))
        view.copy_(g.contiguous().view({p.numel()}));
      continue;
    }
    const Tensor flat_g = g.defined() ? g.contiguous().view({p.numel()}) : Tensor();
    for_each_run(b, j, [&](int64_t e, int64_t at, int64_t len) {
      Tensor slot = b.flat.narrow(0, at, len);
      if (!g.defined())
        slot.zero_();  // unused on this rank this time: it contributes nothing
      else
        slot.copy_(flat_g.narrow(0, e, len));  // casts to the bucket's dtype
    });
  }
  if (options_.predivide && world > 1)
    for (int c = 0; c < world; ++c) b.flat.narrow(0, c * b.stride, b.chunk).mul_(Scalar(1.0 / world));
  const int64_t n = static_cast<int64_t>(used.size());
  // The usual case, every parameter used here, is a fill on the bucket's device (no copy from the
  // host), and finish_backward need not read the counts back: each sum is >= this rank's 1.
  b.all_used_here = std::all_of(used.begin(), used.end(), [](double u) { return u == 1.0; });
#if MIXTAPE_WITH_CUDA
  if (!b.all_used_here)
    for (size_t j = 0; j < used.size(); ++j)
      if (used[j] == 0)
        cuda::check_not_capturing(("DistributedDataParallel (bucket " + std::to_string(bi) + ", parameter '" +
                                   params_[b.params[j]].first + "' has no gradient on this rank)").c_str(),
                                  "sends and reads the bucket's used counts on the host");
#endif
  const Tensor counts = b.all_used_here ? Tensor() : tensor(used, {n}, TensorOptions(DType::Float64));
  if (b.views) {
    if (b.all_used_here)
      b.counts.fill_(1.0);
    else
      b.counts.copy_(counts);
  }
  for (int c = 0; c < world && !b.views; ++c) {
    Tensor slots = b.flat.narrow(0, c * b.stride + b.chunk, n);
    if (b.all_used_here)
      slots.fill_(1.0);
    else
      slots.copy_(counts);
  }
  b.launched = true;
  stats_.buckets += 1;
  stats_.bytes += static_cast<int64_t>(b.flat.nbytes());
  OwnCollectives own(own_collectives_);
  const std::string label = "DistributedDataParallel bucket " + std::to_string(bi);
  if (sink_) {
    b.shard = empty({b.stride}, TensorOptions(b.dtype).with_device(b.device));  // fresh: last step's grads may view the old one
    b.work = group_.reduce_scatter_async(b.shard, b.flat, ReduceOp::Sum, label);
  } else {
    b.work = group_.all_reduce_async(b.flat, ReduceOp::Sum, label);
    if (b.views) {
      stats_.bytes += static_cast<int64_t>(b.counts.nbytes());
      b.counts_work = group_.all_reduce_async(b.counts, ReduceOp::Sum, label + " used counts");
    }
  }
}

void DistributedDataParallel::finish_backward() {
  // Buckets whose parameters got no gradient in this backward (unused, or accumulated under
  // no_sync only) go now, in order, with whatever .grad holds.
  while (next_launch_ < buckets_.size()) launch(next_launch_++);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    if (group_.world_size() > 1) {
      step_work_.wait();
      verify_step_check(kReducing, "reducing");
    }
    for (Bucket& b : buckets_) {
      b.work.wait();
      if (b.views) b.counts_work.wait();
    }
  } catch (...) {
    reset_backward_state();
    throw;
  }
  stats_.exposed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  autograd::NoGradGuard no_grad;
  const int world = group_.world_size();
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    Bucket& b = buckets_[bi];
    stats_.comm_seconds += b.work.busy_seconds();
    const Tensor& reduced = sink_ ? b.shard : b.flat;  // chunk 0 of `flat`, or this rank's only
    const int chunks = sink_ ? 1 : world;
    if (!options_.predivide && world > 1 && !b.divide_late)
      for (int c = 0; c < chunks; ++c) reduced.narrow(0, c * b.stride, b.chunk).mul_(Scalar(1.0 / world));
    // A host read (on CUDA a device sync) only where some parameter had no .grad on this rank.
    const auto used = b.all_used_here ? std::vector<double>(b.params.size(), 1.0)
                      : b.views       ? b.counts.to_vector<double>()
                                      : reduced.narrow(0, b.chunk, static_cast<int64_t>(b.params.size())).to_vector<double>();
    if (sink_) {
      std::vector<bool> any(used.size());
      for (size_t j = 0; j < used.size(); ++j) any[j] = used[j] != 0;
      if (b.divide_late && world > 1)  // in the gradient's wider dtype: the 16-bit sum is exact there
        sink_(bi, b.shard.narrow(0, 0, b.chunk).to(*b.grad_dtype).mul_(Scalar(1.0 / world)), any);
      else
        sink_(bi, b.shard.narrow(0, 0, b.chunk), any);
      // Packed into the bucket, the local gradients are spent: the reduced shard is the sink's.
      for (size_t k : b.params) params_[k].second.set_grad(Tensor());
      continue;
    }
    for (size_t j = 0; j < b.params.size(); ++j) {
      if (used[j] == 0) continue;  // no rank produced a gradient: it keeps none (the optimizer skips it)
      const Tensor& p = params_[b.params[j]].second;
      if (b.views) {
        Tensor view = b.flat.narrow(0, b.offsets[j], p.numel());
        if (!is_view_of(p.grad(), view)) p.set_grad(view.view(p.sizes()));
        continue;
      }
      // The average, assembled where the parameter's elements span chunks.
      Tensor avg;
      int runs = 0;
      for_each_run(b, j, [&](int64_t, int64_t, int64_t) { ++runs; });
      if (runs == 1) {
        for_each_run(b, j, [&](int64_t, int64_t at, int64_t len) { avg = b.flat.narrow(0, at, len).view(p.sizes()); });
      } else {
        Tensor whole = empty({p.numel()}, TensorOptions(b.dtype).with_device(b.device));
        for_each_run(b, j, [&](int64_t e, int64_t at, int64_t len) { whole.narrow(0, e, len).copy_(b.flat.narrow(0, at, len)); });
        avg = whole.view(p.sizes());
      }
      Tensor g = p.grad();
      if (!g.defined()) {
        g = empty(p.sizes(), TensorOptions(p.grad_dtype()).with_device(p.device()));
        p.set_grad(g);
      }
      const_cast<Tensor&>(g).copy_(avg);
      if (b.divide_late && world > 1) const_cast<Tensor&>(g).mul_(Scalar(1.0 / world));
    }
  }
  reset_backward_state();
}

std::vector<DistributedDataParallel::BucketShape> DistributedDataParallel::bucket_shapes() {
  if (grad_dtypes() != built_for_) {
    MT_CHECK(!armed_, "DistributedDataParallel::bucket_shapes: called during a backward");
    build_buckets();
  }
  std::vector<BucketShape> out;
  for (const Bucket& b : buckets_)
    out.push_back(BucketShape{.dtype = b.dtype, .device = b.device, .numel = b.numel, .chunk = b.chunk,
                              .params = b.params, .offsets = b.offsets});
  return out;
}

void DistributedDataParallel::shard_gradients(ShardSink sink) {
  MT_CHECK(!sink || !armed_, "DistributedDataParallel::shard_gradients: called during a backward");
  MT_CHECK(!sink || !options_.gradient_as_bucket_view, "DistributedDataParallel::shard_gradients: "
           "gradient_as_bucket_view is on; a ZeroRedundancyOptimizer's shards hold the reduced gradients and the "
           "parameters keep none (make the DistributedDataParallel without it)");
  sink_ = std::move(sink);
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_layout() const {
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : buckets_) {
    out.emplace_back();
    for (size_t k : b.params) out.back().push_back(params_[k].first);
  }
  return out;
}

std::string DistributedDataParallel::extra_repr() const {
  std::ostringstream os;
  os << "world_size=" << group_.world_size() << ", buckets=" << buckets_.size()
     << ", reduce_16bit_in_fp32=" << (options_.reduce_16bit_in_fp32 ? "true" : "false")
     << (options_.gradient_as_bucket_view ? ", gradient_as_bucket_view=true" : "");
  if (options_.reduce_dtype) os << ", reduce_dtype=" << dtype_name(*options_.reduce_dtype);
  return os.str();
}

std::function<void(const Tensor&)> found_inf_reducer(ProcessGroup& group) {
  return [&group](const Tensor& found_inf) { group.all_reduce_async(found_inf, ReduceOp::Max, kFoundInfReduction).wait(); };
}

}  // namespace mixtape::distributed
