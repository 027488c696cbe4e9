// autograd/op_node.cpp — running an op's backward formula and checking what it returns.
#include "autograd/op_node.h"

#include <sstream>

#include "autograd/op_calls.h"

namespace mixtape {

const Tensor BackwardContext::input(size_t i) const {
  if (i < input_meta.size() && !input_meta[i].defined) return {};  // absent optional input
  MT_CHECK(i < saved_inputs.size() && (saved_inputs[i].defined() || saved_inputs[i].released()), op.name,
           " backward: input ", i, " was not saved for backward (add it to the op's save() list)");
  return saved_inputs[i].unpack(nullptr, "input " + std::to_string(i) + " of " + op.name);
}

const Tensor BackwardContext::output(size_t i) const {
  MT_CHECK(i < saved_outputs.size() && (saved_outputs[i].defined() || saved_outputs[i].released()), op.name,
           " backward: output ", i, " was not saved for backward (add it to the op's save() list)");
  return saved_outputs[i].unpack(node, "output " + std::to_string(i) + " of " + op.name);
}

}  // namespace mixtape

namespace mixtape::autograd {

std::string backward_name(const std::string& op) {
  std::string out;
  bool up = true;
  for (char c : op) {
    if (c == '_') {
      up = true;
      continue;
    }
    out += up ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    up = false;
  }
  return out + "Backward";
}

OpNode::OpNode(const OpSchema& op, const OpCall& call, const TensorList& outputs)
    : Node(next_seq_nr()), op_(op), attrs_(call.attrs), forward_autocast_(autocast_state()) {
  size_t n = call.inputs.size();
  input_meta_.reserve(n);
  saved_inputs_.resize(n);
  needs_grad_.resize(n);
  next_edges_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const Tensor& t = call.inputs[i];
    input_meta_.push_back(t.defined() ? TensorMeta::of(t) : TensorMeta{});
    // Inputs past the 64 bits of the mask (cat of many tensors) follow the default: save all.
    bool save = i < 64 ? ((op.saved_inputs >> i) & 1u) != 0 : op.saved_inputs == ~0ull;
    if (t.defined() && save) saved_inputs_[i] = SavedTensor(t, false);
    next_edges_.push_back(gradient_edge(t));
    needs_grad_[i] = next_edges_.back().valid();
  }
  saved_outputs_.resize(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    output_meta_.push_back(TensorMeta::of(outputs[i]));
    if (i < 64 && ((op.saved_outputs >> i) & 1u)) saved_outputs_[i] = SavedTensor(outputs[i], true, static_cast<uint32_t>(i));
  }
}

TensorList OpNode::apply(TensorList grads) {
  BackwardContext ctx{op_, attrs_, input_meta_, saved_inputs_, saved_outputs_, needs_grad_, std::move(grads),
                      shared_from_this()};
  // Outputs that received no gradient contribute zeros (multi-output ops), unless the backward
  // never reads them (OpSchema::backward_ignores_output_grads): those stay undefined.
  for (size_t i = 0; i < ctx.grads.size(); ++i) {
    if (ctx.grads[i].defined() || (i < 64 && ((op_.unread_output_grads >> i) & 1u))) continue;
    Tensor z = Tensor::empty(output_meta_[i].sizes, TensorOptions(output_meta_[i].dtype).with_device(output_meta_[i].device));
    ctx.grads[i] = op_calls::call("fill_", {z}, {{"value", 0.0}})[0];
  }
  TensorList in_grads;
  if (op_.backward_keeps_autocast) {
    AutocastStateGuard as_in_forward(forward_autocast_);
    in_grads = op_.backward(ctx);
  } else {
    in_grads = op_.backward(ctx);
  }
  MT_CHECK(in_grads.size() == input_meta_.size(), op_.name, " backward: returned ", in_grads.size(),
           " gradients for ", input_meta_.size(), " inputs");
  for (size_t i = 0; i < in_grads.size(); ++i) {
    Tensor& g = in_grads[i];
    if (!needs_grad_[i] || !g.defined()) {
      g = Tensor();
      continue;
    }
    const TensorMeta& m = input_meta_[i];
    MT_CHECK(g.sizes() == m.sizes, op_.name, " backward: gradient for input ", i, " has shape ", shape_str(g.sizes()),
             ", expected ", shape_str(m.sizes), " (a backward formula must reduce broadcast dimensions)");
    // Gradients flow back in the dtype of the forward input (an f32 weight used by an f16 op
    // gets an f32 grad: docs/amp-behaviours.md behaviour 12).
    if (g.dtype() != m.dtype) g = op_calls::cast(g, m.dtype);
  }
  return in_grads;
}

std::string OpNode::name() const { return backward_name(op_.name); }

std::string OpNode::describe() const {
  std::ostringstream os;
  os << name() << "  " << op_.name << '(';
  for (size_t i = 0; i < input_meta_.size(); ++i) {
    const auto& m = input_meta_[i];
    os << (i ? ", " : "");
    if (m.defined)
      os << dtype_short(m.dtype) << shape_str(m.sizes);
    else
      os << "none";
  }
  if (!attrs_.items().empty()) os << "; " << attrs_;
  os << ") -> ";
  for (size_t i = 0; i < output_meta_.size(); ++i)
    os << (i ? ", " : "") << dtype_short(output_meta_[i].dtype) << shape_str(output_meta_[i].sizes);
  bool any = false;
  auto saved = [&](const std::vector<SavedTensor>& v, const char* kind) {
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].defined()) continue;
      os << (any ? ", " : "  saved: ") << kind << i << ' ' << v[i].describe();
      any = true;
    }
  };
  saved(saved_inputs_, "in");
  saved(saved_outputs_, "out");
  if (released_) os << "  (saved tensors released)";
  return os.str();
}

void OpNode::release_saved() {
  for (auto& s : saved_inputs_)
    if (s.defined()) s.release();
  for (auto& s : saved_outputs_)
    if (s.defined()) s.release();
  released_ = true;
}

}  // namespace mixtape::autograd
