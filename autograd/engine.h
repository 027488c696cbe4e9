// autograd/engine.h — replays the tape backwards from some roots.
#pragma once
#include <functional>

#include "core/tensor.h"

namespace mixtape::autograd {

// Computes gradients of `roots` (weighted by `grad_roots`; an undefined entry means ones, only
// allowed for one-element roots) and accumulates them into the .grad of the leaves reached.
// retain_graph=false frees saved tensors as nodes finish; create_graph=true records the
// backward ops themselves so the gradients can be differentiated again.
void backward(const TensorList& roots, const TensorList& grad_roots = {}, bool retain_graph = false,
              bool create_graph = false);

// Runs `fn` once the outermost backward() running on this thread has processed every node
// (PyTorch's Variable._execution_engine.queue_callback): a nested backward (a reentrant
// checkpointed segment's own) does not run it. Callbacks run in the order queued; one may queue another.
// Called outside a backward it throws. If the backward throws, pending callbacks are dropped.
void queue_callback(std::function<void()> fn);
// True while a backward() is running on this thread.
bool in_backward();

}  // namespace mixtape::autograd
