// tests/cuda_emulator/test_runtime_emulator.cpp — the emulated CUDA runtime keeps the rules
// mixtape's tests depend on: device memory is out of the host's reach, copies must name the right
// direction, failures set the last error, devices, streams and events behave as documented, and
// device memory runs out at the configured capacity. Built only in MIXTAPE_CUDA=EMULATOR builds.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tests/cuda_emulator/emulator.h"

namespace {

TEST(RuntimeEmulator, ReportsTwoDevicesByDefault) {
  int n = 0;
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  EXPECT_EQ(n, 2);
  EXPECT_EQ(cudaSetDevice(2), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  int d = -1;
  ASSERT_EQ(cudaGetDevice(&d), cudaSuccess);
  EXPECT_EQ(d, 0);
}

TEST(RuntimeEmulator, CopiesRoundTripAndCheckTheirDirection) {
  std::vector<float> h = {1.5f, -2.0f, 3.25f, 0.0f}, back(4, 9.0f);
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), sizeof(float) * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d, h.data(), sizeof(float) * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(back.data(), d, sizeof(float) * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, h);
  // The same copy named the wrong way round, or running past the allocation, is refused.
  EXPECT_EQ(cudaMemcpy(d, h.data(), sizeof(float) * 4, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(d, h.data(), sizeof(float) * 5, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaFree(d), cudaSuccess);
  EXPECT_EQ(cudaFree(h.data()), cudaErrorInvalidValue);  // not a device pointer
  (void)cudaGetLastError();
}

TEST(RuntimeEmulatorDeathTest, HostCodeCannotTouchDeviceMemory) {
  EXPECT_DEATH(
      {
        int* d = nullptr;
        if (cudaMalloc(reinterpret_cast<void**>(&d), 64) == cudaSuccess) *reinterpret_cast<volatile int*>(d) = 1;
      },
      "");
}

TEST(RuntimeEmulator, DeviceMemoryIsReachableInsideAnAccessScope) {
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 64), cudaSuccess);
  {
    mixtape::cuda_emulator::DeviceAccess access;
    d[3] = 42;
  }
  int h = 0;
  ASSERT_EQ(cudaMemcpy(&h, d + 3, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(h, 42);
  EXPECT_TRUE(mixtape::cuda_emulator::is_device_range(d, 64));
  EXPECT_FALSE(mixtape::cuda_emulator::is_device_range(d, 65));
  EXPECT_FALSE(mixtape::cuda_emulator::is_device_range(&h, 4));
  cudaFree(d);
}

TEST(RuntimeEmulatorDeathTest, ALibraryGivenAHostPointerAbortsNamingTheOperand) {
  int h = 0;
  EXPECT_DEATH(mixtape::cuda_emulator::require_device_range(&h, sizeof h, "cublasGemmEx: A"),
               "mixtape CUDA emulator: cublasGemmEx: A: .* is not inside one live device allocation");
}

TEST(RuntimeEmulator, PeerCopiesCheckEachPointersDevice) {
  void *a = nullptr, *b = nullptr;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&a, 16), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, 16), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaMemset(a, 7, 16), cudaSuccess);
  EXPECT_EQ(cudaMemcpyPeerAsync(b, 1, a, 0, 16, nullptr), cudaSuccess);
  EXPECT_EQ(cudaMemcpyPeerAsync(b, 0, a, 0, 16, nullptr), cudaErrorInvalidValue);  // b lives on device 1
  (void)cudaGetLastError();
  unsigned char h[16] = {};
  ASSERT_EQ(cudaMemcpy(h, b, 16, cudaMemcpyDeviceToHost), cudaSuccess);
  for (unsigned char c : h) EXPECT_EQ(c, 7);
  cudaFree(a);
  cudaFree(b);
}

TEST(RuntimeEmulator, EventsTimeOnlyWhenRecordedAndCreatedWithTiming) {
  cudaEvent_t start = nullptr, end = nullptr, untimed = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&start, cudaEventDefault), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&end, cudaEventDefault), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming), cudaSuccess);
  float ms = -1;
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, end), cudaErrorInvalidResourceHandle);  // never recorded
  ASSERT_EQ(cudaEventRecord(start, nullptr), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(end, nullptr), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(untimed, nullptr), cudaSuccess);
  ASSERT_EQ(cudaEventElapsedTime(&ms, start, end), cudaSuccess);
  EXPECT_GE(ms, 0.0f);
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, untimed), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  // An event of device 0 cannot be recorded on a stream of device 1.
  cudaStream_t s1 = nullptr;
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(start, s1), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStreamDestroy(s1);
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  cudaEventDestroy(untimed);
}

