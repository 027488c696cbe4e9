// autograd/node.cpp — sequence numbers and gradient edges.
#include "autograd/node.h"

#include "autograd/accumulate_grad.h"

namespace mixtape::autograd {

uint64_t Node::next_seq_nr() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  if (t.grad_fn()) return {t.grad_fn(), t.output_nr()};
  return {AccumulateGrad::for_leaf(t), 0};
}

}  // namespace mixtape::autograd
