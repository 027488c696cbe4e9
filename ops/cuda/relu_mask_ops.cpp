// ops/cuda/relu_mask_ops.cpp — relu and relu_mask_grad on CUDA: relu is the pointwise kernel of
// fn::Relu followed by its bit mask (ops/relu_mask.h) when the call keeps one; relu_mask_grad
// applies the mask. Checks and messages are the CPU's (ops/relu_mask.cpp).
#include "ops/activation_functors.h"
#include "ops/cuda/relu_mask_kernels.h"
#include "ops/cuda/tensor_iter.h"
#include "ops/pointwise_op.h"
#include "ops/relu_mask.h"

namespace mixtape::cuda {
namespace {

TensorList relu_cuda(const OpCall& c) {
  const Tensor out = pointwise_detail::unary_cuda<fn::Relu, FunctorParams<fn::Relu>{nullptr}>(c)[0];
  if (!relu_wants_mask(c.attrs)) return {out, Tensor()};
  DeviceGuard guard(out.device().index());
  const Tensor oc = dense(out, c.name());
  Tensor mask = empty_on({relu_mask_bytes(out.numel())}, DType::UInt8, out.device());
  MT_CUDA_CHECK(launch_relu_mask(out.dtype(), oc.data_ptr(), out.numel(), static_cast<uint8_t*>(mask.data_ptr()),
                                 current_stream()),
                c.name());
  return {out, mask};
}

TensorList relu_mask_grad_cuda(const OpCall& c) {
  const Tensor& g = c.inputs[0];
  const Tensor& mask = c.inputs[1];
  check_relu_mask_grad(c.name(), g, mask);
  DeviceGuard guard(g.device().index());
  const Tensor gc = dense(g, c.name()), mc = dense(mask, c.name());
  Tensor out = empty_on(g.sizes(), g.dtype(), g.device());
  MT_CUDA_CHECK(launch_relu_mask_grad(g.dtype(), gc.data_ptr(), static_cast<const uint8_t*>(mc.data_ptr()), g.numel(),
                                      out.data_ptr(), current_stream()),
                c.name());
  return {out};
}

const bool kRegistered = [] {
  register_kernel("relu", DeviceType::CUDA, relu_cuda);
  register_kernel("relu_mask_grad", DeviceType::CUDA, relu_mask_grad_cuda);
  return true;
}();

}  // namespace
}  // namespace mixtape::cuda
