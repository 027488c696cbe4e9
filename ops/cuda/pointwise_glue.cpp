// ops/cuda/pointwise_glue.cpp — the host side of every pointwise CUDA kernel (ops/pointwise_op.h's
// cuda::run_unary / run_binary): the call's device, the output, the operands broadcast and
// converted to the compute dtype that ops/pointwise_op.cpp chose, then the functor's launcher.
// Invariant: the same geometry and wrapped-number handling as the CPU loops (ops/cpu/elementwise.h),
// so a CUDA result equals the CPU result up to the functor's transcendental calls.
#include "ops/cuda/tensor_iter.h"
#include "ops/pointwise_op.h"

namespace mixtape::cuda {

TensorList run_unary(const OpCall& call, DType dt, const void* functor, UnaryLaunch launch) {
  Tensor x = call.inputs[0];
  DeviceGuard guard(x.device().index());
  x = densify_if_huge(cast_to(x, dt, call.name()), x.sizes(), call.name());
  Tensor out = empty_on(x.sizes(), dt, x.device());
  if (out.numel() == 0) return {out};
  const Operands o = make_operands(call.name(), out, {x});
  MT_CUDA_CHECK(static_cast<cudaError_t>(launch(dt, o, functor, current_stream())), call.name());
  return {out};
}

TensorList run_binary(const OpCall& call, DType dt, bool out_bool, const void* functor, BinaryLaunch launch) {
  const Tensor& a = call.inputs[0];
  const Tensor& b = call.inputs[1];
  const IntList shape = broadcast_shapes(a.sizes(), b.sizes(), call.name());
  const Device dev = call_device(call);
  DeviceGuard guard(dev.index());
  Tensor out = empty_on(shape, out_bool ? DType::Bool : dt, dev);
  run_binary_into(call.name(), out, a, b, dt, out_bool, functor, launch);
  return {out};
}

void run_binary_into(const char* op, const Tensor& out, const Tensor& a, const Tensor& b, DType dt, bool out_bool,
                     const void* functor, BinaryLaunch launch) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out.device().index());
  const IntList& shape = out.sizes();
  // A wrapped number keeps its full value in the compute type (ops/cpu/elementwise.h).
  if (a.is_wrapped_number() || b.is_wrapped_number()) {
    const bool b_scalar = b.is_wrapped_number();
    const double s = get_element(b_scalar ? b : a, 0);
    Tensor t = densify_if_huge(cast_to(b_scalar ? a : b, dt, op), shape, op);
    const Operands o = make_operands(op, out, {t});
    MT_CUDA_CHECK(static_cast<cudaError_t>(launch(dt, out_bool, o, b_scalar ? 1 : 0, s, functor, current_stream())),
                  op);
    return;
  }
  Tensor ca = densify_if_huge(cast_to(a, dt, op), shape, op);
  Tensor cb = densify_if_huge(cast_to(b, dt, op), shape, op);
  const Operands o = make_operands(op, out, {ca, cb});
  MT_CUDA_CHECK(static_cast<cudaError_t>(launch(dt, out_bool, o, -1, 0.0, functor, current_stream())), op);
}

}  // namespace mixtape::cuda
