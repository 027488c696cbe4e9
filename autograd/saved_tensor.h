// autograd/saved_tensor.h — a tensor kept for backward, with the version it had when saved.
// Unpacking checks the version: an in-place write after saving would make the gradient
// silently wrong, so it is an error instead. Outputs are saved without their grad_fn (that
// would be a reference cycle output -> node -> output) and get it back on unpack.
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
  bool released() const { return released_; }
  const Tensor& peek() const { return data_; }  // no checks; for inspection (dtype, size)

 private:
  Tensor data_;
  uint32_t version_ = 0;
  uint32_t output_nr_ = 0;
  bool is_output_ = false;
  bool released_ = false;
};

}  // namespace mixtape::autograd
