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
// Invariant: a placeholder's slot is released exactly once, when the SavedTensor is released
// after a backward or destroyed (a graph branch dropped unused), so the hooks can free it.
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
  // names it in errors ("input 1 of mul"). The hooks check that what they return has the
  // value packed (the SavedTensor checks the packed tensor only while its storage lives).
  virtual Tensor unpack(uint32_t slot, const std::string& what) = 0;
  // The SavedTensor of `slot` was released (after a backward without retain_graph) or destroyed.
  // Must not throw (it runs in destructors).
  virtual void release(uint32_t slot) = 0;
};

// The message of every "saved tensor modified in place" error: `what` ("input 0 of mul"),
// `desc` (the tensor), its version now and when it was saved.
std::string modified_in_place_message(const std::string& what, const std::string& desc, uint32_t now,
                                      uint32_t saved);

class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, bool is_output, uint32_t output_nr = 0);

  // `owner` is the node unpacking (re-attached as grad_fn of saved outputs); `what` names the
  // tensor in errors ("input 1 of mul").
  Tensor unpack(const std::shared_ptr<Node>& owner, const std::string& what) const;
  void release();
  // Holds the tensor, or a placeholder for it (saved under hooks).
  bool defined() const { return data_.defined() || placeholder_.hooks != nullptr; }
  // Saved once but holding no data now: freed after a backward, or never kept (discarded).
  // Backward formulas read "defined() || released()" as "was saved", and then unpack, which
  // raises the matching error.
  bool released() const { return released_ || discarded_; }
  // No checks; for inspection (dtype, size). Undefined for a placeholder: see describe().
  const Tensor& peek() const { return data_; }
  std::string describe() const;  // for print_tape

 private:
  // A slot of some hooks, released when this goes (or on reset()). Move-only: one owner per slot.
  struct Placeholder {
    std::shared_ptr<SavedTensorHooks> hooks;
    uint32_t slot = 0;
    Placeholder() = default;
    Placeholder(std::shared_ptr<SavedTensorHooks> h, uint32_t s) : hooks(std::move(h)), slot(s) {}
    Placeholder(Placeholder&& o) noexcept : hooks(std::move(o.hooks)), slot(o.slot) {}
    Placeholder& operator=(Placeholder&& o) noexcept;
    Placeholder(const Placeholder&) = delete;
    Placeholder& operator=(const Placeholder&) = delete;
    ~Placeholder() { reset(); }
    void reset() noexcept;
  };

  Tensor data_;
  Placeholder placeholder_;  // hooks set: a placeholder for a slot of those hooks
  std::weak_ptr<StorageImpl> placeholder_of_;  // the storage a placeholder stands for
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
