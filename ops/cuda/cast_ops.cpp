// ops/cuda/cast_ops.cpp — to_dtype and clone on CUDA: a fresh tensor written by the device copy
// kernel, with ops/cast.cpp's conversion rules.
#include "ops/cuda/tensor_iter.h"

namespace mixtape::cuda {
namespace {

TensorList to_dtype_cuda(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  DeviceGuard guard(x.device().index());
  Tensor out = empty_on(x.sizes(), call.attrs.get<DType>("dtype"), x.device());
  copy_into(out, x, call.name());
  return {out};
}
TensorList clone_cuda(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  DeviceGuard guard(x.device().index());
  Tensor out = empty_on(x.sizes(), x.dtype(), x.device());
  copy_into(out, x, call.name());
  return {out};
}

const bool kRegistered = [] {
  register_kernel("to_dtype", DeviceType::CUDA, to_dtype_cuda);
  register_kernel("clone", DeviceType::CUDA, clone_cuda);
  return true;
}();

}  // namespace
}  // namespace mixtape::cuda
