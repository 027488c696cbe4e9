// autograd/checkpoint.cpp — see autograd/checkpoint.h. The tape gets one CheckpointNode per
// segment; its apply() is a small forward + backward of its own. Invariant: between forward and
// backward a segment holds only its inputs; everything else it computes is freed as soon as
// the op that uses it has run.
#include "autograd/checkpoint.h"

#include <atomic>
#include <sstream>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/saved_tensor.h"
#include "core/error.h"
#include "core/rng.h"

namespace mixtape::autograd {
namespace {

thread_local int tls_recomputing = 0;
struct RecomputeScope {
  RecomputeScope() { ++tls_recomputing; }
  ~RecomputeScope() { --tls_recomputing; }
};

std::atomic<RecomputeRegion> g_region{nullptr};

// Puts the default generator at the forward's position for the recompute and back where
// backward found it afterwards (also on exceptions).
class RngAtForward {
 public:
  explicit RngAtForward(Generator::Range forward) : gen_(default_generator()), seed_(gen_.seed()), offset_(gen_.offset()) {
    gen_.set_state(forward.seed, forward.offset);
  }
  ~RngAtForward() { gen_.set_state(seed_, offset_); }
  RngAtForward(const RngAtForward&) = delete;
  RngAtForward& operator=(const RngAtForward&) = delete;

 private:
  Generator& gen_;
  uint64_t seed_, offset_;
};

// How a segment input took part in the forward's graph; the recompute gives its copy the same
// standing, because the weight-cast cache decides by it (only leaves that require grad and are
// not views are cached).
enum class InputKind : uint8_t {
  NoGrad,    // undefined, or does not require grad: a plain tensor again
  Leaf,      // a leaf that requires grad (not a view): a leaf that requires grad again
  Computed,  // has a grad_fn (or is a view): a non-leaf again, its gradient caught by the sink
};

InputKind kind_of(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return InputKind::NoGrad;
  return t.is_leaf() && !t.is_view() ? InputKind::Leaf : InputKind::Computed;
}

// The grad_fn of the recompute's non-leaf inputs: the engine sums the gradients of all their
// uses in its slots exactly as it does at the input's own grad_fn in the plain graph, and
// hands them here, where apply() keeps them for CheckpointNode to return.
class InputGradSink final : public Node {
 public:
  explicit InputGradSink(size_t n) : Node(next_seq_nr()), grads_(n) {}
  TensorList apply(TensorList grads) override {
    for (size_t i = 0; i < grads.size() && i < grads_.size(); ++i) grads_[i] = std::move(grads[i]);
    return {};
  }
  std::string name() const override { return "CheckpointInputs"; }
  size_t num_outputs() const override { return grads_.size(); }
  const Tensor& grad(size_t i) const { return grads_[i]; }

 private:
  TensorList grads_;
};

void run_in_forward_region(const AutocastState& forward, const std::function<void()>& body) {
  if (RecomputeRegion region = g_region.load(std::memory_order_acquire)) return region(forward, body);
  AutocastStateGuard as_in_forward(forward);
  body();
}

class CheckpointNode final : public Node {
 public:
  CheckpointNode(SegmentFn fn, const TensorList& inputs, const TensorList& outputs, AutocastState autocast,
                 Generator::Range rng)
      : Node(next_seq_nr()), fn_(std::move(fn)), autocast_(autocast), rng_(rng) {
    for (const Tensor& t : inputs) {
      saved_.emplace_back(t.defined() ? SavedTensor(t, false) : SavedTensor());
      input_kind_.push_back(kind_of(t));
      next_edges_.push_back(t.defined() ? gradient_edge(t) : Edge{});
    }
    for (const Tensor& o : outputs) output_meta_.push_back(TensorMeta::of(o));
  }

