// autograd/saved_tensor.h — a tensor kept for backward, with the version it had when saved.
// Unpacking checks the version: an in-place write after saving would make the gradient
// silently wrong, so it is an error instead. Outputs are saved without their grad_fn (that
// would be a reference cycle output -> node -> output) and get it back on unpack.
// A SavedTensor made under DiscardSavedTensorsGuard keeps nothing, and unpacking it is an error
// that says why.
#pragma once
#include "autograd/node.h"

namespace mixtape::autograd {

class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, bool is_output, uint32_t output_nr = 0);

  // `owner` is the node unpacking (re-attached as grad_fn of saved outputs); `what` names the
  // tensor in errors ("input 1 of mul").
  Tensor unpack(const std::shared_ptr<Node>& owner, const std::string& what) const;
  void release() { data_ = Tensor(); released_ = true; }
  bool defined() const { return data_.defined(); }
  // Saved once but holding no data now: freed after a backward, or never kept (discarded).
  // Backward formulas read "defined() || released()" as "was saved", and then unpack, which
  // raises the matching error.
  bool released() const { return released_ || discarded_; }
  const Tensor& peek() const { return data_; }  // no checks; for inspection (dtype, size)

 private:
  Tensor data_;
  uint32_t version_ = 0;
  uint32_t output_nr_ = 0;
  bool is_output_ = false;
  bool released_ = false;
  bool discarded_ = false;
};

// While one is alive on this thread, every SavedTensor made keeps no data (nestable; the
// previous mode comes back on exit, also on exceptions). autograd::checkpoint runs a segment's
// forward this way: its ops are recorded, so requires_grad comes out as in the plain graph, but
// the graph holds no activation, and it is dropped when the segment returns.
class DiscardSavedTensorsGuard {
 public:
  DiscardSavedTensorsGuard();
  ~DiscardSavedTensorsGuard();
  DiscardSavedTensorsGuard(const DiscardSavedTensorsGuard&) = delete;
  DiscardSavedTensorsGuard& operator=(const DiscardSavedTensorsGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace mixtape::autograd
