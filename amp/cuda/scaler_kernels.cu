// amp/cuda/scaler_kernels.cu — the GradScaler's kernels on the device, from the same functors as
// the CPU kernels (amp/amp_functors.h): one multi-tensor launch unscales and checks every
// gradient (blockIdx.y picks the gradient, blocks stride over its elements), and the scale update
// runs on the device, so nothing waits for the host until the optimizer step reads found_inf.
// Bit-identical to the CPU: the same IEEE operations per element (one multiply) in the same type.
#include "amp/amp_functors.h"
#include "amp/cuda/scaler_kernels.h"
#include "core/cuda/launch.cuh"

namespace mixtape::amp::cuda {
using ::mixtape::cuda::launch_kernel;
namespace {

struct SpanBatch {
  GradSpan spans[kMaxSpansPerLaunch];
};

template <typename T, typename A>
__device__ bool unscale_span(T* p, int64_t n, bool write, A inv) {
  const fn::UnscaleAndCheck<A> f{inv};
  bool found = false;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    const A out = f(static_cast<A>(p[i]), found);
    if (write) p[i] = static_cast<T>(out);
  }
  return found;
}

__global__ void unscale_and_check_kernel(SpanBatch batch, float* found_inf, const float* inv_scale) {
  const GradSpan& s = batch.spans[blockIdx.y];
  const float inv = *inv_scale;
  bool found = false;
  switch (s.dtype) {
    case DType::Float32: found = unscale_span<float, float>(static_cast<float*>(s.data), s.n, s.write, inv); break;
    case DType::Float64:
      found = unscale_span<double, double>(static_cast<double*>(s.data), s.n, s.write, static_cast<double>(inv));
      break;
    case DType::Float16: found = unscale_span<Half, float>(static_cast<Half*>(s.data), s.n, s.write, inv); break;
    case DType::BFloat16:
      found = unscale_span<BFloat16, float>(static_cast<BFloat16*>(s.data), s.n, s.write, inv);
      break;
    default: break;
  }
  if (found) *found_inf = 1.0f;  // every writer stores the same value: no atomic needed
}

__global__ void update_scale_kernel(float* scale, int32_t* tracker, const float* found_inf, double growth,
                                    double backoff, int32_t interval) {
  fn::update_scale(*scale, *tracker, *found_inf, growth, backoff, interval);
}

}  // namespace

cudaError_t launch_unscale_and_check(const GradSpan* spans, int count, float* found_inf, const float* inv_scale,
                                     cudaStream_t s) {
  for (int base = 0; base < count; base += kMaxSpansPerLaunch) {
    SpanBatch batch{};
    const int m = count - base < kMaxSpansPerLaunch ? count - base : kMaxSpansPerLaunch;
    int64_t longest = 0;
    for (int i = 0; i < m; ++i) {
      batch.spans[i] = spans[base + i];
      if (batch.spans[i].n > longest) longest = batch.spans[i].n;
    }
    if (longest == 0) continue;
    constexpr int kThreads = 256;
    int64_t bx = (longest + kThreads * 4 - 1) / (kThreads * 4);  // ~4 elements per thread on the longest
    if (bx > 1024) bx = 1024;
    if (const cudaError_t e =
            launch_kernel(unscale_and_check_kernel, dim3(static_cast<unsigned>(bx), static_cast<unsigned>(m)), kThreads,
                          0, s, batch, found_inf, inv_scale);
        e != cudaSuccess)
      return e;
  }
  return cudaSuccess;
}

cudaError_t launch_update_scale(float* scale, int32_t* growth_tracker, const float* found_inf, double growth_factor,
                                double backoff_factor, int32_t growth_interval, cudaStream_t s) {
  return launch_kernel(update_scale_kernel, 1, 1, 0, s, scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                       growth_interval);
}

}  // namespace mixtape::amp::cuda
