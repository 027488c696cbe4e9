// autograd/accumulate_grad.cpp — writing .grad without aliasing tensors the user still holds.
#include "autograd/accumulate_grad.h"

#include <sstream>

#include "autograd/grad_mode.h"
#include "autograd/op_calls.h"

namespace mixtape::autograd {

std::shared_ptr<Node> AccumulateGrad::for_leaf(const Tensor& leaf) {
  auto& meta = leaf.impl()->autograd_meta();
  if (auto existing = meta.grad_accumulator.lock()) return existing;
  // The node holds the leaf strongly; the leaf holds the node weakly (no cycle).
  auto node = std::make_shared<AccumulateGrad>(leaf);
  meta.grad_accumulator = node;
  return node;
}

TensorList AccumulateGrad::apply(TensorList grads) {
  Tensor g = grads.at(0);
  if (!g.defined()) return {};
  auto& meta = leaf_.impl()->autograd_meta();
  for (auto& hook : meta.hooks) {
    Tensor r = hook(g);
    if (r.defined()) g = r;
  }
  // grad_dtype (core/tensor.h): a 16-bit parameter with an FP32 master accumulates in FP32, so
  // micro-batch gradients too small to change a 16-bit sum still add up (the cast is an op, so a
  // create_graph gradient keeps its history).
  if (meta.grad_dtype && g.dtype() != *meta.grad_dtype) g = op_calls::cast(g, *meta.grad_dtype);
  Tensor old = meta.grad;
  if (!old.defined()) {
    // Keep the incoming buffer only if nobody else can see it; .grad is later changed in place
    // (unscale_, clipping), which must never write through to a user's tensor.
    bool exclusive = g.storage().use_count() == 1 && g.is_contiguous() && g.storage_offset() == 0;
    Tensor stored = exclusive ? g : op_calls::clone(g);
    meta.grad = GradMode::is_enabled() ? stored : stored.detach();
  } else {
    Tensor sum = op_calls::add(old, g);  // out of place: a create_graph grad keeps its history
    meta.grad = GradMode::is_enabled() ? sum : sum.detach();
  }
  // Copied: a hook may remove itself (or others) while running.
  auto post = meta.post_accumulate_hooks;
  for (auto& [id, hook] : post) hook(leaf_);
  return {};
}

std::string AccumulateGrad::describe() const {
  std::ostringstream os;
  os << "AccumulateGrad(" << (leaf_.name().empty() ? "leaf" : leaf_.name()) << ' ' << leaf_.describe() << ')';
  return os.str();
}

}  // namespace mixtape::autograd
