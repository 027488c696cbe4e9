// ops/activation_functors.h — the arithmetic of the activation ops (gelu, leaky_relu, clamp) and
// of their gradients, written once for the CPU loops and the CUDA kernels (MIXTAPE_HD). Each
// functor works on the compute type A = acc_t<T> (float for 16-bit storage), so both backends
// round exactly once, on store. Parameters are plain fields (the .cpp reads them from the op's
// attributes). Formulas and operation order follow PyTorch's CPU kernels
// (aten/src/ATen/native/cpu/Activation.cpp, UnaryOpsKernel.cpp).
// C++17-clean: CUDA translation units include this header.
#pragma once
#include <cmath>

#include "core/macros.h"

namespace mixtape::fn {

// Constants of gelu, in double; each functor converts them to A once.
// kSqrt1_2 = 1/sqrt(2); kInvSqrt2Pi = 1/sqrt(2 pi); kSqrt2OverPi = sqrt(2/pi); kKappa: tanh form.
constexpr double kGeluSqrt1_2 = 0.70710678118654752440;
constexpr double kGeluInvSqrt2Pi = 0.39894228040143267794;
constexpr double kGeluSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluKappa = 0.044715;

// gelu(x) = x * Phi(x) = x/2 * (1 + erf(x / sqrt 2))                          (approximate = "none")
//         = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))                (approximate = "tanh")
struct Gelu {
  bool tanh_approx = false;
  template <typename A> MIXTAPE_HD A operator()(A x) const {
    if (tanh_approx) {
      const A inner = A(kGeluSqrt2OverPi) * (x + A(kGeluKappa) * (x * x * x));
      return A(0.5) * x * (A(1) + std::tanh(inner));
    }
    return x * A(0.5) * (A(1) + std::erf(x * A(kGeluSqrt1_2)));
  }
};

// g * gelu'(x):
//   none: gelu'(x) = Phi(x) + x phi(x),  phi(x) = exp(-x^2/2) / sqrt(2 pi)
//   tanh: gelu'(x) = (1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 kappa x^2),  t = tanh(inner)
struct GeluGrad {
  bool tanh_approx = false;
  template <typename A> MIXTAPE_HD A operator()(A g, A x) const {
    if (tanh_approx) {
      const A x_sq = x * x;
      const A inner = A(kGeluSqrt2OverPi) * (x + A(kGeluKappa) * (x_sq * x));
      const A t = std::tanh(inner);
      const A left = A(0.5) * x;
      const A right = A(1) + t;
      const A left_derivative = A(0.5) * right;
      const A inner_derivative = A(kGeluSqrt2OverPi) * (A(1) + A(3 * kGeluKappa) * x_sq);
      const A right_derivative = left * (A(1) - t * t) * inner_derivative;
      return g * (left_derivative + right_derivative);
    }
    const A cdf = A(0.5) * (A(1) + std::erf(x * A(kGeluSqrt1_2)));
    const A pdf = A(kGeluInvSqrt2Pi) * std::exp(x * x * A(-0.5));
    return g * (cdf + x * pdf);
  }
};

// leaky_relu(x) = x > 0 ? x : slope * x. NaN passes through (NaN * slope = NaN), as PyTorch.
struct LeakyRelu {
  double slope = 0.01;
  template <typename A> MIXTAPE_HD A operator()(A x) const { return x > A(0) ? x : x * A(slope); }
};
// g * leaky_relu'(x) with leaky_relu'(0) = slope (PyTorch tests x > 0 on the input).
struct LeakyReluGrad {
  double slope = 0.01;
  template <typename A> MIXTAPE_HD A operator()(A g, A x) const { return x > A(0) ? g : g * A(slope); }
};

// clamp(x) = min(max(x, lo), hi), each bound optional. NaN passes through (both comparisons are
// false); lo > hi gives hi everywhere (PyTorch's order: max with lo first, then min with hi).
struct Clamp {
  bool has_lo = false, has_hi = false;
  double lo = 0, hi = 0;
  template <typename A> MIXTAPE_HD A operator()(A x) const {
    A r = x;
    if (has_lo && r < A(lo)) r = A(lo);
    if (has_hi && r > A(hi)) r = A(hi);
    return r;
  }
};
// g * [lo <= x <= hi]: the gradient passes where x lies inside the closed interval, bounds
// included (PyTorch's clamp_backward); NaN x gets 0.
struct ClampGrad {
  bool has_lo = false, has_hi = false;
  double lo = 0, hi = 0;
  template <typename A> MIXTAPE_HD A operator()(A g, A x) const {
    const bool inside = (!has_lo || x >= A(lo)) && (!has_hi || x <= A(hi));
    return inside ? g : A(0);
  }
};

}  // namespace mixtape::fn
