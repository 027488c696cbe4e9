// amp/cuda/scaler_kernels.h — the device side of the GradScaler's two ops (amp/cuda/scaler_ops.cpp
// is the glue): plain pointers and dtypes, C++17, no Tensor.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace mixtape::amp::cuda {

// One gradient of a multi-tensor launch.
struct GradSpan {
  void* data;
  int64_t n;
  DType dtype;  // f16, bf16, f32, f64
  bool write;   // unscale in place (else only checked)
};
// Up to kMaxSpansPerLaunch gradients per kernel launch (the descriptors travel as a kernel
// parameter: no host->device copy, no sync). More gradients take more launches.
inline constexpr int kMaxSpansPerLaunch = 128;

// For every span: found_inf[0] = 1 if any element (or its unscaled value) is not finite; spans
// with write: g *= inv_scale[0] (amp/amp_functors.h fn::UnscaleAndCheck). inv_scale and
// found_inf are 1-element f32 device buffers, read and written on the device.
cudaError_t launch_unscale_and_check(const GradSpan* spans, int count, float* found_inf, const float* inv_scale,
                                     cudaStream_t s);
// fn::update_scale on the device, one thread: scale (f32), growth_tracker (i32), found_inf (f32).
cudaError_t launch_update_scale(float* scale, int32_t* growth_tracker, const float* found_inf, double growth_factor,
                                double backoff_factor, int32_t growth_interval, cudaStream_t s);

}  // namespace mixtape::amp::cuda
