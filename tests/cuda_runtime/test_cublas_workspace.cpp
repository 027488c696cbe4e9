// tests/cuda_runtime/test_cublas_workspace.cpp — cuBLAS runs with a workspace of mixtape's per
// (device, stream) (core/cuda/handles.h): set after every cublasSetStream (which resets it), made
// once per stream and never during a capture, kept while a graph that captured GEMMs with it
// lives, given back with the stream. Observed on the emulator, whose cuBLAS reports the workspace
// each GEMM was issued with (tests/cuda_emulator/cublas.cpp models cublasSetWorkspace).
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/cuda_api.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/cast.h"
#include "ops/creation.h"
#include "ops/matmul.h"
#include "ops/pointwise.h"
#include "require_gpu.h"

#if defined(MIXTAPE_CUDA_EMULATOR)
#include "core/cuda/graph.h"
#include "core/cuda/handles.h"
#include "core/cuda/stream.h"
#include "tests/cuda_emulator/emulator.h"
#endif

namespace mixtape {
namespace {

#if defined(MIXTAPE_CUDA_EMULATOR)
using cuda_emulator::cublas_last_workspace;

Tensor gpu_ones(int64_t n) { return ones({n, n}, TensorOptions().with_device(Device::CUDA(0))); }
int64_t in_use() { return cuda::memory_stats(0).current_bytes; }

TEST(CublasWorkspace, OnePerStreamSetAfterEverySetStream) {
  REQUIRE_GPU();
  const Tensor a = gpu_ones(4);
  const int64_t ws = static_cast<int64_t>(cuda::cublas_stream_workspace_bytes(0));
  EXPECT_EQ(ws, int64_t(4) << 20) << "the emulator reports compute capability 8.0";
  (void)matmul(a, a);  // the legacy stream's workspace
  const void* on_legacy = cublas_last_workspace();
  ASSERT_NE(on_legacy, nullptr) << "cuBLAS's default workspace pool was used";
  const void *on_a = nullptr, *on_b = nullptr;
  cuda::OwnedStream sa;
  {
    auto b = std::make_unique<cuda::OwnedStream>();
    {
      cuda::StreamGuard on(sa.get());
      (void)matmul(a, a);
      on_a = cublas_last_workspace();
    }
    const int64_t before_b = in_use();
    {
      cuda::StreamGuard on(b->get());
      (void)matmul(a, a);
      on_b = cublas_last_workspace();
      EXPECT_EQ(in_use() - before_b, ws) << "B's workspace made at its first GEMM";
    }
    EXPECT_NE(on_a, nullptr);
    EXPECT_NE(on_a, on_legacy);
    EXPECT_NE(on_b, on_a);
    const int64_t before = in_use();
    {
      cuda::StreamGuard on(sa.get());
      (void)matmul(a, a);
      EXPECT_EQ(cublas_last_workspace(), on_a) << "A's again, set after the handle's cublasSetStream";
    }
    (void)matmul(a, a);
    EXPECT_EQ(cublas_last_workspace(), on_legacy);
    EXPECT_EQ(in_use(), before) << "no workspace made twice";
    b.reset();  // OwnedStream gives its workspace back
    EXPECT_EQ(before - in_use(), ws);
  }
  cuda::StreamGuard on(sa.get());
  EXPECT_EQ((matmul(a, a).sum()).to(Device::CPU()).item<float>(), 64.0f);
}

// The capture stream's workspace is made by capture_begin() (outside the capture and its pool),
// the captured GEMM replays with it, and reset() gives it back.
TEST(CublasWorkspace, AGraphsGemmsKeepTheCaptureStreamsWorkspaceUntilReset) {
  REQUIRE_GPU();
  const Tensor a = gpu_ones(4);
  (void)matmul(a, a);  // warm-up on the current stream
  (void)cuda::cublas_workspace(nullptr);  // the thread's cuBLASLt workspace, which capture_begin() makes once
  const void* eager = cublas_last_workspace();
  Tensor x = zeros({4, 4}, TensorOptions().with_device(Device::CUDA(0)));
  const int64_t before = in_use();
  const int64_t ws = static_cast<int64_t>(cuda::cublas_stream_workspace_bytes(0));
  {
    cuda::Graph g;
    g.capture_begin();
    Tensor y = matmul(x + 1.0, a);
    const void* captured = cublas_last_workspace();
    g.capture_end();
    EXPECT_NE(captured, nullptr);
    EXPECT_NE(captured, eager);
    g.replay();
    g.replay();
    EXPECT_EQ(y.sum().to(Device::CPU()).item<float>(), 64.0f);
    EXPECT_GE(in_use() - before, ws) << "the capture stream's workspace is held while the graph lives";
  }
  EXPECT_EQ(in_use(), before) << "reset() gave back the workspace (and the pool's blocks)";
}

TEST(CublasWorkspace, AStreamsFirstCublasCallDuringCaptureIsRefused) {
  REQUIRE_GPU();
  cuda::OwnedStream fresh;  // no cuBLAS call on it yet
  cuda::Graph g;
  g.capture_begin();
  std::string msg;
  try {
    cuda::StreamGuard on(fresh.get());
    (void)cuda::cublas_handle();
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("cuda::cublas_handle: allocates the cuBLAS workspace of a stream that has not made a cuBLAS "
                     "call yet"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("during CUDA graph capture"), std::string::npos) << msg;
  EXPECT_THROW(g.capture_end(), Error);
  EXPECT_FALSE(cuda::is_capturing());
}
#endif

}  // namespace
}  // namespace mixtape
