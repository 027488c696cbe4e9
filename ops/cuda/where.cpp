// ops/cuda/where.cpp — where(cond, a, b) on CUDA: a and b converted to their result dtype (one
// rounding each), then selected byte-wise, as ops/activation.cpp's CPU kernel.
#include "ops/creation.h"
#include "ops/cuda/tensor_iter.h"

namespace mixtape::cuda {
namespace {

TensorList where_cuda(const OpCall& call) {
  const Tensor& cond = call.inputs[0];
  const Tensor& a = call.inputs[1];
  const Tensor& b = call.inputs[2];
  MT_CHECK(cond.defined() && a.defined() && b.defined(), call.name(), ": condition, input and other must be defined");
  MT_CHECK(cond.dtype() == DType::Bool, call.name(), ": expected condition to be a bool tensor, got ", cond.describe());
  MT_CHECK(!cond.is_wrapped_number() && cond.device().is_cuda(), call.name(), ": expected a CUDA condition, got ",
           cond.describe(), " on ", cond.device());
  const DType dt = result_type(a, b);
  const IntList shape = broadcast_shapes(broadcast_shapes(cond.sizes(), a.sizes(), call.name()), b.sizes(), call.name());
  DeviceGuard guard(cond.device().index());
  // Wrapped numbers (where(c, g, 0.0)) become 0-d device tensors of the result dtype.
  auto operand = [&](const Tensor& t) {
    if (!t.is_wrapped_number()) return cast_to(t, dt, call.name());
    Tensor d = empty_on({}, dt, cond.device());
    fill_(d, get_element(t, 0));
    return d;
  };
  Tensor ca = operand(a), cb = operand(b);
  Tensor out = empty_on(shape, dt, cond.device());
  if (out.numel() == 0) return {out};
  const Operands o = make_operands(call.name(), out, {cond, ca, cb});
  MT_CUDA_CHECK(launch_where(element_size(dt), o, current_stream()), call.name());
  return {out};
}

const bool kRegistered = register_kernel("where", DeviceType::CUDA, where_cuda);

}  // namespace
}  // namespace mixtape::cuda
