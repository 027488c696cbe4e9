// tests/cuda_emulator/test_launch_sites.cu — the emulator counts every submission of device work
// per site (kernel launches by kernel, library and runtime calls by name), and in launch-only mode
// (MIXTAPE_CUDA_EMULATOR_LAUNCH_ONLY=1) records that work without running it. The same tests run
// in both modes: in test_cuda_emulator's ordinary run the work runs, and ctest's
// cuda_emulator_launch_only runs them again with the mode on (tests/CMakeLists.txt), where the
// device memory keeps what it held. Built only in MIXTAPE_CUDA=EMULATOR builds.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/cuda/launch.cuh"
#include "tests/cuda_emulator/device_buffer.h"
#include "tests/cuda_emulator/emulator.h"

namespace {

namespace emu = mixtape::cuda_emulator;
using mixtape::cuda::launch_kernel;
using mixtape::cuda_emulator::testing::DeviceBuffer;

__global__ void store_seven_kernel(int32_t* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = 7;
}

uint64_t count_at(const std::vector<emu::LaunchSite>& sites, const std::string& name, bool kernel) {
  uint64_t n = 0;
  for (const auto& s : sites)
    if (s.site == name && s.kernel == kernel) n += s.count;
  return n;
}

// The device buffer's bytes, read with a plain device-to-host copy (which runs in both modes).
std::vector<int32_t> read(const int32_t* d, size_t n) {
  std::vector<int32_t> h(n, -1);
  EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(int32_t), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

TEST(LaunchSites, TheModeIsTheEnvironments) {
  const char* v = std::getenv("MIXTAPE_CUDA_EMULATOR_LAUNCH_ONLY");
  EXPECT_EQ(emu::launch_only(), v != nullptr && std::strcmp(v, "1") == 0);
  std::printf("launch-only mode: %s\n", emu::launch_only() ? "on" : "off");  // ctest's launch-only run looks for "on"
}

TEST(LaunchSites, KernelsCopiesAndMemsetsAreCountedPerSiteAndOnlyMemsetsRunInLaunchOnlyMode) {
  int32_t* d = nullptr;
  const int n = 300;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 2 * n * sizeof(int32_t)), cudaSuccess);  // fresh: zeros here
  const std::vector<int32_t> ones(n, 1);
  emu::reset_launch_sites();
  ASSERT_EQ(launch_kernel(store_seven_kernel, dim3(3), dim3(128), 0, nullptr, d, n), cudaSuccess);
  ASSERT_EQ(launch_kernel(store_seven_kernel, dim3(3), dim3(128), 0, nullptr, d, n), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d + n, ones.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d + n, 0, 4, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d + 2 * n - 1, 0x02, 1, nullptr), cudaSuccess);  // runs in both modes
  ASSERT_EQ(cudaMemcpyAsync(d + n + 1, d, 4, cudaMemcpyDeviceToDevice, nullptr), cudaSuccess);
  // A launch refused for its geometry submits nothing.
  EXPECT_EQ(launch_kernel(store_seven_kernel, dim3(1), dim3(2048), 0, nullptr, d, n), cudaErrorInvalidConfiguration);
  (void)cudaGetLastError();

  const std::vector<emu::LaunchSite> sites = emu::launch_sites();
  EXPECT_EQ(count_at(sites, "kernel(int32_t*, int)", true) + count_at(sites, "kernel(int*, int)", true), 2u);
  EXPECT_EQ(count_at(sites, "cudaMemcpyAsync host to device", false), 1u);
  EXPECT_EQ(count_at(sites, "cudaMemsetAsync", false), 2u);
  EXPECT_EQ(count_at(sites, "cudaMemcpyAsync device to device", false), 1u);
  uint64_t total = 0;
  for (const auto& s : sites) total += s.count;
  EXPECT_EQ(total, 6u) << "the device-to-host reads are not device work; nothing else was submitted";

  const std::vector<int32_t> h = read(d, 2 * n);
  if (emu::launch_only()) {
    for (int i = 0; i < 2 * n - 1; ++i)  // the memsets ran, nothing else
      ASSERT_EQ(h[i], 0) << "launch-only mode ran device work, at " << i;
  } else {
    for (int i = 0; i < n; ++i) ASSERT_EQ(h[i], 7) << i;
    EXPECT_EQ(h[n], 0);      // the memset
    EXPECT_EQ(h[n + 1], 7);  // the device-to-device copy
    for (int i = n + 2; i < 2 * n - 1; ++i) ASSERT_EQ(h[i], 1) << i;
  }
  EXPECT_EQ(h[2 * n - 1], 2);  // the one-byte memset, the low byte (little-endian) over 0 or 1
  emu::reset_launch_sites();
  EXPECT_TRUE(emu::launch_sites().empty());
  ASSERT_EQ(cudaFree(d), cudaSuccess);
}

// A copy from pinned memory (a DMA in stream order) is device work as a pageable source's is:
// counted at the same site, and not run in launch-only mode.
TEST(LaunchSites, ACopyFromPinnedMemoryIsCountedAndDroppedLikeAnyHostToDeviceCopy) {
  const int n = 8;
  int32_t* d = nullptr;
  int32_t* pinned = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), n * sizeof(int32_t)), cudaSuccess);  // fresh: zeros here
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), n * sizeof(int32_t)), cudaSuccess);
  for (int i = 0; i < n; ++i) pinned[i] = 5;
  emu::reset_launch_sites();
  ASSERT_EQ(cudaMemcpyAsync(d, pinned, n * sizeof(int32_t), cudaMemcpyHostToDevice, nullptr), cudaSuccess);
  EXPECT_EQ(count_at(emu::launch_sites(), "cudaMemcpyAsync host to device", false), 1u);
  const std::vector<int32_t> h = read(d, n);
  for (int i = 0; i < n; ++i) ASSERT_EQ(h[i], emu::launch_only() ? 0 : 5) << i;
  emu::reset_launch_sites();
  ASSERT_EQ(cudaFreeHost(pinned), cudaSuccess);
  ASSERT_EQ(cudaFree(d), cudaSuccess);
}

}  // namespace
