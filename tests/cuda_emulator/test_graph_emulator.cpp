// tests/cuda_emulator/test_graph_emulator.cpp — the emulated stream capture and graphs: captured
// work runs only when the graph is launched, each launch runs it again in capture order on the
// same addresses (a cuBLAS GEMM included, its host scalars read at capture), and the calls a GPU
// refuses during capture are refused with its error codes and invalidate the capture, under the
// capture modes' rules. Built only in MIXTAPE_CUDA=EMULATOR builds.
#include <gtest/gtest.h>

#include <cublas_v2.h>

#include <functional>
#include <thread>
#include <vector>

#include "tests/cuda_emulator/emulator.h"

namespace {

// A non-blocking stream and n floats of device memory on device 0, freed at scope exit.
struct Fixture {
  cudaStream_t s = nullptr;
  std::vector<float*> bufs;
  explicit Fixture(int n_bufs, size_t n) {
    EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
    EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    for (int i = 0; i < n_bufs; ++i) {
      float* p = nullptr;
      EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(float)), cudaSuccess);
      bufs.push_back(p);
    }
  }
  ~Fixture() {
    (void)cudaStreamSynchronize(s);
    for (float* p : bufs) cudaFree(p);
    cudaStreamDestroy(s);
    (void)cudaGetLastError();
  }
  void put(float* d, const std::vector<float>& h) {
    ASSERT_EQ(cudaMemcpyAsync(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice, s), cudaSuccess);
  }
  std::vector<float> get(const float* d, size_t n) {
    std::vector<float> h(n);
    EXPECT_EQ(cudaMemcpyAsync(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost, s), cudaSuccess);
    return h;
  }
};

cudaStreamCaptureStatus status_of(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  EXPECT_EQ(cudaStreamIsCapturing(s, &st), cudaSuccess);
  return st;
}

// Ends the (invalidated) capture on s and checks that no graph came out.
void expect_invalidated(cudaStream_t s) {
  EXPECT_EQ(status_of(s), cudaStreamCaptureStatusInvalidated);
  cudaGraph_t g = reinterpret_cast<cudaGraph_t>(1);
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(g, nullptr);
  EXPECT_EQ(status_of(s), cudaStreamCaptureStatusNone);
  (void)cudaGetLastError();
}

