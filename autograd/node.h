// autograd/node.h — a node of the tape: one recorded op's backward, with edges to the nodes
// that produced its inputs. The sequence number orders the tape: the engine runs ready nodes
// highest number first, i.e. replays the forward pass in reverse.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace mixtape::autograd {

class Node;

// Where a gradient goes: input slot `input_nr` of `node` (null node: nowhere).
struct Edge {
  std::shared_ptr<Node> node;
  uint32_t input_nr = 0;
  bool valid() const { return node != nullptr; }
};

// Metadata of a forward input, kept so gradients can be checked and cast back to its dtype.
struct TensorMeta {
  IntList sizes;
  DType dtype = DType::Float32;
  Device device;
  bool defined = false;  // false: an absent optional input (no bias)
  static TensorMeta of(const Tensor& t) { return {t.sizes(), t.dtype(), t.device(), true}; }
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  explicit Node(uint64_t seq_nr) : seq_nr_(seq_nr) {}
  virtual ~Node() = default;

  // grads[i] is the gradient w.r.t. forward output i (possibly undefined); returns one
  // gradient per next edge (undefined where none flows).
  virtual TensorList apply(TensorList grads) = 0;
  virtual std::string name() const = 0;
  // Frees saved tensors after a backward without retain_graph.
  virtual void release_saved() {}
  // One line for print_tape: op, inputs, outputs, what is saved.
  virtual std::string describe() const { return name(); }
  virtual size_t num_outputs() const { return 1; }  // forward outputs = backward inputs

  uint64_t seq_nr() const { return seq_nr_; }
  const std::vector<Edge>& next_edges() const { return next_edges_; }
  std::vector<Edge>& mutable_next_edges() { return next_edges_; }

  // Tensor hooks of non-leaf outputs, keyed by output number; run before apply.
  void add_pre_hook(uint32_t output_nr, TensorHook hook) { pre_hooks_[output_nr].push_back(std::move(hook)); }
  const std::map<uint32_t, std::vector<TensorHook>>& pre_hooks() const { return pre_hooks_; }

  static uint64_t next_seq_nr();

 protected:
  uint64_t seq_nr_;
  std::vector<Edge> next_edges_;
  std::map<uint32_t, std::vector<TensorHook>> pre_hooks_;
};

// The edge a gradient for `t` should follow: its grad_fn, or its leaf accumulator.
Edge gradient_edge(const Tensor& t);

}  // namespace mixtape::autograd
