// autograd/checkpoint.cpp — see autograd/checkpoint.h. Non-reentrant: a Frame per segment is the
// saved-tensor hooks of its forward and recomputes its placeholders at a backward's first unpack.
// Reentrant: one CheckpointNode per segment, whose apply() is a small forward + backward of its own.
// Invariant (both): between forward and backward, and between backwards, a segment holds only
// its inputs; everything else it computes is freed as soon as the op that uses it has run.
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

std::atomic<const RecomputeRegion*> g_region{nullptr};

RegionCapture capture_region() {
  const RecomputeRegion* region = g_region.load(std::memory_order_acquire);
  return region != nullptr ? region->capture() : nullptr;
}

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

// The grad_fn of the recompute's non-leaf inputs (so they stay non-leaves). Reentrant: the
// engine sums the gradients of all their uses in its slots exactly as it does at the input's own
// grad_fn in the plain graph, and hands them here, where apply() keeps them for CheckpointNode
// to return. Non-reentrant: the recompute's graph is never backpropagated; it only stands there.
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

void run_in_forward_region(const AutocastState& forward, const RegionCapture& captured,
                           const std::function<void()>& body) {
  if (const RecomputeRegion* region = g_region.load(std::memory_order_acquire))
    return region->run(forward, captured, body);
  AutocastStateGuard as_in_forward(forward);
  body();
}

constexpr const char* kNoCreateGraph =
    "checkpoint: create_graph=true (double backward) through a checkpointed segment is not supported: the "
    "recomputed tensors its backward uses are not recorded";

// A segment's inputs, kept for the recompute (version-checked), with how each took part in
// the forward's graph.
class SegmentInputs {
 public:
  explicit SegmentInputs(const TensorList& inputs) {
    for (const Tensor& t : inputs) {
      saved_.emplace_back(t.defined() ? SavedTensor(t, false) : SavedTensor());
      kinds_.push_back(kind_of(t));
    }
  }
  size_t size() const { return saved_.size(); }
  InputKind kind(size_t i) const { return kinds_[i]; }
  void release() {
    for (auto& s : saved_) s.release();
  }
  // The inputs of a recompute, detached, each with its forward standing: a leaf that required
  // grad is again such a leaf, a computed tensor again a non-leaf (its grad_fn the `sink`).
  TensorList for_recompute(const std::shared_ptr<Node>& sink) const {
    TensorList in;
    for (size_t i = 0; i < saved_.size(); ++i) {
      if (!saved_[i].defined()) {
        in.emplace_back();
        continue;
      }
      Tensor t = saved_[i].unpack(nullptr, "checkpoint input " + std::to_string(i)).detach();
      if (kinds_[i] == InputKind::Leaf) t.requires_grad_(true);
      if (kinds_[i] == InputKind::Computed) t.set_history(sink, static_cast<uint32_t>(i));
      in.push_back(t);
    }
    return in;
  }

 private:
  std::vector<SavedTensor> saved_;
  std::vector<InputKind> kinds_;
};

// Reruns the segment exactly as its forward ran: same random draws, recording on, inside a
// region with the forward's autocast settings and a cache of its own.
TensorList rerun(const SegmentFn& fn, const TensorList& in, const AutocastState& autocast, const RegionCapture& region,
                 Generator::Range rng) {
  TensorList outs;
  RngAtForward at_forward(rng);
  EnableGradGuard grad_on;
  RecomputeScope recomputing;
  run_in_forward_region(autocast, region, [&] { outs = fn(in); });
  return outs;
}

// ---- non-reentrant ----

// What a recompute saves, in order; the recompute's own graph keeps nothing.
class Capture final : public SavedTensorHooks {
 public:
  std::optional<uint32_t> pack(const Tensor& t) override {
    saved.push_back(t.detach());
    return std::nullopt;
  }
  Tensor unpack(uint32_t, const std::string&) override { return {}; }  // never reached: nothing packed
  void release(uint32_t) override {}
  TensorList saved;
};

