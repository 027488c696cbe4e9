// models/layers/conv.h — nn::Conv2d: 2-D cross-correlation over (N, C, H, W) with stride,
// zero padding, dilation and groups, as torch.nn.Conv2d.
#pragma once
#include "models/module.h"

namespace mixtape::nn {

// Each pair argument takes {k} (both dims) or {kh, kw}:  Conv2d(1, 32, 3, {.padding = {1}}).
struct Conv2dOptions {
  IntList stride = {1, 1};
  IntList padding = {0, 0};
  IntList dilation = {1, 1};
  int64_t groups = 1;
  bool bias = true;
};

class Conv2d : public Module {
 public:
  // weight (out, in / groups, kh, kw) and bias (out) ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
  // fan_in = in / groups * kh * kw (PyTorch's default init), from `gen` (default if null).
  Conv2d(int64_t in_channels, int64_t out_channels, IntList kernel_size, Conv2dOptions options = {},
         Generator* gen = nullptr);
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dOptions options = {},
         Generator* gen = nullptr)
      : Conv2d(in_channels, out_channels, IntList{kernel_size}, std::move(options), gen) {}

  // x: (N, in_channels, H, W) -> (N, out_channels, H', W').
  Tensor forward(const Tensor& x) override;
  void reset_parameters(Generator* gen = nullptr);
  std::string extra_repr() const override;

  int64_t in_channels, out_channels;
  IntList kernel_size, stride, padding, dilation;  // each {h, w}
  int64_t groups;
  Tensor weight;  // (out_channels, in_channels / groups, kh, kw)
  Tensor bias;    // (out_channels), or undefined
};

}  // namespace mixtape::nn
