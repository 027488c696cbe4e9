// models/layers/pooling.cpp — pooling modules: argument normalisation and printing; the work
// is ops/pooling.
#include "models/layers/pooling.h"

#include "models/layers/detail.h"
#include "ops/pooling.h"

namespace mixtape::nn {

MaxPool2d::MaxPool2d(IntList k, MaxPool2dOptions o)
    : kernel_size(detail::expand_pair(k, "MaxPool2d", "kernel_size")),
      stride(o.stride.empty() ? kernel_size : detail::expand_pair(o.stride, "MaxPool2d", "stride")),
      padding(detail::expand_pair(o.padding, "MaxPool2d", "padding")),
      dilation(detail::expand_pair(o.dilation, "MaxPool2d", "dilation")),
      ceil_mode(o.ceil_mode) {}

Tensor MaxPool2d::forward(const Tensor& x) { return max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode); }

std::string MaxPool2d::extra_repr() const {
  return detail::str_cat("kernel_size=", detail::tuple_str(kernel_size), ", stride=", detail::tuple_str(stride),
                         ", padding=", detail::tuple_str(padding), ", dilation=", detail::tuple_str(dilation),
                         ", ceil_mode=", ceil_mode ? "True" : "False");
}

AvgPool2d::AvgPool2d(IntList k, AvgPool2dOptions o)
    : kernel_size(detail::expand_pair(k, "AvgPool2d", "kernel_size")),
      stride(o.stride.empty() ? kernel_size : detail::expand_pair(o.stride, "AvgPool2d", "stride")),
      padding(detail::expand_pair(o.padding, "AvgPool2d", "padding")),
      ceil_mode(o.ceil_mode),
      count_include_pad(o.count_include_pad) {}

Tensor AvgPool2d::forward(const Tensor& x) {
  return avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad);
}

std::string AvgPool2d::extra_repr() const {
  return detail::str_cat("kernel_size=", detail::tuple_str(kernel_size), ", stride=", detail::tuple_str(stride),
                         ", padding=", detail::tuple_str(padding), ", ceil_mode=", ceil_mode ? "True" : "False",
                         ", count_include_pad=", count_include_pad ? "True" : "False");
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(IntList out) : output_size(detail::expand_pair(out, "AdaptiveAvgPool2d", "output_size")) {
  MT_CHECK(output_size[0] > 0 && output_size[1] > 0, "AdaptiveAvgPool2d: output_size must be positive, got ",
           detail::tuple_str(output_size));
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) { return adaptive_avg_pool2d(x, output_size); }

std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + detail::tuple_str(output_size); }

}  // namespace mixtape::nn
