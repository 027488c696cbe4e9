// autograd/saved_tensor.cpp — save / unpack with version checks; saved-tensor hooks.
#include "autograd/saved_tensor.h"

#include "core/error.h"

namespace mixtape::autograd {

namespace {
thread_local std::shared_ptr<SavedTensorHooks> tls_hooks;

class KeepNothing final : public SavedTensorHooks {
 public:
  std::optional<uint32_t> pack(const Tensor&) override { return std::nullopt; }
  Tensor unpack(uint32_t, const std::string&) override { return {}; }  // never reached: nothing packed
  void release(uint32_t) override {}
};

}  // namespace

std::string modified_in_place_message(const std::string& what, const std::string& desc, uint32_t now,
                                      uint32_t saved) {
  return detail::str_cat("one of the tensors needed for gradient computation has been modified by an in-place "
                         "operation: ", what, " (", desc, ") is at version ", now, "; expected version ", saved,
                         ". Use an out-of-place op, or clone() the tensor before changing it.");
}

SavedTensor::Placeholder& SavedTensor::Placeholder::operator=(Placeholder&& o) noexcept {
  if (this != &o) {
    reset();
    hooks = std::move(o.hooks);
    slot = o.slot;
  }
  return *this;
}

void SavedTensor::Placeholder::reset() noexcept {
  if (!hooks) return;
  std::shared_ptr<SavedTensorHooks> h = std::move(hooks);
  h->release(slot);
}

SavedTensorHooksGuard::SavedTensorHooksGuard(std::shared_ptr<SavedTensorHooks> hooks) : prev_(std::move(tls_hooks)) {
  tls_hooks = std::move(hooks);
}
SavedTensorHooksGuard::~SavedTensorHooksGuard() { tls_hooks = std::move(prev_); }

DiscardSavedTensorsGuard::DiscardSavedTensorsGuard() : guard_(std::make_shared<KeepNothing>()) {}

SavedTensor::SavedTensor(const Tensor& t, bool is_output, uint32_t output_nr)
    : output_nr_(output_nr), is_output_(is_output) {
  if (!t.defined()) return;
  version_ = t.version();
  if (tls_hooks) {
    std::optional<uint32_t> slot = tls_hooks->pack(t);
    if (!slot) {
      discarded_ = true;
      return;
    }
    placeholder_ = Placeholder(tls_hooks, *slot);
    // Kept weakly: while the saved tensor's storage lives, an in-place change to it is an error
    // as in the plain graph (a parameter changed between a retain_graph backward and the next).
    placeholder_of_ = t.storage();
    return;
  }
  data_ = is_output ? t.detach() : t;
}

void SavedTensor::release() {
  placeholder_.reset();
  data_ = Tensor();
  released_ = true;
}

std::string SavedTensor::describe() const {
  if (placeholder_.hooks) return "(placeholder " + std::to_string(placeholder_.slot) + ", recomputed in backward)";
  return data_.defined() ? data_.describe() : std::string("(none)");
}

Tensor SavedTensor::unpack(const std::shared_ptr<Node>& owner, const std::string& what) const {
  MT_CHECK(!discarded_, what, " was not kept for backward: it belongs to a graph recorded without saving (the forward "
           "of a reentrant checkpointed segment, or a segment's recompute), which only the segment's own backward "
           "uses. A tensor computed inside a reentrant segment and used outside it must be returned by the segment.");
  MT_CHECK(!released_, "Trying to backward through the graph a second time (or to read saved tensors after they "
           "were freed): ", what, " was released after the first backward. Pass retain_graph=true to the first "
           "backward() if you need to backward twice.");
  Tensor t;
  if (placeholder_.hooks) {
    // While the saved tensor's storage lives, its version is checked here as in the plain graph;
    // the hooks check the tensor they return (a checkpoint's recompute: the version of its copy).
    if (auto storage = placeholder_of_.lock())
      MT_CHECK(storage->version() == version_, modified_in_place_message(what, "saved in a checkpointed segment",
                                                                         storage->version(), version_));
    t = placeholder_.hooks->unpack(placeholder_.slot, what);
  } else {
    if (!data_.defined()) return {};
    MT_CHECK(data_.version() == version_, modified_in_place_message(what, data_.describe(), data_.version(), version_));
    if (!is_output_) return data_;
    t = data_;
  }
  if (!is_output_) return t;
  t = t.detach();
  // A saved integer output (ReLU's mask, a pooling's tap codes) is not differentiable: it gets no
  // history, as the autograd layer gives it none (a grad_fn on it would also tie a create_graph
  // backward's saved copy to this node: a reference cycle through a leaf's .grad).
  if (owner && is_floating(t.dtype())) t.set_history(owner, output_nr_);
  return t;
}

}  // namespace mixtape::autograd
