// autograd/checkpoint.cpp — see autograd/checkpoint.h. The tape gets one CheckpointNode per
// segment; its apply() is a small forward + backward of its own.
#include "autograd/checkpoint.h"

#include <sstream>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/saved_tensor.h"
#include "core/autocast_state.h"
#include "core/error.h"
#include "core/rng.h"

namespace mixtape::autograd {
namespace {

thread_local int tls_recomputing = 0;
struct RecomputeScope {
  RecomputeScope() { ++tls_recomputing; }
  ~RecomputeScope() { --tls_recomputing; }
};

class CheckpointNode final : public Node {
 public:
  CheckpointNode(SegmentFn fn, const TensorList& inputs, const TensorList& outputs, AutocastState autocast,
                 Generator::Range rng)
      : Node(next_seq_nr()), fn_(std::move(fn)), autocast_(autocast), rng_(rng) {
    for (const Tensor& t : inputs) {
      saved_.emplace_back(t.defined() ? SavedTensor(t, false) : SavedTensor());
      input_requires_grad_.push_back(t.defined() && t.requires_grad());
      next_edges_.push_back(t.defined() ? gradient_edge(t) : Edge{});
    }
    for (const Tensor& o : outputs) output_meta_.push_back(TensorMeta::of(o));
  }

  TensorList apply(TensorList grads) override {
    MT_CHECK(!released_, "checkpoint: trying to backward through a checkpointed segment a second time; "
             "pass retain_graph=true to the first backward");
    TensorList in;
    for (size_t i = 0; i < saved_.size(); ++i) {
      if (!saved_[i].defined()) {
        in.emplace_back();
        continue;
      }
      Tensor t = saved_[i].unpack(shared_from_this(), "checkpoint input " + std::to_string(i)).detach();
      if (input_requires_grad_[i]) t.requires_grad_(true);
      in.push_back(t);
    }
    TensorList outs;
    {
      // Recompute exactly as forward did: same autocast settings, same random draws, recording on.
      AutocastStateGuard as_in_forward(autocast_);
      Generator& gen = default_generator();
      const uint64_t seed_now = gen.seed(), offset_now = gen.offset();
      gen.set_state(rng_.seed, rng_.offset);
      EnableGradGuard grad_on;
      RecomputeScope recomputing;
      try {
        outs = fn_(in);
      } catch (...) {
        gen.set_state(seed_now, offset_now);
        throw;
      }
      gen.set_state(seed_now, offset_now);
    }
    MT_CHECK(outs.size() == output_meta_.size(), "checkpoint: the recomputed segment returned ", outs.size(),
             " tensors, the forward returned ", output_meta_.size(), " (the function must be deterministic)");
    TensorList roots, root_grads;
    for (size_t i = 0; i < outs.size(); ++i) {
      MT_CHECK(outs[i].sizes() == output_meta_[i].sizes && outs[i].dtype() == output_meta_[i].dtype,
               "checkpoint: recomputed output ", i, " is ", outs[i].describe(), ", the forward gave ",
               dtype_name(output_meta_[i].dtype), shape_str(output_meta_[i].sizes),
               " (the function must be deterministic)");
      if (i < grads.size() && grads[i].defined() && outs[i].requires_grad()) {
        roots.push_back(outs[i]);
        root_grads.push_back(grads[i]);
      }
    }
    if (!roots.empty()) backward(roots, root_grads);
    TensorList in_grads;
    for (size_t i = 0; i < in.size(); ++i) in_grads.push_back(input_requires_grad_[i] ? in[i].grad() : Tensor());
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
  std::vector<bool> input_requires_grad_;
  std::vector<TensorMeta> output_meta_;
  bool released_ = false;
};

}  // namespace

bool in_checkpoint_recompute() { return tls_recomputing > 0; }

TensorList checkpoint(const SegmentFn& fn, const TensorList& inputs) {
  MT_CHECK(fn, "checkpoint: expected a function");
  if (!GradMode::is_enabled()) return fn(inputs);  // nothing will be differentiated: a plain call
  Generator& gen = default_generator();
  const Generator::Range rng{gen.seed(), gen.offset()};
  const AutocastState autocast = autocast_state();
  TensorList outs;
  bool needs_grad = false;
  {
    // Run with recording on only to learn whether anything inside requires grad (a parameter
    // captured by fn may, even when no input does); the recorded graph and the activations it
    // holds are dropped when this block ends. Only the outputs' storage is kept.
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
