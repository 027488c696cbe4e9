// autograd/saved_tensor.h — a tensor kept for backward, with the version it had when saved.
// Unpacking checks the version: an in-place write after saving would make the gradient
// silently wrong, so it is an error instead. Outputs are saved without their grad_fn (that
// would be a reference cycle output -> node -> output) and get it back on unpack.
//
// Saved-tensor hooks (torch.autograd.graph.saved_tensors_hooks) decide where the data of a
// SavedTensor made on this thread goes: while a SavedTensorHooksGuard is alive, the innermost
// hooks' pack() sees each tensor saved, and either keeps it elsewhere (the SavedTensor holds a
// placeholder: the hooks and a slot, and asks unpack() for the tensor in backward) or keeps
// nothing (unpacking is then an error that says why). autograd::checkpoint is built on this.
#pragma once
#include <optional>

#include "autograd/node.h"

namespace mixtape::autograd {

class SavedTensorHooks {
 public:
  virtual ~SavedTensorHooks() = default;
  // Called for every defined tensor saved while these hooks are innermost on this thread.
  // Returns the slot unpack() will be asked for, or nullopt: the SavedTensor keeps nothing.
  virtual std::optional<uint32_t> pack(const Tensor& t) = 0;
  // The tensor of `slot` (its data; the SavedTensor re-attaches an output's grad_fn). `what`
  // names it in errors ("input 1 of mul").
  virtual Tensor unpack(uint32_t slot, const std::string& what) = 0;
  // The SavedTensor of `slot` was released (after a backward without retain_graph).
  virtual void release(uint32_t slot) = 0;
};

class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, bool is_output, uint32_t output_nr = 0);

  // `owner` is the node unpacking (re-attached as grad_fn of saved outputs); `what` names the
  // tensor in errors ("input 1 of mul").
  Tensor unpack(const std::shared_ptr<Node>& owner, const std::string& what) const;
  void release();
  // Holds the tensor, or a placeholder for it (saved under hooks).
  bool defined() const { return data_.defined() || hooks_ != nullptr; }
  // Saved once but holding no data now: freed after a backward, or never kept (discarded).
  // Backward formulas read "defined() || released()" as "was saved", and then unpack, which
  // raises the matching error.
  bool released() const { return released_ || discarded_; }
  // No checks; for inspection (dtype, size). Undefined for a placeholder: see describe().
  const Tensor& peek() const { return data_; }
  std::string describe() const;  // for print_tape

 private:
  Tensor data_;
  std::shared_ptr<SavedTensorHooks> hooks_;  // set: a placeholder for slot_ of hooks_
  std::weak_ptr<StorageImpl> placeholder_of_;  // the storage a placeholder stands for
  uint32_t slot_ = 0;
  uint32_t version_ = 0;
  uint32_t output_nr_ = 0;
  bool is_output_ = false;
  bool released_ = false;
  bool discarded_ = false;
};

// While one is alive on this thread, SavedTensors made go to `hooks` (nestable: the innermost
// wins; the previous hooks come back on exit, also on exceptions).
class SavedTensorHooksGuard {
 public:
  explicit SavedTensorHooksGuard(std::shared_ptr<SavedTensorHooks> hooks);
  ~SavedTensorHooksGuard();
  SavedTensorHooksGuard(const SavedTensorHooksGuard&) = delete;
  SavedTensorHooksGuard& operator=(const SavedTensorHooksGuard&) = delete;

 private:
  std::shared_ptr<SavedTensorHooks> prev_;
};

// Hooks that keep nothing: the ops are recorded, so requires_grad comes out as in the plain
// graph, but the graph holds no activation. The reentrant autograd::checkpoint runs a segment's
// forward this way and drops the graph when the segment returns.
class DiscardSavedTensorsGuard {
 public:
  DiscardSavedTensorsGuard();
  DiscardSavedTensorsGuard(const DiscardSavedTensorsGuard&) = delete;
  DiscardSavedTensorsGuard& operator=(const DiscardSavedTensorsGuard&) = delete;

 private:
  SavedTensorHooksGuard guard_;
};

}  // namespace mixtape::autograd
