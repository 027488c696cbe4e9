// models/zoo/resnet.cpp — BasicBlock and the CIFAR ResNet.
#include "models/zoo/resnet.h"

#include "autograd/checkpoint.h"

#include "models/init.h"
#include "ops/pointwise.h"

namespace mixtape::models {

namespace {
std::shared_ptr<nn::Conv2d> conv3x3(int64_t in, int64_t out, int64_t stride) {
  return std::make_shared<nn::Conv2d>(in, out, 3, nn::Conv2dOptions{.stride = {stride}, .padding = {1}, .bias = false});
}
}  // namespace

BasicBlock::BasicBlock(int64_t in_planes, int64_t planes, int64_t stride) {
  conv1 = register_module("conv1", conv3x3(in_planes, planes, stride));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(planes));
  relu = register_module("relu", std::make_shared<nn::ReLU>());
  conv2 = register_module("conv2", conv3x3(planes, planes, 1));
  bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(planes));
  if (stride != 1 || in_planes != planes) {
    downsample = register_module(
        "downsample",
        std::make_shared<nn::Sequential>(
            std::make_shared<nn::Conv2d>(in_planes, planes, 1, nn::Conv2dOptions{.stride = {stride}, .bias = false}),
            std::make_shared<nn::BatchNorm2d>(planes)));
  }
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = (*relu)((*bn1)((*conv1)(x)));
  out = (*bn2)((*conv2)(out));
  Tensor identity = downsample ? (*downsample)(x) : x;
  return (*relu)(out + identity);
}

ResNet::ResNet(int64_t depth_, int64_t num_classes, int64_t in_channels) : depth(depth_) {
  MT_CHECK(depth >= 8 && (depth - 2) % 6 == 0, "ResNet: depth must be 6n + 2 (8, 14, 20, 32, 44, 56, 110), got ",
           depth);
  const int64_t n = (depth - 2) / 6;
  conv1 = register_module("conv1", conv3x3(in_channels, 16, 1));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(16));
  relu = register_module("relu", std::make_shared<nn::ReLU>());
  int64_t in_planes = 16;
  auto make_stage = [&](int64_t planes, int64_t stride) {
    auto stage = std::make_shared<nn::Sequential>();
    for (int64_t i = 0; i < n; ++i) {
      stage->push_back(std::make_shared<BasicBlock>(in_planes, planes, i == 0 ? stride : 1));
      in_planes = planes;
    }
    return stage;
  };
  layer1 = register_module("layer1", make_stage(16, 1));
  layer2 = register_module("layer2", make_stage(32, 2));
  layer3 = register_module("layer3", make_stage(64, 2));
  avgpool = register_module("avgpool", std::make_shared<nn::AdaptiveAvgPool2d>(1));
  flatten = register_module("flatten", std::make_shared<nn::Flatten>());
  fc = register_module("fc", std::make_shared<nn::Linear>(64, num_classes));

  for (auto& [name, m] : named_modules())
    if (auto* conv = dynamic_cast<nn::Conv2d*>(m)) nn::init::kaiming_normal_(conv->weight, 0.0, "fan_out", "relu");
}

Tensor ResNet::forward(const Tensor& x) {
  Tensor h = (*relu)((*bn1)((*conv1)(x)));
  if (checkpoint_activations && is_training()) {
    for (const auto& layer : {layer1, layer2, layer3})
      for (const auto& block : layer->children())
        h = autograd::checkpoint([block](const Tensor& t) { return (*block)(t); }, h);
  } else {
    h = (*layer3)((*layer2)((*layer1)(h)));
  }
  return (*fc)((*flatten)((*avgpool)(h)));
}

std::string ResNet::extra_repr() const { return detail::str_cat("depth=", depth); }

}  // namespace mixtape::models
