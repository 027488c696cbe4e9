// tests/core/test_cuda_api.cpp — what CUDA looks like from CPU code, in every build and on every
// machine: the answers of core/cuda_api.h agree with each other and with the build, and asking
// for a GPU that is not there is a named error, never a crash. On a machine with a GPU the
// "unavailable" cases skip (tests/cuda_runtime/ covers that side).
#include <gtest/gtest.h>

#include <string>

#include "core/allocator.h"
#include "core/cuda_api.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/cast.h"
#include "ops/creation.h"
#include "ops/pointwise.h"

namespace mixtape {
namespace {

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CudaApi, BuiltWithCudaMatchesTheBuild) {
#if defined(MIXTAPE_WITH_CUDA)
  EXPECT_TRUE(cuda::built_with_cuda());
#else
  EXPECT_FALSE(cuda::built_with_cuda());
  EXPECT_EQ(cuda::unavailable_reason(), "built without CUDA");
  EXPECT_FALSE(cuda::is_available());
#endif
}

TEST(CudaApi, AvailabilityAnswersAgree) {
  bool available = cuda::is_available();
  EXPECT_EQ(available, cuda::device_count() > 0);
  EXPECT_EQ(available, cuda::unavailable_reason().empty()) << cuda::unavailable_reason();
  if (!available) {
    std::string r = cuda::unavailable_reason();
    bool known = r == "built without CUDA" || r == "no CUDA device" || r.rfind("no CUDA driver (", 0) == 0;
    EXPECT_TRUE(known) << "unexpected reason: " << r;
    EXPECT_EQ(cuda::device_count(), 0);
  }
  // Asking twice gives the same answers (probed once).
  EXPECT_EQ(cuda::device_count(), cuda::device_count());
}

TEST(CudaApi, WithoutAGpuEverythingIsAQuietNoOpOrANamedError) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is available; tests/cuda_runtime covers it";
  cuda::synchronize();
  cuda::empty_cache();
  AllocatorStats s = cuda::memory_stats(0);
  EXPECT_EQ(s.reserved_bytes, 0);
  std::string m = message_of([] { cuda::check_available("conv2d"); });
  EXPECT_EQ(m, "conv2d: CUDA is not available: " + cuda::unavailable_reason());
  m = message_of([] { cuda::check_device(0, "matmul"); });
  EXPECT_EQ(m, "matmul: CUDA is not available: " + cuda::unavailable_reason());
}

TEST(CudaApi, CopyToCudaWithoutAGpuNamesTheReason) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is available; tests/cuda_runtime covers it";
  Tensor x = ones({2, 3});
  std::string m = message_of([&] { (void)x.to(Device::CUDA()); });
  EXPECT_EQ(m, "to_device: cannot copy to cuda:0: " + cuda::unavailable_reason());
  m = message_of([&] { (void)x.to(Device::CUDA(3)); });
  EXPECT_EQ(m, "to_device: cannot copy to cuda:3: " + cuda::unavailable_reason());
}

TEST(CudaApi, CudaTensorWithoutAGpuNamesTheReason) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is available; tests/cuda_runtime covers it";
  std::string m = message_of([] { (void)Tensor::empty({4}, TensorOptions(DType::Float32).with_device(Device::CUDA())); });
  EXPECT_NE(m.find(cuda::unavailable_reason()), std::string::npos) << m;
  EXPECT_NE(m, "(no error)");
}

TEST(CudaApi, CpuToCpuCopyStillWorks) {
  Tensor x = arange(6, DType::Float32).view({2, 3}).t();
  Tensor y = x.to(Device::CPU());
  EXPECT_TRUE(y.is_same(x)) << "already on the CPU: no copy";
  EXPECT_EQ(memory_stats(Device::CPU()).current_bytes >= 0, true);
}

TEST(CudaApi, MixedDeviceInputsNameTheOpAndBothDevices) {
  // A fake "CUDA" tensor over host bytes is enough: the device check runs before any kernel.
  static float bytes[4] = {1, 2, 3, 4};
  Tensor a = ones({4});
  Tensor b = from_blob(bytes, {4}, DType::Float32, {}, Device::CUDA(0));
  std::string m = message_of([&] { (void)add(a, b); });
  EXPECT_NE(m.find("add"), std::string::npos) << m;
  EXPECT_NE(m.find("expected all tensors on the same device, got cpu (input 0) and cuda:0 (input 1)"),
            std::string::npos)
      << m;
}

}  // namespace
}  // namespace mixtape
