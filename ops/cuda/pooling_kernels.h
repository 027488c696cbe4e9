// ops/cuda/pooling_kernels.h — launchers of ops/cuda/pooling.cu (plain data, C++17).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "ops/max_pool_taps.h"

namespace mixtape::cuda {

// ops/pool_geometry.h's PoolGeom: planes = N * C, each H x W in, OH x OW out; window k, stride s,
// padding p, dilation d per dim.
struct PoolGeom {
  int64_t planes, H, W, OH, OW;
  int64_t kH, kW, sH, sW, pH, pW, dH, dW;
};

// out (planes, OH, OW) of dtype dt, idx (planes, OH, OW) flat h*W+w (may be null), taps the
// winning tap codes of ops/max_pool_taps.h in format tf (may be null; not with idx).
cudaError_t launch_max_pool_forward(DType dt, const PoolGeom& g, const void* x, void* out, int64_t* idx, void* taps,
                                    TapFormat tf, cudaStream_t s);
// grad_in (planes, H, W) = sum over windows, in output order, of grad_out where the window's
// winner is this pixel: from flat indices (idx != null) or from tap codes (taps in format tf; a
// code that is no tap of its window inside the plane gives nothing).
cudaError_t launch_max_pool_backward(DType dt, const PoolGeom& g, const void* grad_out, const int64_t* idx,
                                     const void* taps, TapFormat tf, void* grad_in, cudaStream_t s);
// out (planes, OH, OW) = G (planes, H, W) at each window's winning tap, 0 where it has none (or
// its code is no tap of the window inside the plane).
cudaError_t launch_max_pool_tap_gather(DType dt, const PoolGeom& g, const void* G, const void* taps, TapFormat tf,
                                       void* out, cudaStream_t s);

// Mean pooling (avg_pool2d with count_include_pad, or adaptive_avg_pool2d when adaptive: windows
// [floor(o size / out), ceil((o + 1) size / out))): out = window sums / divisor in acc_t, rounded once.
cudaError_t launch_mean_pool(DType dt, const PoolGeom& g, bool adaptive, bool include_pad, const void* x, void* out,
                             cudaStream_t s);
// Its adjoint: grad_in[pixel] = sum over the windows holding it, in output order, of
// grad_out / divisor (the CPU's accumulation order).
cudaError_t launch_mean_unpool(DType dt, const PoolGeom& g, bool adaptive, bool include_pad, const void* grad_out,
                               void* grad_in, cudaStream_t s);

}  // namespace mixtape::cuda
