// autograd/engine.cpp — the iterative backward pass.
// 1. Walk the graph from the roots (explicit stack, no recursion: deep nets must not overflow
//    the C++ stack) and count, for every node, how many edges lead into it.
// 2. Keep a ready queue ordered by sequence number, highest first; a node becomes ready when
//    every node that feeds it a gradient has run. Gradients arriving at the same input slot
//    are summed in that slot's buffer.
// The order is fully deterministic: no hash-map iteration decides anything.
#include "autograd/engine.h"

#include <queue>
#include <unordered_map>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/op_calls.h"
#include "core/autocast_state.h"
#include "core/numerics_check.h"

namespace mixtape::autograd {
namespace {
struct ByPriority {
  bool operator()(const Node* a, const Node* b) const { return a->seq_nr() < b->seq_nr(); }
};

thread_local int backward_depth = 0;
thread_local std::vector<std::function<void()>> end_callbacks;

void run_graph(const TensorList& roots, const TensorList& grad_roots, bool retain_graph, bool create_graph);
}  // namespace

void queue_callback(std::function<void()> fn) {
  MT_CHECK(backward_depth > 0, "queue_callback: no backward is running on this thread");
  end_callbacks.push_back(std::move(fn));
}

bool in_backward() { return backward_depth > 0; }

void backward(const TensorList& roots, const TensorList& grad_roots, bool retain_graph, bool create_graph) {
  // The outermost backward runs the queued callbacks; if it (or a callback) throws, the pending
  // callbacks are dropped so the next backward starts clean.
  ++backward_depth;
  try {
    run_graph(roots, grad_roots, retain_graph, create_graph);
  } catch (...) {
    if (--backward_depth == 0) end_callbacks.clear();
    throw;
  }
  if (backward_depth > 1) {
    --backward_depth;
    return;
  }
  // Still "in backward" while they run, so a callback may queue another (by index: it then runs
  // in this same loop).
  try {
    for (size_t i = 0; i < end_callbacks.size(); ++i) {
      auto fn = std::move(end_callbacks[i]);
      fn();
    }
  } catch (...) {
    end_callbacks.clear();
    --backward_depth;
    throw;
  }
  end_callbacks.clear();
  --backward_depth;
}

namespace {
// The NaN locator's name for the node whose backward is running: "#12 ExpBackward  exp(f16[2]) -> ...".
std::string describe_node(const void* p) {
  const Node* n = static_cast<const Node*>(p);
  std::string s = "#";  // appended piece by piece: GCC 12's -Wrestrict misfires on "#" + string
  s += std::to_string(n->seq_nr());
  s += ' ';
  s += n->describe();
  return s;
}

void run_graph(const TensorList& roots, const TensorList& grad_roots, bool retain_graph, bool create_graph) {
  numerics::BackwardScope in_backward(nullptr, nullptr);  // the engine's own sums of gradients
  retain_graph = retain_graph || create_graph;  // as PyTorch: a graph being differentiated again is kept
  // Backward ops run in the dtypes their forward chose, even when backward() is called inside an
  // autocast region (torch.amp recommends against it; here it is simply harmless). Checkpointed
  // segments restore their forward's autocast settings themselves.
  AutocastStateGuard autocast_off{AutocastState{}};
  MT_CHECK(grad_roots.empty() || grad_roots.size() == roots.size(), "backward: got ", roots.size(), " tensors but ",
           grad_roots.size(), " gradients");
  std::vector<std::shared_ptr<Node>> keep_alive;
  std::vector<std::pair<Edge, Tensor>> root_inputs;

  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    MT_CHECK(r.defined(), "backward: root ", i, " is undefined");
    MT_CHECK(r.requires_grad(), "backward: element ", i, " of tensors does not require grad and does not have a "
             "grad_fn (", r.describe(), "); did you forget requires_grad_() on the inputs, or run under NoGradGuard?");
    Tensor g = i < grad_roots.size() ? grad_roots[i] : Tensor();
    if (!g.defined()) {
      MT_CHECK(r.numel() == 1, "backward: grad can be implicitly created only for scalar outputs, got ",
               r.describe(), "; pass a gradient of the same shape");
      g = op_calls::ones_like(r.detach());
    } else {
      MT_CHECK(g.sizes() == r.sizes(), "backward: gradient shape ", shape_str(g.sizes()), " does not match output shape ",
               shape_str(r.sizes()));
      MT_CHECK(g.device() == r.device(), "backward: gradient on ", g.device(), ", output on ", r.device());
      if (g.dtype() != r.dtype()) g = op_calls::cast(g, r.dtype());
    }
    root_inputs.emplace_back(gradient_edge(r), g);
  }

  // One entry per reachable node: how many edges lead into it (by an explicit DFS) and the
  // gradients delivered to it so far. A single map keeps a small graph's backward to one
  // lookup per edge.
  struct Task {
    int deps = 0;
    TensorList buffer;  // one slot per forward output of the node
  };
  std::unordered_map<Node*, Task> tasks;
  tasks.reserve(64);
  std::vector<Node*> stack;
  for (auto& [edge, g] : root_inputs) {
    keep_alive.push_back(edge.node);
    if (tasks.try_emplace(edge.node.get()).second) stack.push_back(edge.node.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges()) {
      if (!e.valid()) continue;
      auto [it, fresh] = tasks.try_emplace(e.node.get());
      it->second.deps += 1;
      if (fresh) stack.push_back(e.node.get());
    }
  }

  auto deliver = [&](const Edge& e, const Tensor& g) {
    TensorList& buf = tasks[e.node.get()].buffer;
    if (buf.empty()) buf.resize(e.node->num_outputs());
    MT_CHECK(e.input_nr < buf.size(), "backward: internal error: edge to input ", e.input_nr, " of ", e.node->name());
    Tensor& slot = buf[e.input_nr];
    slot = slot.defined() ? op_calls::add(slot, g) : g;
  };

  std::priority_queue<Node*, std::vector<Node*>, ByPriority> ready;
  for (auto& [edge, g] : root_inputs) deliver(edge, g);
  for (auto& [edge, g] : root_inputs) {
    Task& t = tasks[edge.node.get()];
    if (t.deps == 0) {
      t.deps = -1;  // queued
      ready.push(edge.node.get());
    }
  }

  AutoGradMode grad_mode(create_graph);
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    TensorList grads = std::move(tasks[node].buffer);
    grads.resize(node->num_outputs());
    for (auto& [nr, hooks] : node->pre_hooks()) {
      if (nr >= grads.size() || !grads[nr].defined()) continue;
      for (auto& hook : hooks) {
        Tensor r = hook(grads[nr]);
        if (r.defined()) grads[nr] = r;
      }
    }
    bool any = false;
    for (auto& g : grads) any = any || g.defined();
    TensorList out;
    if (any) {
      numerics::BackwardScope in_node(node, describe_node);
      out = node->apply(std::move(grads));
    }
    if (!retain_graph) node->release_saved();

    const auto& edges = node->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.valid()) continue;
      if (i < out.size() && out[i].defined()) deliver(e, out[i]);
      if (--tasks[e.node.get()].deps == 0) ready.push(e.node.get());
    }
  }
}

}  // namespace

}  // namespace mixtape::autograd
