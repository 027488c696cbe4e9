// ops/functors.h — the arithmetic ops' functors (add, sub, mul, div, eq, neg, exp, log, sqrt, abs,
// sign, pow): each is the kernel of its op on the CPU and on CUDA (ops/pointwise_functor.h says
// what a pointwise functor declares; the ops themselves are defined in ops/pointwise.cpp).
// Invariant: a functor works on the compute type A = acc_t<T> (float for 16-bit storage), so both
// backends round exactly once, on store.
// C++17-clean: ops/cuda/pointwise.cu includes this header.
#pragma once
#include <cmath>

#include "ops/pointwise_functor.h"

namespace mixtape::fn {

struct Add {
  static constexpr PointwiseDtypes kDtypes = PointwiseDtypes::Numeric;
  static constexpr bool kFloat8 = true;  // FP8 on the CPU through f32 (ops/pointwise_op.h)
  template <typename A> MIXTAPE_HD A operator()(A a, A b) const { return a + b; }
};
MT_CUDA_KERNELS(Add);
struct Sub {
  static constexpr PointwiseDtypes kDtypes = PointwiseDtypes::Numeric;
  template <typename A> MIXTAPE_HD A operator()(A a, A b) const { return a - b; }
};
MT_CUDA_KERNELS(Sub);
struct Mul {
  static constexpr PointwiseDtypes kDtypes = PointwiseDtypes::Numeric;
  static constexpr bool kFloat8 = true;
  template <typename A> MIXTAPE_HD A operator()(A a, A b) const { return a * b; }
};
MT_CUDA_KERNELS(Mul);
struct Div {
  static constexpr PointwiseDtypes kDtypes = PointwiseDtypes::ToFloat;
  template <typename A> MIXTAPE_HD A operator()(A a, A b) const { return a / b; }
};
MT_CUDA_KERNELS(Div);
// Comparisons produce 0/1 in the compute type; the kernel stores them as bool.
struct Eq {
  static constexpr PointwiseDtypes kDtypes = PointwiseDtypes::Compare;
  template <typename A> MIXTAPE_HD A operator()(A a, A b) const { return a == b ? A(1) : A(0); }
};
MT_CUDA_KERNELS(Eq);

struct Neg {
  static constexpr PointwiseDtypes kDtypes = PointwiseDtypes::Numeric;
  template <typename A> MIXTAPE_HD A operator()(A a) const { return -a; }
};
MT_CUDA_KERNELS(Neg);
struct Exp {
  static constexpr PointwiseDtypes kDtypes = PointwiseDtypes::ToFloat;
  template <typename A> MIXTAPE_HD A operator()(A a) const { return std::exp(a); }
};
MT_CUDA_KERNELS(Exp);
struct Log {
  static constexpr PointwiseDtypes kDtypes = PointwiseDtypes::ToFloat;
  template <typename A> MIXTAPE_HD A operator()(A a) const { return std::log(a); }
};
MT_CUDA_KERNELS(Log);
struct Sqrt {
  static constexpr PointwiseDtypes kDtypes = PointwiseDtypes::ToFloat;
  template <typename A> MIXTAPE_HD A operator()(A a) const { return std::sqrt(a); }
};
MT_CUDA_KERNELS(Sqrt);
struct Abs {
  static constexpr PointwiseDtypes kDtypes = PointwiseDtypes::Numeric;
  template <typename A> MIXTAPE_HD A operator()(A a) const { return a < A(0) ? -a : a; }
};
MT_CUDA_KERNELS(Abs);
// Sign, with sign(0) = 0: the subgradient PyTorch uses for abs at 0.
struct Sign {
  static constexpr PointwiseDtypes kDtypes = PointwiseDtypes::Numeric;
  template <typename A> MIXTAPE_HD A operator()(A a) const { return a > A(0) ? A(1) : a < A(0) ? A(-1) : A(0); }
};
MT_CUDA_KERNELS(Sign);
// x ** e for a scalar exponent; small integer exponents are exact products (as PyTorch).
struct PowScalar {
  static constexpr PointwiseDtypes kDtypes = PointwiseDtypes::ToFloat;
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
MT_CUDA_KERNELS(PowScalar);
}  // namespace mixtape::fn
