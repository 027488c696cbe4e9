// ops/pointwise.h — elementwise arithmetic with broadcasting and PyTorch's type promotion
// (the activations relu, sigmoid, tanh, gelu, ... are in ops/activation.h).
#pragma once
#include "core/tensor.h"
#include "ops/activation.h"  // relu, sigmoid, tanh lived here before; code that included this still works

namespace mixtape {

Tensor add(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, const Scalar& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Scalar& b);
Tensor rsub(const Tensor& a, const Scalar& b);  // b - a
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Scalar& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Scalar& b);
Tensor rdiv(const Tensor& a, const Scalar& b);  // b / a
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);  // not differentiable (zero gradient everywhere it exists)
Tensor pow(const Tensor& x, double exponent);
Tensor eq(const Tensor& a, const Tensor& b);  // bool result, not differentiable
Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, double value = 1.0);  // self + value*t1*t2

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, const Scalar& b);
Tensor operator-(const Tensor& a, const Scalar& b);
Tensor operator*(const Tensor& a, const Scalar& b);
Tensor operator/(const Tensor& a, const Scalar& b);
Tensor operator+(const Scalar& a, const Tensor& b);
Tensor operator-(const Scalar& a, const Tensor& b);
Tensor operator*(const Scalar& a, const Tensor& b);
Tensor operator/(const Scalar& a, const Tensor& b);

}  // namespace mixtape
