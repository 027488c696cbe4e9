// models/init.h — in-place parameter initialisation (torch.nn.init), drawing from mixtape's
// seeded generator (`gen`, or the default generator when null), so a seed fixes every weight.
//
// Each function writes under NoGradGuard and returns its argument (the same handle). Values are
// drawn in Float32 (Float64 for f64 tensors) and rounded once into the tensor's dtype.
// Fans follow PyTorch: for a weight (out, in, k...), fan_in = in * prod(k), fan_out = out * prod(k).
#pragma once
#include <string>
#include <utility>

#include "core/rng.h"
#include "core/tensor.h"

namespace mixtape::nn::init {

// (fan_in, fan_out) of a tensor with at least 2 dims.
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);
// The recommended gain for a nonlinearity: "linear", "conv2d", "sigmoid" -> 1, "tanh" -> 5/3,
// "relu" -> sqrt(2), "leaky_relu" -> sqrt(2 / (1 + param^2)) (param = negative slope,
// default 0.01), "selu" -> 3/4.
double calculate_gain(const std::string& nonlinearity, double param = 0.01);

// U(a, b).
Tensor uniform_(Tensor t, double a = 0.0, double b = 1.0, Generator* gen = nullptr);
// N(mean, std^2).
Tensor normal_(Tensor t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
Tensor constant_(Tensor t, double value);
Tensor zeros_(Tensor t);
Tensor ones_(Tensor t);
// U(-bound, bound), bound = gain(nonlinearity, a) * sqrt(3 / fan); mode "fan_in" or "fan_out".
// PyTorch's Linear/Conv default is kaiming_uniform_(w, a = sqrt(5)): bound = 1 / sqrt(fan_in).
Tensor kaiming_uniform_(Tensor t, double a = 0.0, const std::string& mode = "fan_in",
                        const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
// N(0, std^2), std = gain(nonlinearity, a) / sqrt(fan).
Tensor kaiming_normal_(Tensor t, double a = 0.0, const std::string& mode = "fan_in",
                       const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
// U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(Tensor t, double gain = 1.0, Generator* gen = nullptr);
// N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(Tensor t, double gain = 1.0, Generator* gen = nullptr);

}  // namespace mixtape::nn::init
