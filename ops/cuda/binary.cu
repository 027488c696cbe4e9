// ops/cuda/binary.cu — the CUDA kernels of every two-input pointwise op (add, sub, mul, div, eq and
// the activation gradients relu_grad, gelu_grad, leaky_relu_grad, clamp_grad), instantiated from
// the SAME functors as the CPU loops. A wrapped-number operand stays in the compute type (f16 * 0.1
// multiplies by 0.1f), exactly as ops/cpu/elementwise.h. Glue: ops/cuda/pointwise_ops.cpp.
#include "ops/activation_functors.h"
#include "ops/cuda/loops.cuh"
#include "ops/functors.h"

namespace mixtape::cuda {
namespace {

template <typename T, typename F>
cudaError_t run(bool out_bool, const Operands& ops, int scalar_side, double scalar, F f, cudaStream_t s) {
  using A = acc_t<T>;
  if (scalar_side >= 0) {
    if (out_bool) return launch_map<bool, T, 1>(ops, ScalarMap<bool, T, F>{f, static_cast<A>(scalar), scalar_side == 0}, s);
    return launch_map<T, T, 1>(ops, ScalarMap<T, T, F>{f, static_cast<A>(scalar), scalar_side == 0}, s);
  }
  if (out_bool) return launch_map<bool, T, 2>(ops, BinaryBoolMap<T, F>{f}, s);
  return launch_map<T, T, 2>(ops, BinaryMap<T, F>{f}, s);
}

template <typename T>
cudaError_t run_numeric(BinaryOp op, bool out_bool, const Operands& ops, int side, double scalar, cudaStream_t s) {
  switch (op) {
    case BinaryOp::Add: return run<T>(false, ops, side, scalar, fn::Add{}, s);
    case BinaryOp::Sub: return run<T>(false, ops, side, scalar, fn::Sub{}, s);
    case BinaryOp::Mul: return run<T>(false, ops, side, scalar, fn::Mul{}, s);
    case BinaryOp::ReluGrad: return run<T>(false, ops, side, scalar, fn::ReluGrad{}, s);
    case BinaryOp::Eq: return out_bool ? run<T>(true, ops, side, scalar, fn::Eq{}, s) : cudaErrorInvalidValue;
    default: return cudaErrorInvalidValue;
  }
}

template <typename T>
cudaError_t run_floating(BinaryOp op, bool out_bool, const Operands& ops, int side, double scalar,
                         const FunctorParams& p, cudaStream_t s) {
  switch (op) {
    case BinaryOp::Div: return run<T>(false, ops, side, scalar, fn::Div{}, s);
    case BinaryOp::GeluGrad: {
      fn::GeluGrad f;
      f.tanh_approx = p.f0;
      return run<T>(false, ops, side, scalar, f, s);
    }
    case BinaryOp::LeakyReluGrad: {
      fn::LeakyReluGrad f;
      f.slope = p.p0;
      return run<T>(false, ops, side, scalar, f, s);
    }
    case BinaryOp::ClampGrad: {
      fn::ClampGrad f;
      f.has_lo = p.f0;
      f.has_hi = p.f1;
      f.lo = p.p0;
      f.hi = p.p1;
      return run<T>(false, ops, side, scalar, f, s);
    }
    default: return run_numeric<T>(op, out_bool, ops, side, scalar, s);
  }
}

}  // namespace

cudaError_t launch_binary(BinaryOp op, DType dt, bool out_bool, const Operands& ops, int scalar_side, double scalar,
                          const FunctorParams& p, cudaStream_t s) {
  if (is_floating(dt))
    return visit_floating_cuda(
        dt, [&](auto tag) { return run_floating<typename decltype(tag)::type>(op, out_bool, ops, scalar_side, scalar, p, s); });
  return visit_numeric_cuda(
      dt, [&](auto tag) { return run_numeric<typename decltype(tag)::type>(op, out_bool, ops, scalar_side, scalar, s); });
}

}  // namespace mixtape::cuda
