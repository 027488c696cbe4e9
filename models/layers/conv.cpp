// models/layers/conv.cpp — nn::Conv2d.
#include "models/layers/conv.h"

#include <cmath>

#include "models/init.h"
#include "models/layers/detail.h"
#include "ops/conv.h"
#include "ops/creation.h"

namespace mixtape::nn {

Conv2d::Conv2d(int64_t in, int64_t out, IntList kernel, Conv2dOptions o, Generator* gen)
    : in_channels(in),
      out_channels(out),
      kernel_size(detail::expand_pair(kernel, "Conv2d", "kernel_size")),
      stride(detail::expand_pair(o.stride, "Conv2d", "stride")),
      padding(detail::expand_pair(o.padding, "Conv2d", "padding")),
      dilation(detail::expand_pair(o.dilation, "Conv2d", "dilation")),
      groups(o.groups) {
  MT_CHECK(in > 0 && out > 0, "Conv2d: in_channels and out_channels must be positive, got ", in, " and ", out);
  MT_CHECK(groups > 0 && in % groups == 0 && out % groups == 0, "Conv2d: in_channels (", in, ") and out_channels (",
           out, ") must be divisible by groups (", groups, ")");
  for (int i = 0; i < 2; ++i) {
    MT_CHECK(kernel_size[i] > 0 && stride[i] > 0 && dilation[i] > 0 && padding[i] >= 0, "Conv2d: kernel_size ",
             detail::tuple_str(kernel_size), ", stride ", detail::tuple_str(stride), " and dilation ",
             detail::tuple_str(dilation), " must be positive and padding ", detail::tuple_str(padding),
             " non-negative");
  }
  weight = register_parameter("weight", empty({out, in / groups, kernel_size[0], kernel_size[1]}));
  if (o.bias) bias = register_parameter("bias", empty({out}));
  reset_parameters(gen);
}

void Conv2d::reset_parameters(Generator* gen) {
  init::kaiming_uniform_(weight, std::sqrt(5.0), "fan_in", "leaky_relu", gen);
  if (bias.defined()) {
    double fan_in = static_cast<double>(init::calculate_fan_in_and_fan_out(weight).first);
    double bound = 1.0 / std::sqrt(fan_in);
    init::uniform_(bias, -bound, bound, gen);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  // Checked here, not only in the op, so the error names this layer (and, in a model, its path).
  const bool fits = x.defined() && (x.dim() == 4 || x.dim() == 3) && x.size(x.dim() - 3) == in_channels;
  if (!fits)
    input_error(detail::str_cat("in_channels=", in_channels, ", out_channels=", out_channels,
                                ", kernel_size=", detail::tuple_str(kernel_size)),
                detail::str_cat("expected input [N, ", in_channels, ", H, W], got ",
                                x.defined() ? x.describe() : std::string("an undefined tensor")));
  return conv2d(x, weight, bias, stride, padding, dilation, groups);
}

std::string Conv2d::extra_repr() const {
  std::string s = detail::str_cat(in_channels, ", ", out_channels, ", kernel_size=", detail::tuple_str(kernel_size),
                                  ", stride=", detail::tuple_str(stride));
  if (padding != IntList{0, 0}) s += ", padding=" + detail::tuple_str(padding);
  if (dilation != IntList{1, 1}) s += ", dilation=" + detail::tuple_str(dilation);
  if (groups != 1) s += detail::str_cat(", groups=", groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

}  // namespace mixtape::nn
