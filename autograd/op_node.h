// autograd/op_node.h — the tape node the Autograd layer records for every differentiable op
// call: the op's schema, its attributes, the tensors its backward needs, and edges to the
// producers of its inputs.
#pragma once
#include "autograd/backward_context.h"

namespace mixtape::autograd {

class OpNode final : public Node {
 public:
  // Builds the node for `op` called with `call` that produced `outputs` (before history is set).
  OpNode(const OpSchema& op, const OpCall& call, const TensorList& outputs);

  TensorList apply(TensorList grads) override;
  std::string name() const override;  // "MulBackward"
  std::string describe() const override;
  void release_saved() override;
  size_t num_outputs() const override { return output_meta_.size(); }

  const OpSchema& op() const { return op_; }
  const Attrs& attrs() const { return attrs_; }
  const std::vector<SavedTensor>& saved_inputs() const { return saved_inputs_; }
  const std::vector<SavedTensor>& saved_outputs() const { return saved_outputs_; }
  const std::vector<TensorMeta>& input_meta() const { return input_meta_; }
  const std::vector<TensorMeta>& output_meta() const { return output_meta_; }

 private:
  const OpSchema& op_;
  Attrs attrs_;
  std::vector<TensorMeta> input_meta_, output_meta_;
  std::vector<SavedTensor> saved_inputs_, saved_outputs_;
  std::vector<bool> needs_grad_;
  bool released_ = false;
  AutocastState forward_autocast_;  // used only when op_.backward_keeps_autocast
};

// "max_pool2d" -> "MaxPool2dBackward"
std::string backward_name(const std::string& op);

}  // namespace mixtape::autograd
