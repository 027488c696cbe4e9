// autograd/checkpoint.h — gradient checkpointing (torch.utils.checkpoint): trade compute for
// memory by keeping only a segment's inputs and recomputing its inside during backward.
//
//   Tensor h = autograd::checkpoint([&](const TensorList& in) { return TensorList{block.forward(in[0])}; },
//                                   {x})[0];
//
// Forward runs fn and keeps none of its intermediate tensors, only `inputs` (version-checked, so
// an in-place change before backward is an error). Backward reruns fn on the saved inputs with
// grad mode on, under the autocast settings and from the default generator's RNG position that
// the forward saw (dropout draws the same mask), then backpropagates the incoming gradients
// through the rerun: parameters used inside fn receive their .grad there, and the segment's
// inputs get theirs through this node. So gradients equal the unchecheckpointed ones bit for
// bit. Scaled gradients (GradScaler) pass through unchanged; nothing here knows about scaling.
// Layers with side effects must not repeat them in the rerun: BatchNorm2d checks
// in_checkpoint_recompute() and leaves its running statistics alone then.
// Limits: fn must be deterministic given its inputs, the autocast settings and the default
// generator (other generators are not rewound); create_graph (double backward) through a
// checkpoint is not supported.
#pragma once
#include <functional>

#include "core/tensor.h"

namespace mixtape::autograd {

using SegmentFn = std::function<TensorList(const TensorList&)>;

TensorList checkpoint(const SegmentFn& fn, const TensorList& inputs);
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input);

// True on this thread while a checkpointed segment is being recomputed in backward. Layers with
// side effects consult it: BatchNorm2d does not update its running statistics a second time.
bool in_checkpoint_recompute();

}  // namespace mixtape::autograd
