// autograd/checkpoint.h — gradient checkpointing (torch.utils.checkpoint): trade compute for
// memory by keeping only a segment's inputs and recomputing its inside during backward.
//
//   Tensor h = autograd::checkpoint([&](const TensorList& in) { return TensorList{block.forward(in[0])}; },
//                                   {x})[0];
//
// Forward runs fn once with its ops recorded but nothing saved (DiscardSavedTensorsGuard,
// autograd/saved_tensor.h): requires_grad comes out as in the plain graph, so a parameter fn
// captures counts as much as an input, and no activation inside the segment outlives the op
// that uses it — the peak inside the segment is its working set, not its graph. The outputs are
// detached from that graph (which is then freed) and attached to one CheckpointBackward node,
// which keeps only `inputs` (version-checked, so an in-place change before backward is an
// error). This is PyTorch's non-reentrant variant in effect (record, keep nothing); its reentrant
// one runs forward under no_grad and can therefore only count the inputs.
//
// Backward reruns fn on the saved inputs with grad mode on, from the default generator's RNG
// position the forward saw (dropout draws the same mask), inside an autocast region opened with
// the forward's settings for every device type (enabled, dtype, cache_enabled), as
// torch.utils.checkpoint re-enters torch.autocast. A real region matters: its weight-cast cache
// makes a weight used twice in the segment one cast whose two gradients meet in 16 bits, as in
// the plain graph (cast per use, they would be summed in FP32 instead). The region has a cache
// of its own, also when backward() runs inside an open region: the recompute neither reuses the
// forward's cached casts nor leaves its own behind. The recomputed inputs keep what that cache
// keys on: an input that was a leaf requiring grad (a parameter passed in) is again such a leaf,
// an activation is again a non-leaf, so neither is cached where the plain graph did not cache it.
// Then the incoming gradients are backpropagated through the rerun: parameters used inside fn
// receive their .grad there, and the segment's inputs get theirs through this node. Scaled
// gradients (GradScaler) pass through unchanged; nothing here knows about scaling.
//
// So the gradients are the plain graph's bit for bit (FP32, autocast FP16/BF16, a 16-bit model),
// provided a segment's weights and inputs are used only inside it. A weight also used outside the
// segment (in another segment, or before it in the same region) is cast once per segment and the
// parts are summed in its own dtype; an input also used outside sums its in-segment part first:
// the same values up to rounding, as in PyTorch.
// Layers with side effects must not repeat them in the rerun: BatchNorm2d checks
// in_checkpoint_recompute() and leaves its running statistics alone then.
// Limits: fn must be deterministic given its inputs, the autocast settings and the default
// generator (other generators are not rewound); a tensor computed inside fn and used outside it
// other than as an output has a graph that saved nothing (backward through it is an error that
// says so); create_graph (double backward) through a checkpoint is an error.
#pragma once
#include <functional>

#include "core/autocast_state.h"
#include "core/tensor.h"

namespace mixtape::autograd {

using SegmentFn = std::function<TensorList(const TensorList&)>;

TensorList checkpoint(const SegmentFn& fn, const TensorList& inputs);
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input);

// True on this thread while a checkpointed segment is being recomputed in backward. Layers with
// side effects consult it: BatchNorm2d does not update its running statistics a second time.
bool in_checkpoint_recompute();

// How a recompute opens its autocast region: runs `body` inside a region with the settings
// `forward`. Autocast regions and their cache live in amp/, above this layer, so amp installs
// this when its library loads (amp/checkpoint_region.cpp). Until then (a program without amp
// cannot have opened a region) the recompute only restores the settings.
using RecomputeRegion = void (*)(const AutocastState& forward, const std::function<void()>& body);
void set_recompute_region(RecomputeRegion region);

}  // namespace mixtape::autograd
