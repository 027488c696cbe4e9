// amp/cuda/fp8_delayed_scaling_kernels.h — the device side of the per-tensor scale rule
// (amp/fp8_scale_rule.h): the delayed-scaling update and current scaling's scale
// (amp/cuda/fp8_delayed_scaling.cu; glue in amp/cuda/fp8_delayed_scaling.cpp and
// amp/cuda/fp8_autocast_cuda.cpp): plain pointers, C++17, no Tensor.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace mixtape::amp::cuda {

// One Fp8Meta's update, as Fp8Metas::update_scales does it on the CPU: for each of the 3 roles,
// amax = max over the history's `len` rows (amax_max) or row 0, the column rolls (row i takes row
// i + 1, the last row takes row 0, row 0 becomes 0), scale = fp8_scale_from_scaled_max(amax,
// scaled_max[role], power_of_2, old scale) and scale_inv = 1 / scale. history: f32 (len, 3)
// row-major; scale, scale_inv: f32 (3); all on the device, read and written there.
struct ScaledMax {
  float v[3];
};
cudaError_t launch_fp8_delayed_update(float* history, float* scale, float* scale_inv, int64_t len, bool amax_max,
                                      ScaledMax scaled_max, bool power_of_2, cudaStream_t s);

// Current scaling (amp::scale_from_amax(amax, fp8_max, 0, power_of_2, 1)): *scale =
// fp8_scale_from_scaled_max(*amax, scaled_max, power_of_2, 1), *scale_inv = 1 / *scale; one
// element each, on the device.
cudaError_t launch_fp8_current_scale(const float* amax, float scaled_max, bool power_of_2, float* scale,
                                     float* scale_inv, cudaStream_t s);

}  // namespace mixtape::amp::cuda
