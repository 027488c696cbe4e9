// models/init.cpp — torch.nn.init's formulas on top of rand/randn and copy_.
#include "models/init.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "ops/creation.h"
#include "ops/pointwise.h"

namespace mixtape::nn::init {

namespace {

DType draw_dtype(const Tensor& t) { return t.dtype() == DType::Float64 ? DType::Float64 : DType::Float32; }

void check(const Tensor& t, const char* op) {
  MT_CHECK(t.defined(), "init::", op, ": tensor is undefined");
  MT_CHECK(t.is_floating_point(), "init::", op, ": expected a floating tensor, got ", t.describe());
}

double fan(const Tensor& t, const std::string& mode, const char* op) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  MT_CHECK(mode == "fan_in" || mode == "fan_out", "init::", op, ": mode must be \"fan_in\" or \"fan_out\", got \"",
           mode, "\"");
  int64_t f = mode == "fan_in" ? fan_in : fan_out;
  MT_CHECK(f > 0, "init::", op, ": cannot initialise a tensor with zero elements ", t.describe());
  return static_cast<double>(f);
}

}  // namespace

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  MT_CHECK(t.defined() && t.dim() >= 2, "init: fan in and fan out need a tensor with at least 2 dims, got ",
           t.describe());
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

double calculate_gain(const std::string& nl, double param) {
  if (nl == "linear" || nl == "conv1d" || nl == "conv2d" || nl == "conv3d" || nl == "sigmoid") return 1.0;
  if (nl == "tanh") return 5.0 / 3.0;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nl == "selu") return 3.0 / 4.0;
  MT_ERROR("init::calculate_gain: unsupported nonlinearity \"", nl, "\"");
}

Tensor uniform_(Tensor t, double a, double b, Generator* gen) {
  check(t, "uniform_");
  MT_CHECK(a <= b, "init::uniform_: expected a <= b, got a = ", a, ", b = ", b);
  NoGradGuard no_grad;
  Tensor r = rand(t.sizes(), TensorOptions(draw_dtype(t)).with_device(t.device()), gen);
  copy_(t, add(mul(r, b - a), a));
  return t;
}

Tensor normal_(Tensor t, double mean, double std, Generator* gen) {
  check(t, "normal_");
  MT_CHECK(std >= 0, "init::normal_: expected std >= 0, got ", std);
  NoGradGuard no_grad;
  Tensor r = randn(t.sizes(), TensorOptions(draw_dtype(t)).with_device(t.device()), gen);
  copy_(t, add(mul(r, std), mean));
  return t;
}

Tensor constant_(Tensor t, double value) {
  check(t, "constant_");
  NoGradGuard no_grad;
  fill_(t, value);
  return t;
}
Tensor zeros_(Tensor t) { return constant_(std::move(t), 0.0); }
Tensor ones_(Tensor t) { return constant_(std::move(t), 1.0); }

Tensor kaiming_uniform_(Tensor t, double a, const std::string& mode, const std::string& nonlinearity, Generator* gen) {
  check(t, "kaiming_uniform_");
  double bound = calculate_gain(nonlinearity, a) * std::sqrt(3.0 / fan(t, mode, "kaiming_uniform_"));
  return uniform_(std::move(t), -bound, bound, gen);
}

Tensor kaiming_normal_(Tensor t, double a, const std::string& mode, const std::string& nonlinearity, Generator* gen) {
  check(t, "kaiming_normal_");
  double std = calculate_gain(nonlinearity, a) / std::sqrt(fan(t, mode, "kaiming_normal_"));
  return normal_(std::move(t), 0.0, std, gen);
}

Tensor xavier_uniform_(Tensor t, double gain, Generator* gen) {
  check(t, "xavier_uniform_");
  auto [fi, fo] = calculate_fan_in_and_fan_out(t);
  MT_CHECK(fi + fo > 0, "init::xavier_uniform_: tensor has zero elements ", t.describe());
  double a = gain * std::sqrt(6.0 / static_cast<double>(fi + fo));
  return uniform_(std::move(t), -a, a, gen);
}

Tensor xavier_normal_(Tensor t, double gain, Generator* gen) {
  check(t, "xavier_normal_");
  auto [fi, fo] = calculate_fan_in_and_fan_out(t);
  MT_CHECK(fi + fo > 0, "init::xavier_normal_: tensor has zero elements ", t.describe());
  return normal_(std::move(t), 0.0, gain * std::sqrt(2.0 / static_cast<double>(fi + fo)), gen);
}

}  // namespace mixtape::nn::init