// Stream order only (MIXTAPE_CUDA_EMULATOR_STREAMS=deferred, the default): what a GPU may do.
TEST(RuntimeEmulatorStreams, NonBlockingStreamWorkIsInvisibleUntilSynchronised) {
  if (!::mixtape::cuda_emulator::streams_deferred())
    GTEST_SKIP() << "MIXTAPE_CUDA_EMULATOR_STREAMS=immediate: no stream order to observe";
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMemset(d, 0, sizeof(int)), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const int one = 1;
  ASSERT_EQ(cudaMemcpyAsync(d, &one, sizeof one, cudaMemcpyHostToDevice, s), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
  int h = -1;
  // The legacy stream does not wait for a non-blocking stream: the write is not there yet.
  ASSERT_EQ(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(h, 0);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(s), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(h, 1);
  cudaStreamDestroy(s);
  cudaFree(d);
}

TEST(RuntimeEmulatorStreams, BlockingStreamsAreOrderedWithTheLegacyStream) {
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), sizeof(int)), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);  // blocking
  const int seven = 7;
  ASSERT_EQ(cudaMemcpyAsync(d, &seven, sizeof seven, cudaMemcpyHostToDevice, s), cudaSuccess);
  int h = -1;
  ASSERT_EQ(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(h, 7);
  cudaStreamDestroy(s);
  cudaFree(d);
}

TEST(RuntimeEmulatorStreams, AnEventWaitOrdersOneStreamAfterAnother) {
  if (!::mixtape::cuda_emulator::streams_deferred())
    GTEST_SKIP() << "MIXTAPE_CUDA_EMULATOR_STREAMS=immediate: no stream order to observe";
  int *a = nullptr, *b = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&a), sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&b), sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMemset(a, 0, sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMemset(b, 0, sizeof(int)), cudaSuccess);
  cudaStream_t producer = nullptr, consumer = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t ready = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), cudaSuccess);
  for (bool wait : {false, true}) {
    const int value = wait ? 42 : 5;
    ASSERT_EQ(cudaMemcpyAsync(a, &value, sizeof value, cudaMemcpyHostToDevice, producer), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(ready, producer), cudaSuccess);
    EXPECT_EQ(cudaEventQuery(ready), cudaErrorNotReady);
    if (wait) {
      ASSERT_EQ(cudaStreamWaitEvent(consumer, ready, 0), cudaSuccess);
    }
    ASSERT_EQ(cudaMemcpyAsync(b, a, sizeof(int), cudaMemcpyDeviceToDevice, consumer), cudaSuccess);
    int h = -1;
    ASSERT_EQ(cudaMemcpyAsync(&h, b, sizeof h, cudaMemcpyDeviceToHost, consumer), cudaSuccess);
    // Without the wait the consumer copied `a` before the producer wrote it.
    EXPECT_EQ(h, wait ? 42 : 0) << (wait ? "with" : "without") << " the event wait";
    ASSERT_EQ(cudaEventSynchronize(ready), cudaSuccess);
    EXPECT_EQ(cudaEventQuery(ready), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(producer), cudaSuccess);
  }
  cudaEventDestroy(ready);
  cudaStreamDestroy(producer);
  cudaStreamDestroy(consumer);
  cudaFree(a);
  cudaFree(b);
}

TEST(RuntimeEmulatorStreams, AHostToDeviceCopyTakesTheHostBytesAtTheCall) {
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), sizeof(int)), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  int v = 3;
  ASSERT_EQ(cudaMemcpyAsync(d, &v, sizeof v, cudaMemcpyHostToDevice, s), cudaSuccess);
  v = 4;  // pageable memory: the runtime staged the 3 already
  int h = -1;
  ASSERT_EQ(cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(h, 3);
  cudaStreamDestroy(s);
  cudaFree(d);
}