// One non-reentrant segment: the saved-tensor hooks of its forward (slot k = the k-th tensor its
// ops saved, with its metadata and version) and, between the first unpack of a backward and that
// backward's end, the recomputed tensor of every slot not yet released. Held by the placeholders
// only: it goes with the last of them.
class Frame final : public SavedTensorHooks, public std::enable_shared_from_this<Frame> {
 public:
  Frame(SegmentFn fn, const TensorList& inputs, AutocastState autocast, RegionCapture region, Generator::Range rng)
      : fn_(std::move(fn)), inputs_(inputs), autocast_(autocast), region_(std::move(region)), rng_(rng) {}

  std::optional<uint32_t> pack(const Tensor& t) override {
    meta_.push_back(TensorMeta::of(t));
    versions_.push_back(t.version());
    live_.push_back(true);
    return static_cast<uint32_t>(meta_.size() - 1);
  }

  Tensor unpack(uint32_t slot, const std::string& what) override {
    // The engine turns grad mode on only for create_graph: the recomputed tensors would enter
    // the double backward without their history.
    MT_CHECK(!GradMode::is_enabled(), kNoCreateGraph, " (", what, ")");
    if (!recomputed_) recompute();
    MT_CHECK(slot < slots_.size() && slots_[slot].defined(), "checkpoint: internal error: ", what,
             " (slot ", slot, ") is not held by its segment's frame");
    const Tensor& t = slots_[slot];
    // The recompute's copy went through what the forward's tensor went through: a write after it
    // was saved (the forward's tensor, dead by now, had the same) or a tensor the segment reads
    // changed in place since the forward shows here as in the plain graph.
    MT_CHECK(t.version() == versions_[slot],
             modified_in_place_message(what, t.describe() + ", recomputed by its checkpointed segment", t.version(),
                                       versions_[slot]));
    return t;
  }

  void release(uint32_t slot) override {
    if (slot >= live_.size()) return;
    live_[slot] = false;
    if (slot < slots_.size()) slots_[slot] = Tensor();
  }

 private:
  void recompute() {
    MT_CHECK(!recomputing_, "checkpoint: the segment unpacked its own saved tensors while being recomputed");
    recomputing_ = true;
    struct Done {
      bool& flag;
      ~Done() { flag = false; }
    } done{recomputing_};
    // The inputs first, outside the rerun's region: an input that is itself a placeholder of an
    // enclosing checkpoint recomputes that one now.
    TensorList in = inputs_.for_recompute(std::make_shared<InputGradSink>(inputs_.size()));
    auto capture = std::make_shared<Capture>();
    {
      SavedTensorHooksGuard capturing(capture);
      rerun(fn_, in, autocast_, region_, rng_);
    }
    TensorList& got = capture->saved;
    MT_CHECK(got.size() == meta_.size(), "checkpoint: the segment's recompute saved ", got.size(),
             " tensors for backward, its forward saved ", meta_.size(), kDeterministic);
    for (size_t k = 0; k < got.size(); ++k) {
      const TensorMeta& m = meta_[k];
      MT_CHECK(got[k].sizes() == m.sizes && got[k].dtype() == m.dtype && got[k].device() == m.device,
               "checkpoint: saved tensor ", k, " of the segment is ", got[k].describe(), " in the recompute, ",
               dtype_short(m.dtype), shape_str(m.sizes), " on ", m.device, " in the forward", kDeterministic);
      if (!live_[k]) got[k] = Tensor();  // its node has finished without it, or is gone
    }
    // One recompute per backward, as PyTorch's (per graph task): its tensors go when this
    // backward ends, even with retain_graph, and a later backward recomputes. Between backwards
    // the segment holds only its inputs. Done when the callback is destroyed: after it ran, or
    // when a failing backward drops it.
    if (in_backward()) {
      struct Forget {
        std::weak_ptr<Frame> frame;
        ~Forget() {
          if (auto f = frame.lock()) f->forget_recompute();
        }
      };
      queue_callback([forget = std::make_shared<Forget>(Forget{weak_from_this()})] {});
    }
    slots_ = std::move(got);
    recomputed_ = true;
  }

  void forget_recompute() {
    slots_.clear();
    recomputed_ = false;
  }

