// tests/core/test_cpu_allocator.cpp — the CPU allocator: large blocks are cached and reused,
// statistics count requested bytes whether cached or not, empty_cpu_cache() gives memory back.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include <mixtape/mixtape.h>

namespace mixtape {
namespace {

bool cache_on() {
  const char* env = std::getenv("MIXTAPE_CPU_CACHE");
#if defined(__SANITIZE_ADDRESS__)
  return env && std::string(env) != "0";
#else
  return !env || std::string(env) != "0";
#endif
}

TEST(CpuAllocator, StatisticsCountRequestedBytes) {
  const int64_t before = memory_stats().current_bytes;
  {
    Tensor big = Tensor::empty({300000}, TensorOptions(DType::Float32));  // 1.2 MB: cached size
    Tensor small = Tensor::empty({10}, TensorOptions(DType::Float32));    // 40 B: malloc
    EXPECT_EQ(memory_stats().current_bytes - before, 1200000 + 40);
    EXPECT_GE(memory_stats().reserved_bytes, memory_stats().current_bytes);
  }
  EXPECT_EQ(memory_stats().current_bytes, before);
}

TEST(CpuAllocator, LargeBlocksAreReusedAndEmptyCacheReturnsThem) {
  if (!cache_on()) GTEST_SKIP() << "the CPU cache is off in this build or by MIXTAPE_CPU_CACHE=0";
  empty_cpu_cache();
  const int64_t held = memory_stats().reserved_bytes - memory_stats().current_bytes;
  void* first;
  {
    Tensor a = Tensor::empty({1 << 20}, TensorOptions(DType::Float32));  // 4 MiB
    first = a.data_ptr();
  }
  // Freed, but kept: the next request of that size gets the same block, no new pages.
  EXPECT_GE(memory_stats().reserved_bytes - memory_stats().current_bytes, held + (4 << 20));
  Tensor b = Tensor::empty({1 << 20}, TensorOptions(DType::Float32));
  EXPECT_EQ(b.data_ptr(), first);
  b = Tensor();
  empty_cpu_cache();
  EXPECT_EQ(memory_stats().reserved_bytes - memory_stats().current_bytes, 0);
}

TEST(CpuAllocator, AlignmentBySize) {
  // From 1 KiB up (medium and cached blocks): 64 bytes, a cache line, for SIMD loads.
  for (int64_t n : {256, 1000, 16384, 16385, 100000, 1 << 20}) {
    Tensor t = Tensor::empty({n}, TensorOptions(DType::Float32));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u) << n;
  }
  // Tiny blocks come from malloc: 16 bytes, enough for any scalar type and SSE.
  for (int64_t n : {1, 3, 200}) {
    Tensor t = Tensor::empty({n}, TensorOptions(DType::Float32));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16, 0u) << n;
  }
}

}  // namespace
}  // namespace mixtape
