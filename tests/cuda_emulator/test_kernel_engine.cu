// tests/cuda_emulator/test_kernel_engine.cu — the emulator's kernel engine keeps CUDA's execution
// model: every (block, thread) coordinate runs once, __syncthreads() is a barrier of the block,
// shared memory is shared by the block, a missing barrier or a divergent one is caught, and the
// launch limits of a GPU are enforced. Built only in MIXTAPE_CUDA=EMULATOR builds.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/cuda/launch.cuh"
#include "tests/cuda_emulator/device_buffer.h"

namespace {

using mixtape::cuda::launch_kernel;

using mixtape::cuda_emulator::testing::DeviceBuffer;

// Each thread stores its linear global id at its own slot, plus the coordinates it saw.
__global__ void coordinates_kernel(uint32_t* ids, uint32_t* hits) {
  const uint32_t block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  const uint32_t thread = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  const uint32_t per_block = blockDim.x * blockDim.y * blockDim.z;
  const uint32_t g = block * per_block + thread;
  ids[g] = g;
  atomicAdd(&hits[g], 1u);
}

TEST(KernelEngine, EveryBlockAndThreadCoordinateRunsExactlyOnce) {
  const dim3 grid(3, 2, 2), block(4, 3, 2);
  const size_t total = 3 * 2 * 2 * 4 * 3 * 2;
  DeviceBuffer<uint32_t> ids(total), hits(std::vector<uint32_t>(total, 0));
  ASSERT_EQ(launch_kernel(coordinates_kernel, grid, block, 0, nullptr, ids.p, hits.p), cudaSuccess);
  const auto i = ids.download(), h = hits.download();
  for (size_t k = 0; k < total; ++k) {
    EXPECT_EQ(i[k], k);
    EXPECT_EQ(h[k], 1u) << k;
  }
}

constexpr int kBlock = 256;

// A shared-memory tree sum per block: correct only if every level is separated by a barrier.
__global__ void block_sum_kernel(const int* in, int* out) {
  __shared__ int part[kBlock];
  part[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];
  __syncthreads();
  for (unsigned w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}

TEST(KernelEngine, BarriersSeparateTheLevelsOfASharedMemoryReduction) {
  const int blocks = 5;
  std::vector<int> h(blocks * kBlock);
  for (size_t k = 0; k < h.size(); ++k) h[k] = static_cast<int>(k % 97) - 40;
  DeviceBuffer<int> in(h.size()), out(blocks);
  ASSERT_EQ(cudaMemcpy(in.p, h.data(), h.size() * sizeof(int), cudaMemcpyHostToDevice), cudaSuccess);
  for (int rep = 0; rep < 3; ++rep) {  // a new thread order each launch
    ASSERT_EQ(launch_kernel(block_sum_kernel, blocks, kBlock, 0, nullptr, in.p, out.p), cudaSuccess);
    const auto r = out.download();
    for (int b = 0; b < blocks; ++b) {
      int want = 0;
      for (int t = 0; t < kBlock; ++t) want += h[b * kBlock + t];
      EXPECT_EQ(r[b], want) << "block " << b;
    }
  }
}

// Each thread publishes a value and reads its neighbour's; `with_barrier` decides whether a
// __syncthreads() separates the two, which is the only thing that makes the read well defined.
__global__ void neighbour_kernel(int* out, int stamp, bool with_barrier) {
  __shared__ int slot[kBlock];
  slot[threadIdx.x] = stamp + static_cast<int>(threadIdx.x);
  if (with_barrier) __syncthreads();
  out[threadIdx.x] = slot[(threadIdx.x + 1) % blockDim.x];
}

TEST(KernelEngine, AMissingBarrierChangesTheResult) {
  DeviceBuffer<int> out(kBlock);
  auto wrong_reads = [&](int stamp, bool barrier) {
    EXPECT_EQ(launch_kernel(neighbour_kernel, 1, kBlock, 0, nullptr, out.p, stamp, barrier), cudaSuccess);
    const auto r = out.download();
    int wrong = 0;
    for (int t = 0; t < kBlock; ++t) wrong += r[t] != stamp + (t + 1) % kBlock;
    return wrong;
  };
  EXPECT_EQ(wrong_reads(1000, true), 0);
  // Around the cycle of neighbours some thread runs before the one it reads, and the fresh stamp
  // means what it finds there is stale: at least one read is wrong, whatever the order.
  EXPECT_GT(wrong_reads(5000, false), 0);
}

__global__ void divergent_barrier_kernel(int* out) {
  if (threadIdx.x < 8) __syncthreads();
  out[threadIdx.x] = 1;
}

TEST(KernelEngineDeathTest, ADivergentBarrierAbortsNamingTheBlock) {
  EXPECT_DEATH(
      {
        DeviceBuffer<int> out(32);
        (void)launch_kernel(divergent_barrier_kernel, 1, 32, 0, nullptr, out.p);
      },
      "block \\(0, 0, 0\\): 24 of 32 threads finished while the others wait at __syncthreads");
}

__global__ void noop_kernel(int* out) {
  if (out) out[0] = 1;
}

TEST(KernelEngine, LaunchConfigurationsBeyondTheGpuLimitsAreErrors) {
  EXPECT_EQ(launch_kernel(noop_kernel, 1, 1025, 0, nullptr, nullptr), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);  // recorded, then cleared
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(launch_kernel(noop_kernel, dim3(1, 65536), 1, 0, nullptr, nullptr), cudaErrorInvalidConfiguration);
  EXPECT_EQ(launch_kernel(noop_kernel, 0, 32, 0, nullptr, nullptr), cudaErrorInvalidConfiguration);
  EXPECT_EQ(launch_kernel(noop_kernel, 1, dim3(1, 1, 65), 0, nullptr, nullptr), cudaErrorInvalidConfiguration);
  EXPECT_EQ(launch_kernel(noop_kernel, 1, 32, size_t(49) << 10, nullptr, nullptr), cudaErrorInvalidConfiguration);
  (void)cudaGetLastError();
  EXPECT_EQ(launch_kernel(noop_kernel, 1, 1024, 0, nullptr, nullptr), cudaSuccess);
}

TEST(KernelEngine, ALaunchOnAnotherDevicesStreamIsAnError) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(launch_kernel(noop_kernel, 1, 32, 0, s, nullptr), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

// Kernel arguments are copies taken at launch: a kernel that changes its own parameter changes
// only its thread's copy.
__global__ void own_copy_kernel(int n, int* out) {
  n += static_cast<int>(threadIdx.x);
  out[threadIdx.x] = n;
}

TEST(KernelEngine, EachThreadGetsItsOwnCopyOfTheArguments) {
  DeviceBuffer<int> out(64);
  ASSERT_EQ(launch_kernel(own_copy_kernel, 1, 64, 0, nullptr, 10, out.p), cudaSuccess);
  const auto r = out.download();
  for (int t = 0; t < 64; ++t) EXPECT_EQ(r[t], 10 + t);
}

}  // namespace
