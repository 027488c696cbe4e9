// models/zoo/lenet.cpp — LeNet5.
#include "models/zoo/lenet.h"

namespace mixtape::models {

LeNet5::LeNet5(int64_t num_classes, int64_t in_channels) {
  conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(in_channels, 6, 5, nn::Conv2dOptions{.padding = {2}}));
  relu1 = register_module("relu1", std::make_shared<nn::ReLU>());
  pool1 = register_module("pool1", std::make_shared<nn::MaxPool2d>(2));
  conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(6, 16, 5));
  relu2 = register_module("relu2", std::make_shared<nn::ReLU>());
  pool2 = register_module("pool2", std::make_shared<nn::MaxPool2d>(2));
  flatten = register_module("flatten", std::make_shared<nn::Flatten>());
  fc1 = register_module("fc1", std::make_shared<nn::Linear>(16 * 5 * 5, 120));
  relu3 = register_module("relu3", std::make_shared<nn::ReLU>());
  fc2 = register_module("fc2", std::make_shared<nn::Linear>(120, 84));
  relu4 = register_module("relu4", std::make_shared<nn::ReLU>());
  fc3 = register_module("fc3", std::make_shared<nn::Linear>(84, num_classes));
}

Tensor LeNet5::forward(const Tensor& x) {
  MT_CHECK(x.defined() && x.dim() == 4 && x.size(2) == 28 && x.size(3) == 28, "LeNet5: expected input (N, ",
           conv1->in_channels, ", 28, 28), got ", x.describe());
  Tensor h = (*pool1)((*relu1)((*conv1)(x)));
  h = (*pool2)((*relu2)((*conv2)(h)));
  h = (*relu3)((*fc1)((*flatten)(h)));
  h = (*relu4)((*fc2)(h));
  return (*fc3)(h);
}

}  // namespace mixtape::models
