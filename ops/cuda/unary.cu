// ops/cuda/unary.cu — the CUDA kernels of every one-input pointwise op (neg, exp, log, sqrt, abs,
// relu, sigmoid, tanh, sign, pow, gelu, leaky_relu, clamp), instantiated from the SAME functors
// as the CPU loops (ops/functors.h, ops/activation_functors.h). The op glue that checks dtypes,
// broadcasts and registers the kernels is ops/cuda/pointwise_ops.cpp.
// abs/sign/clamp of uint8 compare an unsigned value with 0 (pointless for uint8, needed by the
// functor for the other dtypes); set before the functor headers, where the warning points.
#pragma nv_diag_suppress 186
#include "ops/activation_functors.h"
#include "ops/cuda/loops.cuh"
#include "ops/functors.h"


namespace mixtape::cuda {
namespace {

template <typename T, typename F>
cudaError_t run(const Operands& ops, F f, cudaStream_t s) {
  return launch_map<T, T, 1>(ops, UnaryMap<T, F>{f}, s);
}

// Ops defined for every numeric dtype (TypeRule::Same on the CPU): integers compute in their own type.
template <typename T>
cudaError_t run_numeric(UnaryOp op, const Operands& ops, const FunctorParams& p, cudaStream_t s) {
  switch (op) {
    case UnaryOp::Neg: return run<T>(ops, fn::Neg{}, s);
    case UnaryOp::Abs: return run<T>(ops, fn::Abs{}, s);
    case UnaryOp::Sign: return run<T>(ops, fn::Sign{}, s);
    case UnaryOp::Clamp: {
      fn::Clamp f;
      f.has_lo = p.f0;
      f.has_hi = p.f1;
      f.lo = p.p0;
      f.hi = p.p1;
      return run<T>(ops, f, s);
    }
    default: return cudaErrorInvalidValue;
  }
}

template <typename T>
cudaError_t run_floating(UnaryOp op, const Operands& ops, const FunctorParams& p, cudaStream_t s) {
  switch (op) {
    case UnaryOp::Exp: return run<T>(ops, fn::Exp{}, s);
    case UnaryOp::Log: return run<T>(ops, fn::Log{}, s);
    case UnaryOp::Sqrt: return run<T>(ops, fn::Sqrt{}, s);
    case UnaryOp::Relu: return run<T>(ops, fn::Relu{}, s);
    case UnaryOp::Sigmoid: return run<T>(ops, fn::Sigmoid{}, s);
    case UnaryOp::Tanh: return run<T>(ops, fn::Tanh{}, s);
    case UnaryOp::Pow: return run<T>(ops, fn::PowScalar{p.p0}, s);
    case UnaryOp::Gelu: {
      fn::Gelu f;
      f.tanh_approx = p.f0;
      return run<T>(ops, f, s);
    }
    case UnaryOp::LeakyRelu: {
      fn::LeakyRelu f;
      f.slope = p.p0;
      return run<T>(ops, f, s);
    }
    default: return run_numeric<T>(op, ops, p, s);
  }
}

}  // namespace

cudaError_t launch_unary(UnaryOp op, DType dt, const Operands& ops, const FunctorParams& p, cudaStream_t s) {
  if (is_floating(dt))
    return visit_floating_cuda(dt, [&](auto tag) { return run_floating<typename decltype(tag)::type>(op, ops, p, s); });
  return visit_numeric_cuda(dt, [&](auto tag) { return run_numeric<typename decltype(tag)::type>(op, ops, p, s); });
}

}  // namespace mixtape::cuda
