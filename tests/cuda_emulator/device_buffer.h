// tests/cuda_emulator/device_buffer.h — the emulator tests' device array: `n` elements from
// cudaMalloc on the current device, filled from / read back to host vectors with checked copies.
#pragma once
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

namespace mixtape::cuda_emulator::testing {

template <class T>
struct DeviceBuffer {
  T* p = nullptr;
  size_t n = 0;
  explicit DeviceBuffer(size_t count) : n(count) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(T)), cudaSuccess);
  }
  explicit DeviceBuffer(const std::vector<T>& v) : DeviceBuffer(v.size()) { upload(v); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void upload(const std::vector<T>& v) {
    ASSERT_EQ(v.size(), n);
    ASSERT_EQ(cudaMemcpy(p, v.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> download() const {
    std::vector<T> v(n);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
};

}  // namespace mixtape::cuda_emulator::testing
