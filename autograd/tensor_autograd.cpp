// autograd/tensor_autograd.cpp — the autograd methods of Tensor (backward, hooks, retain_grad).
#include "autograd/accumulate_grad.h"
#include "autograd/engine.h"
#include "autograd/op_calls.h"

namespace mixtape {

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph || create_graph, create_graph);
}

void Tensor::register_hook(TensorHook hook) const {
  MT_CHECK(requires_grad(), "register_hook: cannot register a hook on a tensor that doesn't require gradient (",
           describe(), ")");
  if (is_leaf())
    impl()->autograd_meta().hooks.push_back(std::move(hook));
  else
    grad_fn()->add_pre_hook(output_nr(), std::move(hook));
}

int Tensor::register_post_accumulate_grad_hook(PostAccumulateGradHook hook) const {
  MT_CHECK(requires_grad() && is_leaf(), "register_post_accumulate_grad_hook: only leaf tensors that require grad "
           "have their gradient accumulated (", describe(), is_leaf() ? " does not require grad)" : " was computed by an op)");
  auto& meta = impl()->autograd_meta();
  int id = meta.next_hook_id++;
  meta.post_accumulate_hooks.emplace_back(id, std::move(hook));
  return id;
}

void Tensor::remove_post_accumulate_grad_hook(int id) const {
  if (!impl()->autograd) return;
  auto& hooks = impl()->autograd->post_accumulate_hooks;
  std::erase_if(hooks, [id](const auto& h) { return h.first == id; });
}

void Tensor::retain_grad() const {
  MT_CHECK(requires_grad(), "retain_grad: can't retain_grad on a tensor that has requires_grad=false (", describe(), ")");
  if (is_leaf() || retains_grad()) return;  // leaves keep .grad anyway
  impl()->autograd_meta().retains_grad = true;
  std::weak_ptr<TensorImpl> weak = impl_ptr();
  grad_fn()->add_pre_hook(output_nr(), [weak](const Tensor& g) {
    if (auto impl = weak.lock()) {
      auto& meta = impl->autograd_meta();
      meta.grad = meta.grad.defined() ? autograd::op_calls::add(meta.grad, g).detach() : autograd::op_calls::clone(g).detach();
    }
    return Tensor();
  });
}

bool Tensor::retains_grad() const { return impl()->autograd && impl()->autograd->retains_grad; }

}  // namespace mixtape
