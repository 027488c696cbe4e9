// autograd/saved_tensor.cpp — save / unpack with version checks; the discard mode.
#include "autograd/saved_tensor.h"

namespace mixtape::autograd {

namespace {
thread_local bool tls_discard = false;
}

DiscardSavedTensorsGuard::DiscardSavedTensorsGuard() : prev_(tls_discard) { tls_discard = true; }
DiscardSavedTensorsGuard::~DiscardSavedTensorsGuard() { tls_discard = prev_; }

SavedTensor::SavedTensor(const Tensor& t, bool is_output, uint32_t output_nr)
    : output_nr_(output_nr), is_output_(is_output) {
  if (!t.defined()) return;
  if (tls_discard) {
    discarded_ = true;
    return;
  }
  version_ = t.version();
  if (is_output) {
    data_ = t.detach();
  } else {
    data_ = t;
  }
}

Tensor SavedTensor::unpack(const std::shared_ptr<Node>& owner, const std::string& what) const {
  MT_CHECK(!discarded_, what, " was not kept for backward: it belongs to a graph recorded inside a checkpointed "
           "segment's forward, which saves nothing (autograd::checkpoint recomputes the segment in backward, and "
           "only the segment's outputs lead back into it). A tensor computed inside the segment and used outside "
           "it must be returned by the segment.");
  MT_CHECK(!released_, "Trying to backward through the graph a second time (or to read saved tensors after they "
           "were freed): ", what, " was released after the first backward. Pass retain_graph=true to the first "
           "backward() if you need to backward twice.");
  if (!data_.defined()) return {};
  MT_CHECK(data_.version() == version_, "one of the tensors needed for gradient computation has been modified by "
           "an in-place operation: ", what, " (", data_.describe(), ") is at version ", data_.version(),
           "; expected version ", version_, ". Use an out-of-place op, or clone() the tensor before changing it.");
  if (!is_output_) return data_;
  Tensor t = data_.detach();
  if (owner) t.set_history(owner, output_nr_);
  return t;
}

}  // namespace mixtape::autograd