  static constexpr const char* kDeterministic =
      " (the segment must run the same ops when recomputed: deterministic given its inputs, the autocast "
      "settings and the default generator)";

  SegmentFn fn_;
  SegmentInputs inputs_;
  AutocastState autocast_;
  RegionCapture region_;  // amp's FP8 region of the forward, if any
  Generator::Range rng_;  // the default generator's (seed, offset) when forward started
  std::vector<TensorMeta> meta_;
  std::vector<uint32_t> versions_;  // per slot: the saved tensor's version when the forward saved it
  std::vector<bool> live_;          // per slot: its SavedTensor neither released nor destroyed
  TensorList slots_;                // the recomputed tensors (this backward's)
  bool recomputed_ = false;
  bool recomputing_ = false;
};

// ---- reentrant ----

class CheckpointNode final : public Node {
 public:
  CheckpointNode(SegmentFn fn, const TensorList& inputs, const TensorList& outputs, AutocastState autocast,
                 RegionCapture region, Generator::Range rng)
      : Node(next_seq_nr()), fn_(std::move(fn)), inputs_(inputs), autocast_(autocast), region_(std::move(region)),
        rng_(rng) {
    for (const Tensor& t : inputs) next_edges_.push_back(t.defined() ? gradient_edge(t) : Edge{});
    for (const Tensor& o : outputs) output_meta_.push_back(TensorMeta::of(o));
  }

  TensorList apply(TensorList grads) override {
    MT_CHECK(!released_, "checkpoint: trying to backward through a checkpointed segment a second time; "
             "pass retain_graph=true to the first backward");
    // The engine turns grad mode on only for create_graph.
    MT_CHECK(!GradMode::is_enabled(), kNoCreateGraph);
    auto sink = std::make_shared<InputGradSink>(inputs_.size());
    TensorList in = inputs_.for_recompute(sink);
    TensorList outs = rerun(fn_, in, autocast_, region_, rng_);
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
      switch (inputs_.kind(i)) {
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
    os << name() << "  (recomputes its segment; saved: " << inputs_.size() << " inputs)";
    return os.str();
  }
  void release_saved() override {
    inputs_.release();
    released_ = true;
  }
  size_t num_outputs() const override { return output_meta_.size(); }

 private:
  SegmentFn fn_;
  SegmentInputs inputs_;
  AutocastState autocast_;
  RegionCapture region_;  // amp's FP8 region of the forward, if any
  Generator::Range rng_;  // the default generator's (seed, offset) when forward started
  std::vector<TensorMeta> output_meta_;
  bool released_ = false;
};

}  // namespace

bool in_checkpoint_recompute() { return tls_recomputing > 0; }

void set_recompute_region(const RecomputeRegion* region) { g_region.store(region, std::memory_order_release); }

TensorList checkpoint(const SegmentFn& fn, const TensorList& inputs, CheckpointOptions options) {
  MT_CHECK(fn, "checkpoint: expected a function");
  if (!GradMode::is_enabled()) return fn(inputs);  // nothing will be differentiated: a plain call
  Generator& gen = default_generator();
  const Generator::Range rng{gen.seed(), gen.offset()};
  const AutocastState autocast = autocast_state();
  RegionCapture region = capture_region();
  if (!options.use_reentrant) {
    // The frame keeps the inputs under the hooks around this call (inside an enclosing
    // checkpoint: placeholders of that one), then becomes the hooks of fn's own ops.
    auto frame = std::make_shared<Frame>(fn, inputs, autocast, std::move(region), rng);
    SavedTensorHooksGuard placeholders(frame);
    return fn(inputs);
  }
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
  auto node = std::make_shared<CheckpointNode>(fn, inputs, outs, autocast, std::move(region), rng);
  for (size_t i = 0; i < outs.size(); ++i) outs[i].set_history(node, static_cast<uint32_t>(i));
  return outs;
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input, CheckpointOptions options) {
  return checkpoint([fn](const TensorList& in) { return TensorList{fn(in[0])}; }, TensorList{input}, options)[0];
}

}  // namespace mixtape::autograd
