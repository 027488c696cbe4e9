// autograd/engine.h — replays the tape backwards from some roots.
#pragma once
#include "core/tensor.h"

namespace mixtape::autograd {

// Computes gradients of `roots` (weighted by `grad_roots`; an undefined entry means ones, only
// allowed for one-element roots) and accumulates them into the .grad of the leaves reached.
// retain_graph=false frees saved tensors as nodes finish; create_graph=true records the
// backward ops themselves so the gradients can be differentiated again.
void backward(const TensorList& roots, const TensorList& grad_roots = {}, bool retain_graph = false,
              bool create_graph = false);

}  // namespace mixtape::autograd