  TensorList apply(TensorList grads) override {
    MT_CHECK(!released_, "checkpoint: trying to backward through a checkpointed segment a second time; "
             "pass retain_graph=true to the first backward");
    // The engine turns grad mode on only for create_graph.
    MT_CHECK(!GradMode::is_enabled(), "checkpoint: create_graph=true (double backward) through a checkpointed "
             "segment is not supported: its gradients come from a backward of its own, which is not recorded");
    auto sink = std::make_shared<InputGradSink>(saved_.size());
    TensorList in;
    for (size_t i = 0; i < saved_.size(); ++i) {
      if (!saved_[i].defined()) {
        in.emplace_back();
        continue;
      }
      Tensor t = saved_[i].unpack(shared_from_this(), "checkpoint input " + std::to_string(i)).detach();
      if (input_kind_[i] == InputKind::Leaf) t.requires_grad_(true);
      if (input_kind_[i] == InputKind::Computed) t.set_history(sink, static_cast<uint32_t>(i));
      in.push_back(t);
    }
    TensorList outs;
    {
      // Recompute exactly as forward did: same random draws, recording on, inside a region with
      // the forward's autocast settings and a cache of its own.
      RngAtForward rng(rng_);
      EnableGradGuard grad_on;
      RecomputeScope recomputing;
      run_in_forward_region(autocast_, [&] { outs = fn_(in); });
    }
    MT_CHECK(outs.size() == output_meta_.size(), "checkpoint: the recomputed segment returned ", outs.size(),
             " tensors, the forward returned ", output_meta_.size(), " (the function must be deterministic)");
    TensorList roots, root_grads;
    for (size_t i = 0; i < outs.size(); ++i) {
      MT_CHECK(outs[i].defined() && outs[i].sizes() == output_meta_[i].sizes && outs[i].dtype() == output_meta_[i].dtype,
               "checkpoint: recomputed output ", i, " is ", outs[i].defined() ? outs[i].describe() : "undefined",
               ", the forward gave ", dtype_name(output_meta_[i].dtype), shape_str(output_meta_[i].sizes),
               " (the function must be deterministic)");
      if (i < grads.size() && grads[i].defined() && outs[i].requires_grad()) {
        roots.push_back(outs[i]);
        root_grads.push_back(grads[i]);
      }
    }
    if (!roots.empty()) backward(roots, root_grads);
    TensorList in_grads;
    for (size_t i = 0; i < in.size(); ++i) {
      switch (input_kind_[i]) {
        case InputKind::NoGrad: in_grads.emplace_back(); break;
        case InputKind::Leaf: in_grads.push_back(in[i].grad()); break;
        case InputKind::Computed: in_grads.push_back(sink->grad(i)); break;
      }
    }
    return in_grads;
  }

  std::string name() const override { return "CheckpointBackward"; }
  std::string describe() const override {
    std::ostringstream os;
    os << name() << "  (recomputes its segment; saved: " << saved_.size() << " inputs)";
    return os.str();
  }
  void release_saved() override {
    for (auto& s : saved_) s.release();
    released_ = true;
  }
  size_t num_outputs() const override { return output_meta_.size(); }

 private:
  SegmentFn fn_;
  AutocastState autocast_;
  Generator::Range rng_;  // the default generator's (seed, offset) when forward started
  std::vector<SavedTensor> saved_;
  std::vector<InputKind> input_kind_;
  std::vector<TensorMeta> output_meta_;
  bool released_ = false;
};

}  // namespace

bool in_checkpoint_recompute() { return tls_recomputing > 0; }

void set_recompute_region(RecomputeRegion region) { g_region.store(region, std::memory_order_release); }

TensorList checkpoint(const SegmentFn& fn, const TensorList& inputs) {
  MT_CHECK(fn, "checkpoint: expected a function");
  if (!GradMode::is_enabled()) return fn(inputs);  // nothing will be differentiated: a plain call
  Generator& gen = default_generator();
  const Generator::Range rng{gen.seed(), gen.offset()};
  const AutocastState autocast = autocast_state();
  TensorList outs;
  bool needs_grad = false;
  {
    // Recorded, so that whether an output requires grad is decided as in the plain graph (a
    // parameter captured by fn counts, even when no input requires grad), but saving nothing:
    // each activation is freed once the op that uses it has run. The recorded graph goes when
    // this block ends; only the outputs' storage is kept.
    DiscardSavedTensorsGuard keep_nothing;
    TensorList recorded = fn(inputs);
    for (const Tensor& o : recorded) {
      needs_grad = needs_grad || (o.defined() && o.requires_grad());
      outs.push_back(o.defined() ? o.detach() : Tensor());
    }
  }
  if (!needs_grad) return outs;
  for (const Tensor& o : outs)
    MT_CHECK(o.defined(), "checkpoint: the segment returned an undefined tensor");
  auto node = std::make_shared<CheckpointNode>(fn, inputs, outs, autocast, rng);
  for (size_t i = 0; i < outs.size(); ++i) outs[i].set_history(node, static_cast<uint32_t>(i));
  return outs;
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input) {
  return checkpoint([fn](const TensorList& in) { return TensorList{fn(in[0])}; }, TensorList{input})[0];
}

}  // namespace mixtape::autograd
