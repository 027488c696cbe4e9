// amp/cuda/scaler_ops.cpp — CUDA kernels of the GradScaler ops _amp_foreach_non_finite_check_and_unscale_
// and _amp_update_scale_ (operand layout as amp/scaler_kernels.cpp, checks shared with it through
// amp/scaler_args.h; device side in
// scaler_kernels.cu). found_inf, inv_scale, scale and growth_tracker stay on the device.
#include <vector>

#include "amp/cuda/scaler_kernels.h"
#include "amp/scaler_args.h"
#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/dispatcher.h"

namespace mixtape::amp::cuda {
namespace {
using mixtape::cuda::current_stream;
using mixtape::cuda::DeviceGuard;

void check_on(const OpCall& c, const Tensor& t, Device dev, const char* what) {
  MT_CHECK(t.device() == dev, c.name(), ": ", what, " must be on ", dev, " with the gradients, got ", t.device());
}

// inputs: found_inf, inv_scale, grads...; attr unscale_count.
TensorList unscale_cuda(const OpCall& c) {
  check_unscale_operands(c);
  const Tensor& found_inf = c.inputs[0];
  const Tensor& inv_scale = c.inputs[1];
  const Device dev = found_inf.device();
  check_on(c, inv_scale, dev, "inv_scale");
  const size_t unscale_count = static_cast<size_t>(c.attrs.get<int64_t>("unscale_count"));
  std::vector<GradSpan> spans;
  for (size_t i = 2; i < c.inputs.size(); ++i) {
    const Tensor& g = c.inputs[i];
    check_unscale_grad(c, i);
    if (!g.defined()) continue;
    check_on(c, g, dev, "every gradient");
    spans.push_back({g.data_ptr(), g.numel(), g.dtype(), i - 2 < unscale_count});
  }
  DeviceGuard guard(dev.index());
  MT_CUDA_CHECK(launch_unscale_and_check(spans.data(), static_cast<int>(spans.size()),
                                         static_cast<float*>(found_inf.data_ptr()),
                                         static_cast<const float*>(inv_scale.data_ptr()), current_stream()),
                c.name());
  return {found_inf};
}

// inputs: scale, growth_tracker, found_inf; attrs growth_factor, backoff_factor, growth_interval.
TensorList update_scale_cuda(const OpCall& c) {
  check_update_scale_operands(c);
  const Tensor& scale = c.inputs[0];
  const Tensor& tracker = c.inputs[1];
  const Tensor& found_inf = c.inputs[2];
  check_on(c, tracker, scale.device(), "growth_tracker");
  check_on(c, found_inf, scale.device(), "found_inf");
  DeviceGuard guard(scale.device().index());
  MT_CUDA_CHECK(launch_update_scale(static_cast<float*>(scale.data_ptr()), static_cast<int32_t*>(tracker.data_ptr()),
                                    static_cast<const float*>(found_inf.data_ptr()),
                                    c.attrs.get<double>("growth_factor"), c.attrs.get<double>("backoff_factor"),
                                    static_cast<int32_t>(c.attrs.get<int64_t>("growth_interval")), current_stream()),
                c.name());
  return {scale};
}

const bool kRegistered = [] {
  register_kernel("_amp_foreach_non_finite_check_and_unscale_", DeviceType::CUDA, unscale_cuda);
  register_kernel("_amp_update_scale_", DeviceType::CUDA, update_scale_cuda);
  return true;
}();

}  // namespace
}  // namespace mixtape::amp::cuda
