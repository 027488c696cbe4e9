// models/layers/sequential.h — nn::Sequential: modules applied in order, named "0", "1", ...
// (so state_dict names match torch.nn.Sequential's).
//
//   auto net = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(784, 128),
//                                                std::make_shared<nn::ReLU>());
//   net->push_back(std::make_shared<nn::Linear>(128, 10));
//   Tensor y = (*net)(x);  auto fc = net->at<nn::Linear>(0);
#pragma once
#include <memory>
#include <vector>

#include "models/module.h"

namespace mixtape::nn {

class Sequential : public Module {
 public:
  Sequential() = default;
  template <typename... Ms>
  explicit Sequential(std::shared_ptr<Ms>... modules) {
    (push_back(std::move(modules)), ...);
  }

  // Appends `module` under the name of its index; returns it.
  template <typename M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    register_module(std::to_string(modules_.size()), module);
    modules_.push_back(module);
    return module;
  }

  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  // The i-th module; throws on an index out of range.
  std::shared_ptr<Module> operator[](size_t i) const;
  // The i-th module as M; throws if it is not an M.
  template <typename M>
  std::shared_ptr<M> at(size_t i) const {
    auto m = std::dynamic_pointer_cast<M>((*this)[i]);
    MT_CHECK(m != nullptr, "Sequential::at: module ", i, " is a ", (*this)[i]->type_name(), ", not the requested type");
    return m;
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

  // x through every module in order (each called through operator(), so hooks run).
  Tensor forward(const Tensor& x) override;

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

}  // namespace mixtape::nn
