// ops/activation.h — activations and selection: relu, sigmoid, tanh, gelu, leaky_relu, clamp, where.
// Elementwise: the output has the input's shape (where: the broadcast shape of its three
// inputs) and dtype (where: the promoted dtype of a and b). 16-bit inputs compute in float and
// round once on store. None of these is on an autocast list (they run in their inputs' dtypes).
#pragma once
#include <optional>
#include <string>

#include "core/tensor.h"

namespace mixtape {

// max(x, 0); relu(NaN) = NaN. The gradient at 0 is 0 (PyTorch). Integral x computes in f32.
Tensor relu(const Tensor& x);
// 1 / (1 + e^-x).
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
// x * Phi(x) (approximate = "none", via erf) or PyTorch's tanh form (approximate = "tanh").
// x: any shape, floating.
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
// x > 0 ? x : negative_slope * x; the gradient at 0 is negative_slope (PyTorch). x: floating.
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
// min(max(x, min), max), either bound optional (not both absent). Gradient: 1 where
// min <= x <= max (bounds included, PyTorch's convention), 0 outside. x: floating or integral
// (integral x needs integral bounds).
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
// cond ? a : b elementwise. cond: bool; cond, a, b broadcast together; a and b promote
// (PyTorch's rules, wrapped numbers included). Gradient to a where cond, to b elsewhere.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// Backward helpers, exposed so they are themselves differentiable (double backward):
// g * (out > 0), relu's backward from its output.
Tensor relu_grad(const Tensor& g, const Tensor& out);
// g * gelu'(x); tanh_approx selects the form. g and x have the same shape.
Tensor gelu_grad(const Tensor& g, const Tensor& x, bool tanh_approx);
// g * (x > 0 ? 1 : negative_slope).
Tensor leaky_relu_grad(const Tensor& g, const Tensor& x, double negative_slope);
// g * [min <= x <= max].
Tensor clamp_grad(const Tensor& g, const Tensor& x, std::optional<double> min, std::optional<double> max);

}  // namespace mixtape
