// models/zoo/small_cnn.h — the small CNN of mixtape's examples and benchmarks (28x28 input):
//   conv1 in->32 3x3 pad 1, ReLU, maxpool 2    (N, 32, 14, 14)
//   conv2 32->64 3x3 pad 1, ReLU, maxpool 2    (N, 64, 7, 7)
//   flatten 3136 -> fc1 128, ReLU -> fc2 num_classes
// 421,642 parameters for 1 input channel and 10 classes.
#pragma once
#include "models/layers/activation.h"
#include "models/layers/conv.h"
#include "models/layers/flatten.h"
#include "models/layers/linear.h"
#include "models/layers/pooling.h"

namespace mixtape::models {

class SmallCNN : public nn::Module {
 public:
  explicit SmallCNN(int64_t num_classes = 10, int64_t in_channels = 1);
  // x: (N, in_channels, 28, 28) -> logits (N, num_classes).
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::ReLU> relu1, relu2, relu3;
  std::shared_ptr<nn::MaxPool2d> pool1, pool2;
  std::shared_ptr<nn::Flatten> flatten;
  std::shared_ptr<nn::Linear> fc1, fc2;
};

}  // namespace mixtape::models
