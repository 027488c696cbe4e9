// ops/activation_functors.h — the activations' functors (relu, sigmoid, tanh, gelu, leaky_relu,
// clamp) and their gradients': each is the kernel of its op on the CPU and on CUDA
// (ops/pointwise_functor.h; the ops are defined in ops/activation.cpp).
// Invariant: a functor works on the compute type A = acc_t<T> (float for 16-bit storage), so both
// backends round exactly once, on store. Parameters are plain fields, set from the op's attributes
// by ops/activation.cpp. Formulas and operation order follow PyTorch's CPU kernels
// (aten/src/ATen/native/cpu/Activation.cpp, UnaryOpsKernel.cpp).
// C++17-clean: ops/cuda/pointwise.cu includes this header.
#pragma once
#include <cmath>
#include <cstdint>

#include "ops/pointwise_functor.h"

namespace mixtape::fn {

// relu(NaN) = NaN, as PyTorch (the comparison is false for NaN, so NaN passes through).
struct Relu {
  static constexpr PointwiseDtypes kDtypes = PointwiseDtypes::ToFloat;
  template <typename A> MIXTAPE_HD A operator()(A a) const { return a < A(0) ? A(0) : a; }
  // BFloat16 storage: the bits widen -> operator() -> round gives, decided on the 16 bits (the
  // CPU loop uses it for contiguous rows: half the bytes of f32, nothing converted). -0 stays -0
  // (-0 < 0 is false), NaN comes back quiet (as rounding a NaN makes it), a negative becomes +0.
  static constexpr uint16_t bf16_bits(uint16_t b) {
    const uint16_t mag = b & 0x7FFFu;
    const uint16_t kept = mag > 0x7F80u ? uint16_t(b | 0x0040u) : b;
    return (b & 0x8000u) && mag != 0 && mag <= 0x7F80u ? uint16_t(0) : kept;
  }
};
MT_CUDA_KERNELS(Relu);
// g * (out > 0): relu's backward, from its output.
struct ReluGrad {
  static constexpr PointwiseDtypes kDtypes = PointwiseDtypes::Numeric;
  template <typename A> MIXTAPE_HD A operator()(A g, A out) const { return out > A(0) ? g : A(0); }
  // BFloat16 storage, as Relu::bf16_bits: out > 0 (sign clear, not zero, not NaN) keeps g (a NaN g
  // quiet), anything else gives +0.
  static constexpr uint16_t bf16_bits(uint16_t g, uint16_t out) {
    const bool positive = (out & 0x8000u) == 0 && out != 0 && out <= 0x7F80u;
    const uint16_t kept = (g & 0x7FFFu) > 0x7F80u ? uint16_t(g | 0x0040u) : g;
    return positive ? kept : uint16_t(0);
  }
};
MT_CUDA_KERNELS(ReluGrad);
struct Sigmoid {
  static constexpr PointwiseDtypes kDtypes = PointwiseDtypes::ToFloat;
  template <typename A> MIXTAPE_HD A operator()(A a) const { return A(1) / (A(1) + std::exp(-a)); }
};
MT_CUDA_KERNELS(Sigmoid);
struct Tanh {
  static constexpr PointwiseDtypes kDtypes = PointwiseDtypes::ToFloat;
  template <typename A> MIXTAPE_HD A operator()(A a) const { return std::tanh(a); }
};
MT_CUDA_KERNELS(Tanh);

// Constants of gelu, in double; each functor converts them to A once.
// kSqrt1_2 = 1/sqrt(2); kInvSqrt2Pi = 1/sqrt(2 pi); kSqrt2OverPi = sqrt(2/pi); kKappa: tanh form.
constexpr double kGeluSqrt1_2 = 0.70710678118654752440;
constexpr double kGeluInvSqrt2Pi = 0.39894228040143267794;
constexpr double kGeluSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluKappa = 0.044715;

// gelu(x) = x * Phi(x) = x/2 * (1 + erf(x / sqrt 2))                          (approximate = "none")
//         = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))                (approximate = "tanh")
struct Gelu {
  static constexpr PointwiseDtypes kDtypes = PointwiseDtypes::FloatOnly;
  bool tanh_approx = false;
  template <typename A> MIXTAPE_HD A operator()(A x) const {
    if (tanh_approx) {
      const A inner = A(kGeluSqrt2OverPi) * (x + A(kGeluKappa) * (x * x * x));
      return A(0.5) * x * (A(1) + std::tanh(inner));
    }
    return x * A(0.5) * (A(1) + std::erf(x * A(kGeluSqrt1_2)));
  }
};
MT_CUDA_KERNELS(Gelu);

// g * gelu'(x):
//   none: gelu'(x) = Phi(x) + x phi(x),  phi(x) = exp(-x^2/2) / sqrt(2 pi)
//   tanh: gelu'(x) = (1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 kappa x^2),  t = tanh(inner)
struct GeluGrad {
  static constexpr PointwiseDtypes kDtypes = PointwiseDtypes::FloatOnly;
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
MT_CUDA_KERNELS(GeluGrad);

// leaky_relu(x) = x > 0 ? x : slope * x. NaN passes through (NaN * slope = NaN), as PyTorch.
struct LeakyRelu {
  static constexpr PointwiseDtypes kDtypes = PointwiseDtypes::FloatOnly;
  double slope = 0.01;
  template <typename A> MIXTAPE_HD A operator()(A x) const { return x > A(0) ? x : x * A(slope); }
};
MT_CUDA_KERNELS(LeakyRelu);
// g * leaky_relu'(x) with leaky_relu'(0) = slope (PyTorch tests x > 0 on the input).
struct LeakyReluGrad {
  static constexpr PointwiseDtypes kDtypes = PointwiseDtypes::FloatOnly;
  double slope = 0.01;
  template <typename A> MIXTAPE_HD A operator()(A g, A x) const { return x > A(0) ? g : g * A(slope); }
};
MT_CUDA_KERNELS(LeakyReluGrad);

// clamp(x) = min(max(x, lo), hi), each bound optional. NaN passes through (both comparisons are
// false); lo > hi gives hi everywhere (PyTorch's order: max with lo first, then min with hi).
struct Clamp {
  static constexpr PointwiseDtypes kDtypes = PointwiseDtypes::Numeric;
  bool has_lo = false, has_hi = false;
  double lo = 0, hi = 0;
  template <typename A> MIXTAPE_HD A operator()(A x) const {
    A r = x;
    if (has_lo && r < A(lo)) r = A(lo);
    if (has_hi && r > A(hi)) r = A(hi);
    return r;
  }
};
MT_CUDA_KERNELS(Clamp);
// g * [lo <= x <= hi]: the gradient passes where x lies inside the closed interval, bounds
// included (PyTorch's clamp_backward); NaN x gets 0.
struct ClampGrad {
  static constexpr PointwiseDtypes kDtypes = PointwiseDtypes::FloatOnly;
  bool has_lo = false, has_hi = false;
  double lo = 0, hi = 0;
  template <typename A> MIXTAPE_HD A operator()(A g, A x) const {
    const bool inside = (!has_lo || x >= A(lo)) && (!has_hi || x <= A(hi));
    return inside ? g : A(0);
  }
};
MT_CUDA_KERNELS(ClampGrad);

}  // namespace mixtape::fn