TEST(GraphEmulator, CapturedWorkRunsOnEachLaunchOnly) {
  Fixture f(2, 4);
  float *a = f.bufs[0], *b = f.bufs[1];
  f.put(a, {1, 2, 3, 4});
  f.put(b, {0, 0, 0, 0});
  ASSERT_EQ(cudaStreamBeginCapture(f.s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_EQ(status_of(f.s), cudaStreamCaptureStatusActive);
  unsigned long long id = 0;
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  ASSERT_EQ(cudaStreamGetCaptureInfo(f.s, &st, &id), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusActive);
  EXPECT_NE(id, 0u);
  // b = a, then a's first half zeroed: order matters, so a replay in the wrong order shows.
  ASSERT_EQ(cudaMemcpyAsync(b, a, 4 * sizeof(float), cudaMemcpyDeviceToDevice, f.s), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(a, 0, 2 * sizeof(float), f.s), cudaSuccess);
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(f.s, &g), cudaSuccess);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(status_of(f.s), cudaStreamCaptureStatusNone);
  // Nothing ran during capture.
  EXPECT_EQ(f.get(b, 4), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_EQ(f.get(a, 4), (std::vector<float>{1, 2, 3, 4}));
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphDestroy(g), cudaSuccess);  // the instantiation keeps what it needs
  for (float first : {5.0f, 7.0f, -1.0f}) {
    f.put(a, {first, 2, 3, 4});  // a refreshed in place before each launch
    ASSERT_EQ(cudaGraphLaunch(exec, f.s), cudaSuccess);
    EXPECT_EQ(f.get(b, 4), (std::vector<float>{first, 2, 3, 4}));
    EXPECT_EQ(f.get(a, 4), (std::vector<float>{0, 0, 3, 4}));
  }
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
}

TEST(GraphEmulator, ALaunchIsOneItemOfItsStreamInStreamOrder) {
  if (!mixtape::cuda_emulator::streams_deferred()) GTEST_SKIP() << "observes stream order (deferred streams)";
  Fixture f(1, 2);
  float* a = f.bufs[0];
  ASSERT_EQ(cudaStreamBeginCapture(f.s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(a, 0, sizeof(float), f.s), cudaSuccess);
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(f.s, &g), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  f.put(a, {9, 9});
  ASSERT_EQ(cudaStreamSynchronize(f.s), cudaSuccess);
  const uint64_t waits = mixtape::cuda_emulator::host_waits();
  ASSERT_EQ(cudaGraphLaunch(exec, other), cudaSuccess);
  EXPECT_EQ(mixtape::cuda_emulator::host_waits(), waits);  // a launch never stops the host
  EXPECT_EQ(cudaStreamQuery(other), cudaErrorNotReady);   // queued on `other`, not yet run
  (void)cudaGetLastError();
  ASSERT_EQ(cudaStreamSynchronize(other), cudaSuccess);
  EXPECT_EQ(f.get(a, 2), (std::vector<float>{0, 9}));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  cudaStreamDestroy(other);
}

TEST(GraphEmulator, ACapturedGemmReadsItsOperandsAtEachLaunchAndItsScalarsAtCapture) {
  Fixture f(3, 4);
  float *A = f.bufs[0], *B = f.bufs[1], *C = f.bufs[2];
  cublasHandle_t h = nullptr;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasSetStream(h, f.s), CUBLAS_STATUS_SUCCESS);
  float alpha = 2.0f, beta = 0.0f;
  ASSERT_EQ(cudaStreamBeginCapture(f.s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  // C (2x2, column-major) = alpha * A * B
  ASSERT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &alpha, A, CUDA_R_32F, 2, B, CUDA_R_32F, 2, &beta, C,
                         CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(f.s, &g), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  alpha = 100.0f;  // host scalars were read when the call was captured
  f.put(B, {1, 0, 0, 1});  // identity
  for (float x : {1.0f, 3.0f}) {
    f.put(A, {x, 2, 3, 4});
    ASSERT_EQ(cudaGraphLaunch(exec, f.s), cudaSuccess);
    EXPECT_EQ(f.get(C, 4), (std::vector<float>{2 * x, 4, 6, 8}));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  cublasDestroy(h);
}

TEST(GraphEmulator, TheLegacyStreamCannotCapture) {
  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeThreadLocal), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaGetLastError(), cudaErrorStreamCaptureUnsupported);
  Fixture f(0, 0);
  cudaGraph_t g = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(f.s, &g), cudaErrorStreamCaptureUnmatched);  // never began
  (void)cudaGetLastError();
}

// Each "potentially unsafe" call from the capturing thread: refused, and the capture is lost.
TEST(GraphEmulator, UnsafeCallsDuringCaptureAreRefusedAndInvalidateIt) {
  Fixture f(1, 4);
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t outside = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&outside, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(outside, other), cudaSuccess);
  float host[4] = {};
  struct Case {
    const char* what;
    std::function<cudaError_t()> call;
    cudaError_t expected;
  };
  const std::vector<Case> cases = {
      {"cudaMalloc",
       [] {
         void* p = nullptr;
         return cudaMalloc(&p, 64);
       },
       cudaErrorStreamCaptureUnsupported},
      {"cudaFree", [&] { return cudaFree(f.bufs[0]); }, cudaErrorStreamCaptureUnsupported},
      {"cudaDeviceSynchronize", [] { return cudaDeviceSynchronize(); }, cudaErrorStreamCaptureUnsupported},
      {"cudaStreamSynchronize(capturing)", [&] { return cudaStreamSynchronize(f.s); },
       cudaErrorStreamCaptureUnsupported},
      {"cudaStreamSynchronize(other)", [&] { return cudaStreamSynchronize(other); },
       cudaErrorStreamCaptureUnsupported},
      {"cudaStreamQuery", [&] { return cudaStreamQuery(f.s); }, cudaErrorStreamCaptureUnsupported},
      {"cudaEventSynchronize", [&] { return cudaEventSynchronize(outside); }, cudaErrorStreamCaptureUnsupported},
      {"cudaEventQuery", [&] { return cudaEventQuery(outside); }, cudaErrorStreamCaptureUnsupported},
      {"device-to-host copy",
       [&] { return cudaMemcpyAsync(host, f.bufs[0], sizeof host, cudaMemcpyDeviceToHost, f.s); },
       cudaErrorStreamCaptureUnsupported},
      {"host-to-device copy (pageable)",
       [&] { return cudaMemcpyAsync(f.bufs[0], host, sizeof host, cudaMemcpyHostToDevice, f.s); },
       cudaErrorStreamCaptureUnsupported},
      {"wait for uncaptured work", [&] { return cudaStreamWaitEvent(f.s, outside, 0); },
       cudaErrorStreamCaptureIsolation},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ASSERT_EQ(cudaStreamBeginCapture(f.s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(f.bufs[0], 0, 4, f.s), cudaSuccess);
    EXPECT_EQ(c.call(), c.expected);
    EXPECT_EQ(cudaGetLastError(), c.expected);
    expect_invalidated(f.s);
  }
  cudaEventDestroy(outside);
  cudaStreamDestroy(other);
}

TEST(GraphEmulator, AnEventRecordedInACaptureCannotBeQueriedWhileItLasts) {
  Fixture f(0, 0);
  cudaEvent_t e = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);  // creating one is allowed
  ASSERT_EQ(cudaStreamBeginCapture(f.s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(e, f.s), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e), cudaErrorCapturedEvent);  // even in relaxed mode
  EXPECT_EQ(cudaEventSynchronize(e), cudaErrorCapturedEvent);
  ASSERT_EQ(cudaStreamWaitEvent(f.s, e, 0), cudaSuccess);  // same capture: already ordered
  (void)cudaGetLastError();
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(f.s, &g), cudaSuccess);  // relaxed: querying did not invalidate it
  cudaGraphDestroy(g);
  cudaEventDestroy(e);
}

