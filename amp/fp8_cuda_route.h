// amp/fp8_cuda_route.h — how Fp8Autocast and Fp8Metas reach the CUDA backend (amp/cuda/
// fp8_autocast_cuda.cpp) without the amp layer's CPU files depending on CUDA: the backend
// registers its functions when libmixtape_amp loads in a CUDA build; a CPU-only build has none,
// and every entry point here then refuses with the caller's name.
// Invariant: the hooks are set once, at load time, before any region can open.
#pragma once
#include "amp/fp8_autocast.h"
#include "ops/conv_args.h"

namespace mixtape::amp::detail {

enum class Fp8GemmOp { Linear, Matmul, Conv2d };

// One linear / 2-D matmul / conv2d call inside a CUDA Fp8Autocast region, its shapes checked by
// fp8_dispatch (amp/fp8_ops.cpp): linear x (*, K), w (N, K), bias (N) or undefined; matmul x
// (M, K), w (K, N); conv2d x (N, C, H, W), w (O, C, kH, kW), bias (O) or undefined, groups 1.
struct Fp8CudaCall {
  Fp8GemmOp op;
  Tensor x, w, bias;
  ConvGeom geom{};  // conv2d only
  const Fp8RegionSettings* region = nullptr;
};

struct Fp8CudaBackend {
  TensorList (*gemm)(const Fp8CudaCall& call) = nullptr;
  // Fp8Metas::update_scales for one meta on a CUDA device (amp/cuda/fp8_delayed_scaling.h).
  void (*update)(Fp8Meta& meta, const DelayedScaling& recipe) = nullptr;
};
bool register_fp8_cuda_backend(Fp8CudaBackend backend);
// The registered backend; throws, naming `who`, in a build without CUDA.
const Fp8CudaBackend& fp8_cuda_backend(const char* who);

}  // namespace mixtape::amp::detail
