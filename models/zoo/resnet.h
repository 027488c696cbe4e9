// models/zoo/resnet.h — the CIFAR ResNets of He et al. 2016 ("Deep Residual Learning", sec. 4.2):
// depth = 6n + 2 (8, 14, 20, 32, 44, 56, 110):
//   conv1 3x3 in->16, bn1, ReLU                          (N, 16, H, W)
//   layer1: n BasicBlocks, 16 channels                   (N, 16, H, W)
//   layer2: n BasicBlocks, 32 channels, the first strided (N, 32, H/2, W/2)
//   layer3: n BasicBlocks, 64 channels, the first strided (N, 64, H/4, W/4)
//   global average pool, flatten, fc 64 -> num_classes
// Works for any H, W >= 4 (CIFAR's 32x32x3, MNIST's 28x28x1).
//
// Shortcuts: identity where shapes match; where a block changes width/resolution, a 1x1
// stride-2 convolution + BatchNorm ("option B" of the paper, torchvision's `downsample`), not the
// paper's CIFAR option A (strided identity + zero-padded channels). Option B costs a few
// parameters (ResNet-20: 272,474 with 10 classes, vs 270k) and needs no padding op, and its
// state_dict names match torchvision's BasicBlock ("layer2.0.downsample.0.weight").
// Convolutions have no bias (BatchNorm follows) and use He init (kaiming_normal_, fan_out, relu),
// as torchvision; BatchNorm weight 1, bias 0; fc keeps Linear's default init.
#pragma once
#include "models/layers/activation.h"
#include "models/layers/batchnorm.h"
#include "models/layers/conv.h"
#include "models/layers/flatten.h"
#include "models/layers/linear.h"
#include "models/layers/pooling.h"
#include "models/layers/sequential.h"

namespace mixtape::models {

// out = relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)).
class BasicBlock : public nn::Module {
 public:
  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride = 1);
  // x: (N, in_planes, H, W) -> (N, planes, H / stride, W / stride) (rounded up).
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::Sequential> downsample;  // 1x1 conv + BatchNorm, or null (identity)
};

class ResNet : public nn::Module {
 public:
  explicit ResNet(int64_t depth = 20, int64_t num_classes = 10, int64_t in_channels = 3);
  // x: (N, in_channels, H, W) -> logits (N, num_classes).
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  int64_t depth;
  // Gradient checkpointing: in training, each BasicBlock keeps only its input and is recomputed
  // in backward (autograd::checkpoint) -- less activation memory for about one more forward.
  bool checkpoint_activations = false;
  std::shared_ptr<nn::Conv2d> conv1;
  std::shared_ptr<nn::BatchNorm2d> bn1;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::Sequential> layer1, layer2, layer3;
  std::shared_ptr<nn::AdaptiveAvgPool2d> avgpool;
  std::shared_ptr<nn::Flatten> flatten;
  std::shared_ptr<nn::Linear> fc;
};

}  // namespace mixtape::models
