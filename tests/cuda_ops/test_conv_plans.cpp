// tests/cuda_ops/test_conv_plans.cpp — conv_cudnn.cpp's plans: a configuration's descriptors and
// algorithm are built once (a repeated call creates no descriptor), and benchmark mode
// (cuda::set_cudnn_benchmark) takes cuDNN's timed ranking, once per shape, within the same
// requirements (determinism). Observed through the CUDA emulator's cuDNN counters; results checked
// against the CPU.
#include "common/error_of.h"
#include "cuda_test_util.h"
#if defined(MIXTAPE_CUDA_EMULATOR)
#include <cudnn.h>
#endif

namespace mixtape {
namespace {
using namespace cuda_test;

#if defined(MIXTAPE_CUDA_EMULATOR)
namespace emu = cuda_emulator;

// conv2d forward and both gradients of a fresh f32 problem of the given spatial size (each test
// uses sizes no other test does, so no earlier plan exists), checked against the CPU.
void conv_step(int64_t H, int64_t W) {
  const Tensor x = randn({2, 3, H, W}), w = randn({4, 3, 3, 3}), b = randn({4});
  const Tensor y = conv2d(x, w, b, {1, 1}, {1, 1}, {1, 1}, 1);
  const Tensor gy = randn(y.sizes());
  const Tensor gx = conv2d_input_grad(gy, w, x.sizes(), {1, 1}, {1, 1}, {1, 1}, 1);
  const Tensor gw = conv2d_weight_grad(x, gy, w.sizes(), {1, 1}, {1, 1}, {1, 1}, 1);
  const Tensor cy = conv2d(on_cuda(x), on_cuda(w), on_cuda(b), {1, 1}, {1, 1}, {1, 1}, 1);
  const Tensor cgx = conv2d_input_grad(on_cuda(gy), on_cuda(w), x.sizes(), {1, 1}, {1, 1}, {1, 1}, 1);
  const Tensor cgw = conv2d_weight_grad(on_cuda(x), on_cuda(gy), w.sizes(), {1, 1}, {1, 1}, {1, 1}, 1);
  // K <= 27 products per value of magnitude O(1): f32 rounding, with room for the algorithm's order.
  EXPECT_TRUE(close(y, cy, 1e-4, 1e-4, "conv2d"));
  EXPECT_TRUE(close(gx, cgx, 1e-4, 1e-4, "conv2d_input_grad"));
  EXPECT_TRUE(close(gw, cgw, 1e-4, 1e-3, "conv2d_weight_grad"));
}
#endif

TEST(CudaConvPlans, ARepeatedConfigurationCreatesNoDescriptor) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "cuDNN's descriptors exist on the device side only";
#if !defined(MIXTAPE_CUDA_EMULATOR)
  GTEST_SKIP() << "needs the CUDA emulator's cuDNN counters";
#else
  conv_step(5, 11);
  const uint64_t after_first = emu::cudnn_descriptors_created();
  conv_step(5, 11);
  conv_step(5, 11);
  EXPECT_EQ(emu::cudnn_descriptors_created(), after_first) << "the same configuration built its descriptors again";
  conv_step(6, 11);  // a new shape: a new plan per direction
  EXPECT_GT(emu::cudnn_descriptors_created(), after_first);
#endif
}

TEST(CudaConvPlans, BenchmarkModeTakesTheTimedRankingOncePerShape) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "cuDNN's choices exist on the device side only";
#if !defined(MIXTAPE_CUDA_EMULATOR)
  GTEST_SKIP() << "needs the CUDA emulator's cuDNN counters";
#else
  struct Restore {
    ~Restore() {
      cuda::set_cudnn_benchmark(false);
      cuda::set_cudnn_deterministic(true);
    }
  } restore;
  ASSERT_FALSE(cuda::cudnn_benchmark()) << "benchmark mode is off by default";
  // Heuristics (the default): the emulator ranks its workspace ("GEMM-like") algorithms first.
  const uint64_t finds0 = emu::cudnn_find_calls();
  conv_step(7, 13);
  cuda::synchronize();
  EXPECT_EQ(emu::cudnn_find_calls(), finds0) << "no timing without benchmark mode";
  EXPECT_EQ(emu::cudnn_last_run(0).algo, CUDNN_CONVOLUTION_FWD_ALGO_GEMM);

  // Benchmark mode: the emulator's "timing" ranks the workspace-free algorithms first. Forward
  // takes IMPLICIT_GEMM; the backward ones stay on ALGO_1, because the faster ALGO_0 is not
  // deterministic. One Find per direction for a new shape; none when the shape repeats. The results
  // stay right although Find overwrote the output buffers (the emulator scribbles them).
  cuda::set_cudnn_benchmark(true);
  conv_step(7, 14);
  cuda::synchronize();
  EXPECT_EQ(emu::cudnn_find_calls(), finds0 + 3);
  EXPECT_EQ(emu::cudnn_last_run(0).algo, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
  EXPECT_EQ(emu::cudnn_last_run(1).algo, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
  EXPECT_EQ(emu::cudnn_last_run(2).algo, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
  conv_step(7, 14);
  cuda::synchronize();
  EXPECT_EQ(emu::cudnn_find_calls(), finds0 + 3) << "a repeated shape is timed again";

  // Without the determinism requirement the fastest runs everywhere.
  cuda::set_cudnn_deterministic(false);
  conv_step(7, 14);  // the setting is part of the plan's key: timed anew
  cuda::synchronize();
  EXPECT_EQ(emu::cudnn_find_calls(), finds0 + 6);
  EXPECT_EQ(emu::cudnn_last_run(1).algo, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0);
  EXPECT_EQ(emu::cudnn_last_run(2).algo, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0);
#endif
}

}  // namespace
}  // namespace mixtape