TEST(RuntimeEmulator, DeviceMemoryRunsOutAtItsCapacity) {
  size_t free0 = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
  EXPECT_EQ(total, size_t(4096) << 20);
  void* big = nullptr;
  EXPECT_EQ(cudaMalloc(&big, total + 1), cudaErrorMemoryAllocation);
  EXPECT_EQ(big, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, size_t(1) << 20), cudaSuccess);
  size_t free1 = 0;
  ASSERT_EQ(cudaMemGetInfo(&free1, &total), cudaSuccess);
  EXPECT_EQ(free0 - free1, size_t(1) << 20);
  cudaFree(p);
  void* none = &p;
  EXPECT_EQ(cudaMalloc(&none, 0), cudaSuccess);
  EXPECT_EQ(none, nullptr);
}

// Pinned memory (cudaHostAlloc): the runtime says which memory a pointer is, and an async copy
// with a pinned end touches the host when its stream runs it (a DMA), where a pageable source is
// staged at the call and a pageable destination makes the host wait.
TEST(RuntimeEmulator, PinnedCopiesTouchTheHostWhenTheStreamRunsThem) {
  if (!mixtape::cuda_emulator::streams_deferred()) GTEST_SKIP() << "MIXTAPE_CUDA_EMULATOR_STREAMS=immediate";
  float* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&pinned), sizeof(float) * 4, cudaHostAllocPortable), cudaSuccess);
  unsigned flags = 99;
  ASSERT_EQ(cudaHostGetFlags(&flags, pinned + 2), cudaSuccess);
  EXPECT_EQ(flags, unsigned(cudaHostAllocPortable));
  std::vector<float> pageable = {1, 2, 3, 4}, back(4, 0.0f);
  EXPECT_EQ(cudaHostGetFlags(&flags, pageable.data()), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  float *d = nullptr, *d2 = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), sizeof(float) * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d2), sizeof(float) * 4), cudaSuccess);
  cudaPointerAttributes a{};
  ASSERT_EQ(cudaPointerGetAttributes(&a, pinned + 1), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeHost);
  ASSERT_EQ(cudaPointerGetAttributes(&a, d), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  ASSERT_EQ(cudaPointerGetAttributes(&a, pageable.data()), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);

  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  for (int i = 0; i < 4; ++i) pinned[i] = static_cast<float>(i + 1);
  ASSERT_EQ(cudaMemcpyAsync(d, pinned, sizeof(float) * 4, cudaMemcpyHostToDevice, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(d2, pageable.data(), sizeof(float) * 4, cudaMemcpyHostToDevice, s), cudaSuccess);
  pinned[0] = 9;    // before the stream ran the copy: the DMA reads it
  pageable[0] = 9;  // staged at the call: the copy keeps 1
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(back.data(), d, sizeof(float) * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, (std::vector<float>{9, 2, 3, 4}));
  ASSERT_EQ(cudaMemcpy(back.data(), d2, sizeof(float) * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, (std::vector<float>{1, 2, 3, 4}));

  // Device to pinned: enqueued, no host wait; the bytes arrive when the stream runs.
  for (int i = 0; i < 4; ++i) pinned[i] = 0;
  const uint64_t waits = mixtape::cuda_emulator::host_waits();
  ASSERT_EQ(cudaMemcpyAsync(pinned, d2, sizeof(float) * 4, cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(mixtape::cuda_emulator::host_waits(), waits);
  EXPECT_EQ(pinned[0], 0.0f) << "not run yet";
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(pinned[0], 1.0f);

  EXPECT_EQ(cudaFreeHost(pageable.data()), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
  EXPECT_EQ(cudaFree(d2), cudaSuccess);
}

// Freeing pinned memory that an enqueued copy still reads is undefined behaviour on a GPU (the
// runtime does not promise to wait): a fault here. Once the copy ran, the block can go.
TEST(RuntimeEmulatorDeathTest, FreeingPinnedMemoryUnderAQueuedCopyAborts) {
  if (!mixtape::cuda_emulator::streams_deferred()) GTEST_SKIP() << "MIXTAPE_CUDA_EMULATOR_STREAMS=immediate";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  void *pinned = nullptr, *d = nullptr;
  ASSERT_EQ(cudaHostAlloc(&pinned, 64, cudaHostAllocDefault), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d, 64), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(d, pinned, 64, cudaMemcpyHostToDevice, s), cudaSuccess);
  EXPECT_DEATH(cudaFreeHost(pinned), "cudaFreeHost: pinned block .* is freed while 1 enqueued copies");
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

}  // namespace
