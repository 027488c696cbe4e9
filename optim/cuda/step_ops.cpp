// optim/cuda/step_ops.cpp — CUDA kernels of the optimizer ops sgd_step_, adam_step_ (fused steps:
// FP32 masters, 16-bit write-back) and norm_pow_sum, with the CPU ops' operand checks
// (optim/step_kernel.cpp's check_fused_step, clip_grad.cpp)
// and attributes; device side in step_kernels.cu.
#include "core/cuda/check.h"
#include "core/cuda/scratch.h"
#include "core/cuda/stream.h"
#include "ops/cast.h"
#include "optim/cuda/step_kernels.h"
#include "optim/step_kernel.h"

namespace mixtape::optim::cuda {
namespace {
using mixtape::cuda::current_stream;
using mixtape::cuda::DeviceGuard;

FusedStepArgs fused_args(const OpCall& c, size_t num_state) {
  FusedStepArgs a;
  a.n = detail::check_fused_step(c, num_state);
  const Tensor& w = c.inputs[0];
  const Tensor& grad = c.inputs[1];
  const Tensor& model = c.inputs[2];
  a.w = w.data_ptr();
  a.w_dtype = w.dtype();
  a.grad = grad.data_ptr();
  a.grad_dtype = grad.dtype();
  if (model.defined()) {
    a.model = model.data_ptr();
    a.model_dtype = model.dtype();
  }
  for (size_t k = 0; k < num_state; ++k) a.state[k] = c.inputs[3 + k].data_ptr();
  a.inv_scale = static_cast<float>(c.attrs.get<double>("inv_scale"));
  a.stochastic = c.attrs.get_or<bool>("stochastic", false);
  a.seed = static_cast<uint64_t>(c.attrs.get_or<int64_t>("seed", 0));
  a.offset = static_cast<uint64_t>(c.attrs.get_or<int64_t>("offset", 0));
  return a;
}

TensorList sgd_step_cuda(const OpCall& c) {
  const double momentum = c.attrs.get<double>("momentum");
  const size_t num_state = c.inputs.size() > 3 ? 1 : 0;
  MT_CHECK((momentum != 0.0) == (num_state == 1), c.name(), ": momentum ", momentum,
           num_state ? " needs no buffer" : " needs a momentum buffer (input 3)");
  const FusedStepArgs a = fused_args(c, num_state);
  const SGDParams p{c.attrs.get<double>("lr"), momentum, c.attrs.get<double>("dampening"),
                    c.attrs.get<double>("weight_decay"), c.attrs.get<bool>("nesterov"), c.attrs.get<bool>("first")};
  DeviceGuard guard(c.inputs[0].device().index());
  MT_CUDA_CHECK(launch_sgd_step(a, p, current_stream()), c.name());
  return {c.inputs[0]};
}

TensorList adam_step_cuda(const OpCall& c) {
  const bool amsgrad = c.attrs.get<bool>("amsgrad");
  MT_CHECK(c.attrs.get<int64_t>("step") >= 1, c.name(), ": step must be >= 1, got ", c.attrs.get<int64_t>("step"));
  const FusedStepArgs a = fused_args(c, amsgrad ? 3 : 2);
  const AdamParams p{c.attrs.get<double>("lr"),  c.attrs.get<double>("beta1"),        c.attrs.get<double>("beta2"),
                     c.attrs.get<double>("eps"), c.attrs.get<double>("weight_decay"), amsgrad,
                     c.attrs.get<bool>("decoupled"), c.attrs.get<int64_t>("step")};
  DeviceGuard guard(c.inputs[0].device().index());
  MT_CUDA_CHECK(launch_adam_step(a, p, current_stream()), c.name());
  return {c.inputs[0]};
}

// norm_pow_sum(x; p) -> f64 0-d on x's device.
TensorList norm_pow_sum_cuda(const OpCall& c) {
  const Tensor& in = c.inputs[0];
  MT_CHECK(is_floating(in.dtype()), c.name(), ": expected a floating tensor, got ", in.describe());
  const Tensor x = contiguous(in);
  DeviceGuard guard(x.device().index());
  Tensor out = Tensor::empty({}, TensorOptions(DType::Float64).with_device(x.device()));
  mixtape::cuda::Scratch partials(sizeof(double) * static_cast<size_t>(norm_partials_needed()));
  MT_CUDA_CHECK(launch_norm_pow_sum(x.data_ptr(), x.dtype(), x.numel(), c.attrs.get<double>("p"),
                                    partials.data_as<double>(), static_cast<double*>(out.data_ptr()), current_stream()),
                c.name());
  return {out};
}

const bool kRegistered = [] {
  register_kernel("sgd_step_", DeviceType::CUDA, sgd_step_cuda);
  register_kernel("adam_step_", DeviceType::CUDA, adam_step_cuda);
  register_kernel("norm_pow_sum", DeviceType::CUDA, norm_pow_sum_cuda);
  return true;
}();

}  // namespace
}  // namespace mixtape::optim::cuda
