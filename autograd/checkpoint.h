// autograd/checkpoint.h — gradient checkpointing (torch.utils.checkpoint): trade compute for
// memory by keeping only a segment's inputs and recomputing its inside during backward.
//
//   Tensor h = autograd::checkpoint([&](const TensorList& in) { return TensorList{block.forward(in[0])}; },
//                                   {x})[0];
//
// Two modes, as PyTorch's use_reentrant (the default is the one PyTorch recommends):
//
// Non-reentrant (default). Forward runs fn once, recorded into the ordinary graph, under
// saved-tensor hooks (autograd/saved_tensor.h) that keep a placeholder for every tensor an op
// saves: the graph is the plain graph's, nodes and edges alike, but it holds no activation of the
// segment, and each one is freed once the op that uses it has run (the peak inside the segment
// is its working set). The segment's inputs are kept (version-checked: an in-place change before
// backward is an error). The first time a backward unpacks a placeholder, the segment is rerun
// on those inputs with grad mode on, from the default generator's RNG position of its forward
// (dropout draws the same mask), inside an autocast region with the forward's settings for every
// device type (enabled, dtype, cache_enabled; as torch.utils.checkpoint re-enters torch.autocast),
// the forward's FP8 region with its scales (recording no amax) and a weight-cast cache of its
// own (amp/checkpoint_region.cpp). The k-th tensor the rerun
// saves fills the k-th placeholder; the rerun's own graph is dropped. Gradients then flow through
// the forward's graph: a weight used in two segments reaches its AccumulateGrad through the
// forward's one cached cast, once per backward, so every gradient equals the plain graph's bit
// for bit (FP32, autocast FP16/BF16, a 16-bit model), a tensor computed inside a segment may be
// used outside it, and DDP's per-parameter hook fires once as in the plain graph. A recomputed
// cast of a weight has the forward's bits (RNE is deterministic); only its value is used, never
// its graph. A rerun that saves a different number of tensors, or one of another shape, dtype or
// device, is an error naming the tensor. Each backward recomputes once (PyTorch: once per graph
// task); recomputed tensors are freed as the nodes that use them finish, or with retain_graph
// when that backward ends (a later backward recomputes; PyTorch frees each at its unpack). A
// saved tensor changed in place is the plain graph's error, also one written after saving inside
// the segment (checked on the recompute's copy against the forward's version).
//
// The graph owns fn until backward (the recompute needs it), and so what fn captures. If fn
// captures an object that keeps a tensor the segment computes (a module storing its output), that
// is a loop: fn -> object -> tensor -> graph -> fn. A backward through the segment, or resetting
// that tensor, breaks it; a graph dropped without either is never freed. Capture modules that
// keep no output (by shared_ptr is fine), or by reference one that outlives the backward.
//
// Reentrant (CheckpointOptions{.use_reentrant = true}). Forward records fn's ops but saves
// nothing and detaches the outputs, which get one CheckpointBackward node keeping the inputs.
// Its backward reruns fn (same RNG position, same autocast region) and runs a backward of its
// own through the rerun: parameters get their .grad there, inputs through the node. Exact as
// long as a segment's weights and inputs are used only inside it; a weight shared with another
// segment is cast once per segment and its parts summed in its own dtype (FP16: one rounding
// away from the plain graph), its AccumulateGrad runs once per segment (DDP refuses that once
// the bucket has left), and a tensor computed inside the segment cannot be differentiated
// outside it (an error that says so).
//
// Both: layers with side effects must not repeat them in the rerun: BatchNorm2d checks
// in_checkpoint_recompute() and leaves its running statistics alone then. fn must be
// deterministic given its inputs, the autocast settings and the default generator (other
// generators are not rewound). create_graph (double backward) through a checkpoint is an error.
// Scaled gradients (GradScaler) pass through unchanged. A checkpoint inside a checkpoint works
// (the inner segment's inputs are the outer one's placeholders, recomputed first).
#pragma once
#include <functional>
#include <memory>

#include "core/autocast_state.h"
#include "core/tensor.h"

namespace mixtape::autograd {

using SegmentFn = std::function<TensorList(const TensorList&)>;

struct CheckpointOptions {
  bool use_reentrant = false;  // see above; false is PyTorch's recommendation and the exact one
};

TensorList checkpoint(const SegmentFn& fn, const TensorList& inputs, CheckpointOptions options = {});
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input, CheckpointOptions options = {});

// True on this thread while a checkpointed segment is being recomputed in backward. Layers with
// side effects consult it: BatchNorm2d does not update its running statistics a second time.
bool in_checkpoint_recompute();

// How a recompute opens its autocast region. Autocast regions, their cache and the FP8 region
// (amp::Fp8Autocast) live in amp/, above this layer, so amp installs these when its library loads
// (amp/checkpoint_region.cpp). `capture` runs when a segment's forward starts and keeps what the
// AutocastState does not hold (the FP8 region with the scales it casts with), opaque here; `run`
// runs `body` inside a region with the settings `forward` and what was captured. Until amp
// installs them (a program without amp cannot have opened a region) the recompute only restores
// the settings.
using RegionCapture = std::shared_ptr<const void>;
struct RecomputeRegion {
  RegionCapture (*capture)() = nullptr;
  void (*run)(const AutocastState& forward, const RegionCapture& captured, const std::function<void()>& body) = nullptr;
};
void set_recompute_region(const RecomputeRegion* region);  // a static object; nullptr uninstalls

}  // namespace mixtape::autograd
