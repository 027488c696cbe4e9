// autograd/autograd_layer.cpp — the Autograd dispatch layer: run the op below autograd, then
// record an OpNode on the tape if any input requires grad. Installed into the dispatcher when
// this library loads.
#include "autograd/grad_mode.h"
#include "autograd/op_node.h"
#include "core/dispatcher.h"

namespace mixtape::autograd {
namespace {

TensorList autograd_layer(const OpSchema& op, OpCall& call) {
  bool any_requires_grad = false;
  for (const Tensor& t : call.inputs) any_requires_grad = any_requires_grad || (t.defined() && t.requires_grad());
  bool record = any_requires_grad && GradMode::is_enabled();

  if (op.inplace && record) {
    const Tensor& self = call.inputs[0];
    MT_CHECK(!(self.is_leaf() && self.requires_grad()), op.name, ": a leaf tensor that requires grad (",
             self.describe(), ") is being used in an in-place operation; do it under NoGradGuard (as optimizers do)");
    MT_ERROR(op.name, ": in-place ops on tensors that are part of an autograd graph are not supported (",
             self.describe(), "); use the out-of-place op");
  }
  if (!record || !op.differentiable) {
    ExcludeLayerGuard below(DispatchLayer::Autograd);  // ops a kernel calls are not recorded either
    return dispatch_backend(op, call);
  }
  MT_CHECK(op.backward != nullptr, op.name, ": the derivative is not implemented, but an input requires grad");

  TensorList outputs;
  {
    ExcludeLayerGuard below(DispatchLayer::Autograd);
    outputs = dispatch_backend(op, call);
  }
  auto node = std::make_shared<OpNode>(op, call, outputs);
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor& out = outputs[i];
    if (!out.defined() || !is_floating(out.dtype())) continue;
    for (const Tensor& in : call.inputs)
      MT_CHECK(!in.defined() || !out.is_same(in), op.name, ": kernel returned its input as output ", i,
               " (ops must return new tensor handles)");
    out.set_history(node, static_cast<uint32_t>(i));
  }
  return outputs;
}

const bool installed = [] {
  set_layer_handler(DispatchLayer::Autograd, autograd_layer);
  return true;
}();

}  // namespace
}  // namespace mixtape::autograd
