// amp/cuda/fp8_delayed_scaling.cu — the delayed-scaling update and current scaling's scale on
// the device (see fp8_delayed_scaling_kernels.h): one thread per role, the CPU loop's operations in its order, so
// the history, scale and scale_inv equal the CPU's bit for bit and no value visits the host.
#include "amp/cuda/fp8_delayed_scaling_kernels.h"
#include "amp/fp8_scale_rule.h"
#include "core/cuda/launch.cuh"

namespace mixtape::amp::cuda {
namespace {

__global__ void delayed_update_kernel(float* h, float* s, float* si, int64_t len, bool amax_max, ScaledMax scaled_max,
                                      bool power_of_2) {
  const int role = static_cast<int>(threadIdx.x);
  if (role >= 3) return;
  const float newest = h[role];
  float amax = newest;
  if (amax_max)
    for (int64_t i = 1; i < len; ++i) amax = fmaxf(amax, h[i * 3 + role]);  // NaN ignored, inf kept
  for (int64_t i = 1; i + 1 < len; ++i) h[i * 3 + role] = h[(i + 1) * 3 + role];
  if (len > 1) h[(len - 1) * 3 + role] = newest;
  h[role] = 0.0f;
  s[role] = fp8_scale_from_scaled_max(amax, scaled_max.v[role], power_of_2, s[role]);
  si[role] = 1.0f / s[role];
}

// Current scaling: one scale from one amax, fallback 1 (amp::scale_from_amax with margin 0).
__global__ void current_scale_kernel(const float* amax, float scaled_max, bool power_of_2, float* scale,
                                     float* scale_inv) {
  if (threadIdx.x != 0) return;
  const float s = fp8_scale_from_scaled_max(*amax, scaled_max, power_of_2, 1.0f);
  *scale = s;
  *scale_inv = 1.0f / s;
}

}  // namespace

cudaError_t launch_fp8_current_scale(const float* amax, float scaled_max, bool power_of_2, float* scale,
                                     float* scale_inv, cudaStream_t s) {
  return ::mixtape::cuda::launch_kernel(current_scale_kernel, 1, 32, 0, s, amax, scaled_max, power_of_2, scale,
                                        scale_inv);
}

cudaError_t launch_fp8_delayed_update(float* history, float* scale, float* scale_inv, int64_t len, bool amax_max,
                                      ScaledMax scaled_max, bool power_of_2, cudaStream_t s) {
  return ::mixtape::cuda::launch_kernel(delayed_update_kernel, 1, 32, 0, s, history, scale, scale_inv, len, amax_max,
                                        scaled_max, power_of_2);
}

}  // namespace mixtape::amp::cuda
