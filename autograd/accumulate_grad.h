// autograd/accumulate_grad.h — the sink node of a leaf: adds the incoming gradient into
// leaf.grad (accumulating across backward calls — that is how gradient accumulation works).
#pragma once
#include <limits>

#include "autograd/node.h"

namespace mixtape::autograd {

class AccumulateGrad final : public Node {
 public:
  // The leaf's accumulator, created once and shared while any graph refers to it.
  static std::shared_ptr<Node> for_leaf(const Tensor& leaf);

  explicit AccumulateGrad(Tensor leaf)
      : Node(std::numeric_limits<uint64_t>::max()), leaf_(std::move(leaf)) {}  // runs as soon as ready
  TensorList apply(TensorList grads) override;
  std::string name() const override { return "AccumulateGrad"; }
  std::string describe() const override;
  const Tensor& leaf() const { return leaf_; }

 private:
  Tensor leaf_;
};

}  // namespace mixtape::autograd
