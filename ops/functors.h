// ops/functors.h — the arithmetic of pointwise ops, written once for the CPU loops and the
// CUDA kernels (MIXTAPE_HD). Each functor works on the compute type A = acc_t<T> (float for
// 16-bit storage), so both backends round exactly once, on store.
// C++17-clean: CUDA translation units include this header.
#pragma once
#include <cmath>

#include "core/macros.h"

namespace mixtape::fn {

struct Add {
  template <typename A> MIXTAPE_HD A operator()(A a, A b) const { return a + b; }
};
struct Sub {
  template <typename A> MIXTAPE_HD A operator()(A a, A b) const { return a - b; }
};
struct Mul {
  template <typename A> MIXTAPE_HD A operator()(A a, A b) const { return a * b; }
};
struct Div {
  template <typename A> MIXTAPE_HD A operator()(A a, A b) const { return a / b; }
};
// Comparisons produce 0/1 in the compute type; the kernel stores them as bool.
struct Eq {
  template <typename A> MIXTAPE_HD A operator()(A a, A b) const { return a == b ? A(1) : A(0); }
};

struct Neg {
  template <typename A> MIXTAPE_HD A operator()(A a) const { return -a; }
};
struct Exp {
  template <typename A> MIXTAPE_HD A operator()(A a) const { return std::exp(a); }
};
struct Log {
  template <typename A> MIXTAPE_HD A operator()(A a) const { return std::log(a); }
};
struct Sqrt {
  template <typename A> MIXTAPE_HD A operator()(A a) const { return std::sqrt(a); }
};
struct Abs {
  template <typename A> MIXTAPE_HD A operator()(A a) const { return a < A(0) ? -a : a; }
};
// relu(NaN) = NaN, as PyTorch (the comparison is false for NaN, so NaN passes through).
struct Relu {
  template <typename A> MIXTAPE_HD A operator()(A a) const { return a < A(0) ? A(0) : a; }
};
struct Sigmoid {
  template <typename A> MIXTAPE_HD A operator()(A a) const { return A(1) / (A(1) + std::exp(-a)); }
};
struct Tanh {
  template <typename A> MIXTAPE_HD A operator()(A a) const { return std::tanh(a); }
};
// Sign, with sign(0) = 0: the subgradient PyTorch uses for abs at 0.
struct Sign {
  template <typename A> MIXTAPE_HD A operator()(A a) const { return a > A(0) ? A(1) : a < A(0) ? A(-1) : A(0); }
};
// x ** e for a scalar exponent; small integer exponents are exact products (as PyTorch).
struct PowScalar {
  double e;
  template <typename A> MIXTAPE_HD A operator()(A a) const {
    if (e == 2.0) return a * a;
    if (e == 1.0) return a;
    if (e == 0.0) return A(1);
    if (e == 3.0) return a * a * a;
    if (e == 0.5) return std::sqrt(a);
    if (e == -1.0) return A(1) / a;
    return std::pow(a, A(e));
  }
};
// Gradient helpers used by backward kernels.
struct ReluGrad {  // g * (out > 0)
  template <typename A> MIXTAPE_HD A operator()(A g, A out) const { return out > A(0) ? g : A(0); }
};

}  // namespace mixtape::fn
