// models/layers/pooling.h — MaxPool2d, AvgPool2d, AdaptiveAvgPool2d over (N, C, H, W) or
// (C, H, W), as torch.nn. Pair arguments take {k} (both dims) or {kh, kw}.
#pragma once
#include "models/module.h"

namespace mixtape::nn {

struct MaxPool2dOptions {
  IntList stride = {};  // empty: the kernel size (PyTorch's default)
  IntList padding = {0, 0};
  IntList dilation = {1, 1};
  bool ceil_mode = false;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(IntList kernel_size, MaxPool2dOptions options = {});
  explicit MaxPool2d(int64_t kernel_size, MaxPool2dOptions options = {})
      : MaxPool2d(IntList{kernel_size}, std::move(options)) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  IntList kernel_size, stride, padding, dilation;
  bool ceil_mode;
};

struct AvgPool2dOptions {
  IntList stride = {};  // empty: the kernel size
  IntList padding = {0, 0};
  bool ceil_mode = false;
  bool count_include_pad = true;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(IntList kernel_size, AvgPool2dOptions options = {});
  explicit AvgPool2d(int64_t kernel_size, AvgPool2dOptions options = {})
      : AvgPool2d(IntList{kernel_size}, std::move(options)) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  IntList kernel_size, stride, padding;
  bool ceil_mode, count_include_pad;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(IntList output_size);
  explicit AdaptiveAvgPool2d(int64_t output_size) : AdaptiveAvgPool2d(IntList{output_size}) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  IntList output_size;  // {oh, ow}
};

}  // namespace mixtape::nn
