// models/zoo/lenet.h — LeNet-5 (LeCun et al. 1998) in its common modern form for 28x28 input:
//   conv1 in->6 5x5 pad 2, ReLU, maxpool 2   (N, 6, 14, 14)
//   conv2 6->16 5x5,       ReLU, maxpool 2   (N, 16, 5, 5)
//   flatten 400 -> fc1 120, ReLU -> fc2 84, ReLU -> fc3 num_classes
// 61,706 parameters for 1 input channel and 10 classes.
#pragma once
#include "models/layers/activation.h"
#include "models/layers/conv.h"
#include "models/layers/flatten.h"
#include "models/layers/linear.h"
#include "models/layers/pooling.h"

namespace mixtape::models {

class LeNet5 : public nn::Module {
 public:
  explicit LeNet5(int64_t num_classes = 10, int64_t in_channels = 1);
  // x: (N, in_channels, 28, 28) -> logits (N, num_classes).
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::ReLU> relu1, relu2, relu3, relu4;
  std::shared_ptr<nn::MaxPool2d> pool1, pool2;
  std::shared_ptr<nn::Flatten> flatten;
  std::shared_ptr<nn::Linear> fc1, fc2, fc3;
};

}  // namespace mixtape::models
