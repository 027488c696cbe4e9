// autograd/backward_context.h — what an op's backward formula sees: its saved inputs and
// outputs, its attributes, the gradients of its outputs, and which inputs need a gradient.
// Formulas are written with ordinary ops, so they run on every device and are themselves
// differentiable (create_graph).
#pragma once
#include <vector>

#include "autograd/node.h"
#include "autograd/saved_tensor.h"
#include "core/dispatcher.h"

namespace mixtape {

struct BackwardContext {
  const OpSchema& op;
  const Attrs& attrs;
  const std::vector<autograd::TensorMeta>& input_meta;   // sizes/dtype/device of every input
  const std::vector<autograd::SavedTensor>& saved_inputs;   // one slot per input
  const std::vector<autograd::SavedTensor>& saved_outputs;  // one slot per output
  const std::vector<bool>& needs_grad;                      // per input
  TensorList grads;                                         // per output; may be undefined
  std::shared_ptr<autograd::Node> node;

  const Tensor input(size_t i) const;       // throws if not saved (see OpSchema::save)
  const Tensor output(size_t i) const;
  const Tensor& grad(size_t i = 0) const { return grads.at(i); }
  bool needs_input_grad(size_t i) const { return i < needs_grad.size() && needs_grad[i]; }
  size_t num_inputs() const { return input_meta.size(); }
  const IntList& input_sizes(size_t i) const { return input_meta.at(i).sizes; }
  DType input_dtype(size_t i) const { return input_meta.at(i).dtype; }
};

}  // namespace mixtape