TEST(GraphEmulatorDeathTest, CrossStreamCaptureIsNotEmulated) {
  EXPECT_DEATH(
      {
        Fixture f(0, 0);
        cudaStream_t other = nullptr;
        cudaEvent_t e = nullptr;
        cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
        cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
        cudaStreamBeginCapture(f.s, cudaStreamCaptureModeThreadLocal);
        cudaEventRecord(e, f.s);
        cudaStreamWaitEvent(other, e, 0);
      },
      "cross-stream capture\\) is not supported by the emulator");
}

TEST(GraphEmulator, RelaxedModeLetsTheCapturingThreadAllocate) {
  Fixture f(0, 0);
  ASSERT_EQ(cudaStreamBeginCapture(f.s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  EXPECT_EQ(mode, cudaStreamCaptureModeGlobal);  // the thread's default
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 64), cudaSuccess);  // what a caching allocator does to grow a graph's pool
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  EXPECT_EQ(mode, cudaStreamCaptureModeRelaxed);
  EXPECT_EQ(status_of(f.s), cudaStreamCaptureStatusActive);
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(f.s, &g), cudaSuccess);
  cudaGraphDestroy(g);
  cudaFree(p);
}

// ThreadLocal: another thread's unsafe calls are its own business; Global: they are refused too.
TEST(GraphEmulator, CaptureModesDecideWhichThreadsAreProhibited) {
  Fixture f(0, 0);
  for (cudaStreamCaptureMode mode : {cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeGlobal}) {
    ASSERT_EQ(cudaStreamBeginCapture(f.s, mode), cudaSuccess);
    cudaError_t other_thread = cudaSuccess;
    void* p = nullptr;
    std::thread([&] { other_thread = cudaMalloc(&p, 64); }).join();
    if (mode == cudaStreamCaptureModeThreadLocal) {
      EXPECT_EQ(other_thread, cudaSuccess);
      cudaGraph_t g = nullptr;
      ASSERT_EQ(cudaStreamEndCapture(f.s, &g), cudaSuccess);
      cudaGraphDestroy(g);
      cudaFree(p);
    } else {
      EXPECT_EQ(other_thread, cudaErrorStreamCaptureUnsupported);
      expect_invalidated(f.s);
    }
  }
}

}  // namespace
