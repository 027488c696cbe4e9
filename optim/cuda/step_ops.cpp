// optim/cuda/step_ops.cpp — CUDA kernels of the optimizer ops sgd_step_, adam_step_ (fused steps:
// FP32 masters, 16-bit write-back), their multi-tensor forms sgd_step_multi_, adam_step_multi_
// (every tensor of the call in one launch, or a few: step_kernels.h) and norm_pow_sum, with the
// CPU ops' operand checks (optim/step_kernel.cpp's fused_operands / fused_operands_multi,
// clip_grad.cpp) and attributes; device side in step_kernels.cu.
#include <memory>
#include <vector>

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

FusedStepArgs fused_args(const detail::FusedOperands& o, size_t num_state) {
  FusedStepArgs a;
  a.n = o.n;
  a.w = o.w.data_ptr();
  a.w_dtype = o.w.dtype();
  a.grad = o.grad.data_ptr();
  a.grad_dtype = o.grad.dtype();
  if (o.model.defined()) {
    a.model = o.model.data_ptr();
    a.model_dtype = o.model.dtype();
  }
  for (size_t k = 0; k < num_state; ++k) a.state[k] = o.state[k].data_ptr();
  a.inv_scale = o.inv_scale;
  a.stochastic = o.stochastic;
  a.seed = o.seed;
  a.offset = o.offset;
  return a;
}
std::vector<FusedStepArgs> fused_args(const std::vector<detail::FusedOperands>& ops, size_t num_state) {
  std::vector<FusedStepArgs> out;
  out.reserve(ops.size());
  for (const detail::FusedOperands& o : ops) out.push_back(fused_args(o, num_state));
  return out;
}
// A capturable call's device scalars (optim/step_kernel.h) into every tensor's arguments.
void add_device_scalars(const OpCall& c, std::vector<FusedStepArgs>& a) {
  if (!detail::capturable(c)) return;
  const detail::DeviceScalars d = detail::device_scalars(c, detail::list_inputs(c, a.size()), a.size());
  for (size_t k = 0; k < a.size(); ++k) {
    a[k].found_inf = d.found_inf;
    a[k].inv_scale_ptr = d.inv_scale;
    a[k].lr = d.lr;
    a[k].step = d.step[k];
  }
}

TensorList sgd_step_cuda(const OpCall& c) {
  const double momentum = c.attrs.get<double>("momentum");
  const size_t num_state = detail::list_inputs(c, 1) > 3 ? 1 : 0;
  MT_CHECK((momentum != 0.0) == (num_state == 1), c.name(), ": momentum ", momentum,
           num_state ? " needs no buffer" : " needs a momentum buffer (input 3)");
  std::vector<FusedStepArgs> args{fused_args(detail::fused_operands(c, num_state), num_state)};
  add_device_scalars(c, args);
  const FusedStepArgs& a = args[0];
  const SGDParams p{c.attrs.get<double>("lr"), momentum, c.attrs.get<double>("dampening"),
                    c.attrs.get<double>("weight_decay"), c.attrs.get<bool>("nesterov"), c.attrs.get<bool>("first")};
  DeviceGuard guard(c.inputs[0].device().index());
  MT_CUDA_CHECK(launch_sgd_step(a, p, current_stream()), c.name());
  return {c.inputs[0]};
}

TensorList adam_step_cuda(const OpCall& c) {
  const bool amsgrad = c.attrs.get<bool>("amsgrad");
  MT_CHECK(detail::capturable(c) || c.attrs.get<int64_t>("step") >= 1, c.name(), ": step must be >= 1, got ",
           c.attrs.get<int64_t>("step"));
  const size_t num_state = amsgrad ? 3 : 2;
  std::vector<FusedStepArgs> args{fused_args(detail::fused_operands(c, num_state), num_state)};
  add_device_scalars(c, args);
  const FusedStepArgs& a = args[0];
  const AdamParams p{c.attrs.get<double>("lr"),  c.attrs.get<double>("beta1"),        c.attrs.get<double>("beta2"),
                     c.attrs.get<double>("eps"), c.attrs.get<double>("weight_decay"), amsgrad,
                     c.attrs.get<bool>("decoupled"), c.attrs.get<int64_t>("step")};
  DeviceGuard guard(c.inputs[0].device().index());
  MT_CUDA_CHECK(launch_adam_step(a, p, current_stream()), c.name());
  return {c.inputs[0]};
}

TensorList sgd_step_multi_cuda(const OpCall& c) {
  const double momentum = c.attrs.get<double>("momentum");
  const size_t num_state = momentum != 0.0 ? 1 : 0;  // a momentum buffer list
  const std::vector<detail::FusedOperands> ops = detail::fused_operands_multi(c, num_state);
  const IntList first_attr =
      detail::capturable(c) ? IntList(ops.size(), 0) : detail::per_tensor_attr(c, "first", ops.size());
  std::vector<FusedStepArgs> a = fused_args(ops, num_state);
  add_device_scalars(c, a);
  const std::unique_ptr<bool[]> first(new bool[ops.size()]);
  for (size_t k = 0; k < ops.size(); ++k) first[k] = first_attr[k] != 0;
  const SGDParams p{c.attrs.get<double>("lr"), momentum, c.attrs.get<double>("dampening"),
                    c.attrs.get<double>("weight_decay"), c.attrs.get<bool>("nesterov"), false};
  DeviceGuard guard(c.inputs[0].device().index());
  MT_CUDA_CHECK(launch_sgd_step_multi(a.data(), first.get(), static_cast<int>(a.size()), p, current_stream()),
                c.name());
  return {c.inputs[0]};
}

TensorList adam_step_multi_cuda(const OpCall& c) {
  const bool amsgrad = c.attrs.get<bool>("amsgrad");
  const size_t num_state = amsgrad ? 3 : 2;
  const std::vector<detail::FusedOperands> ops = detail::fused_operands_multi(c, num_state);
  const IntList steps =
      detail::capturable(c) ? IntList(ops.size(), 1) : detail::per_tensor_attr(c, "step", ops.size());
  for (size_t k = 0; k < ops.size(); ++k)
    MT_CHECK(steps[k] >= 1, c.name(), ": step must be >= 1, got ", steps[k], " (tensor ", k, ")");
  std::vector<FusedStepArgs> a = fused_args(ops, num_state);
  add_device_scalars(c, a);
  const std::vector<int64_t> step(steps.begin(), steps.end());
  const AdamParams p{c.attrs.get<double>("lr"),  c.attrs.get<double>("beta1"),        c.attrs.get<double>("beta2"),
                     c.attrs.get<double>("eps"), c.attrs.get<double>("weight_decay"), amsgrad,
                     c.attrs.get<bool>("decoupled"), 1};
  DeviceGuard guard(c.inputs[0].device().index());
  MT_CUDA_CHECK(launch_adam_step_multi(a.data(), step.data(), static_cast<int>(a.size()), p, current_stream()),
                c.name());
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
  register_kernel("sgd_step_multi_", DeviceType::CUDA, sgd_step_multi_cuda);
  register_kernel("adam_step_multi_", DeviceType::CUDA, adam_step_multi_cuda);
  register_kernel("norm_pow_sum", DeviceType::CUDA, norm_pow_sum_cuda);
  return true;
}();

}  // namespace
}  // namespace mixtape::optim::cuda
