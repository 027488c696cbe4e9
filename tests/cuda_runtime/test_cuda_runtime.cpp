// tests/cuda_runtime/test_cuda_runtime.cpp — the CUDA runtime on a real GPU: copies between
// host and device (bit-exact, every dtype, strided sources), the caching allocator's reuse,
// statistics, leaks, empty_cache and out-of-memory report, streams, events, handles, Scratch.
// Every case is labelled gpu (tests/CMakeLists.txt) and skips with cuda::unavailable_reason()
// when no GPU can be used — including in the CPU-only build ("built without CUDA"). The check
// macros' tests need only a CUDA build, so CI's GPU-less CUDA build runs them.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/cuda_api.h"
#include "core/dispatcher.h"
#include "core/error.h"
#include "core/profiler.h"
#include "core/tensor.h"
#include "ops/activation.h"
#include "ops/cast.h"
#include "ops/creation.h"
#include "ops/matmul.h"
#include "ops/pointwise.h"
#include "require_gpu.h"

#if defined(MIXTAPE_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "core/cuda/check.h"
#include "core/cuda/handles.h"
#include "core/cuda/scratch.h"
#include "core/cuda/stream.h"
#if defined(MIXTAPE_CUDA_EMULATOR)
#include "tests/cuda_emulator/emulator.h"
#endif
#endif

namespace mixtape {
namespace {

#if defined(MIXTAPE_WITH_CUDA)
#define REQUIRE_CUDA_BUILD() \
  do {                       \
  } while (0)
#else
#define REQUIRE_CUDA_BUILD() GTEST_SKIP() << "built without CUDA"
#endif

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

const DType kAllDtypes[] = {DType::Bool,    DType::UInt8,    DType::Int32,   DType::Int64,
                            DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};

// A CPU tensor of random bit patterns (NaN payloads and subnormals included); bools are 0/1.
Tensor random_bits(const IntList& sizes, DType dtype, uint32_t seed) {
  Tensor t = Tensor::empty(sizes, TensorOptions(dtype));
  std::mt19937 rng(seed);
  auto* p = static_cast<unsigned char*>(t.data_ptr());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = dtype == DType::Bool ? (rng() & 1) : static_cast<unsigned char>(rng());
  return t;
}

// Bitwise equality of two CPU tensors' logical contents.
bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  Tensor ca = contiguous(a), cb = contiguous(b);
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

uint32_t seed_for_test() {
  static const uint32_t seed = std::random_device{}();
  std::cout << "[ seed ] " << seed << '\n';
  return seed;
}

// ---- copies ----

TEST(CudaCopy, RoundTripIsBitExactForEveryDtype) {
  REQUIRE_GPU();
  uint32_t seed = seed_for_test();
  for (DType dt : kAllDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = random_bits({3, 5, 7}, dt, seed);
    Tensor g = x.to(Device::CUDA());
    EXPECT_EQ(g.device(), Device::CUDA(0));
    EXPECT_EQ(g.dtype(), dt);
    EXPECT_EQ(g.sizes(), x.sizes());
    Tensor back = g.to(Device::CPU());
    EXPECT_TRUE(back.device().is_cpu());
    EXPECT_TRUE(same_bits(back, x));
  }
}

TEST(CudaCopy, EmptyAndScalarTensorsRoundTrip) {
  REQUIRE_GPU();
  Tensor e = Tensor::empty({0, 4}, TensorOptions(DType::Float16));
  Tensor eg = e.to(Device::CUDA());
  EXPECT_EQ(eg.numel(), 0);
  EXPECT_EQ(eg.to(Device::CPU()).sizes(), e.sizes());
  Tensor s = full({}, 2.5, TensorOptions(DType::Float64));
  EXPECT_EQ(s.to(Device::CUDA()).to(Device::CPU()).item<double>(), 2.5);
}

TEST(CudaCopy, StridedHostSourcesAreMadeContiguousFirst) {
  REQUIRE_GPU();
  uint32_t seed = seed_for_test();
  for (DType dt : kAllDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = random_bits({6, 8}, dt, seed);
    for (const Tensor& view : {x.t(), x.slice(1, 1, 7, 2), x.select(1, 3), x.narrow(0, 2, 3).t(),
                               x.select(0, 1).unsqueeze(0).expand({4, 8})}) {
      Tensor g = view.to(Device::CUDA());
      EXPECT_TRUE(same_bits(g.to(Device::CPU()), view)) << view.describe();
    }
  }
}

TEST(CudaCopy, StridedDeviceSourcesAreMadeContiguousOnTheDevice) {
  REQUIRE_GPU();
  uint32_t seed = seed_for_test();
  for (DType dt : kAllDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = random_bits({5, 4, 6}, dt, seed);
    Tensor g = x.to(Device::CUDA());
    EXPECT_TRUE(same_bits(g.permute({2, 0, 1}).to(Device::CPU()), x.permute({2, 0, 1})));
    EXPECT_TRUE(same_bits(g.slice(2, 0, 6, 3).to(Device::CPU()), x.slice(2, 0, 6, 3)));
    EXPECT_TRUE(same_bits(g.select(1, 2).to(Device::CPU()), x.select(1, 2)));
  }
}

TEST(CudaCopy, DeviceToDeviceBetweenGpus) {
  REQUIRE_GPU();
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs two GPUs, have " << cuda::device_count();
  Tensor x = random_bits({64, 33}, DType::BFloat16, seed_for_test());
  Tensor g0 = x.to(Device::CUDA(0));
  Tensor g1 = g0.t().to(Device::CUDA(1));
  EXPECT_EQ(g1.device(), Device::CUDA(1));
  EXPECT_TRUE(same_bits(g1.to(Device::CPU()), x.t()));
  EXPECT_TRUE(same_bits(g1.to(Device::CUDA(0)).to(Device::CPU()), x.t()));
}

TEST(CudaCopy, SameDeviceIsNoCopy) {
  REQUIRE_GPU();
  Tensor g = ones({3}).to(Device::CUDA());
  EXPECT_TRUE(g.to(Device::CUDA(0)).is_same(g));
}

TEST(CudaCopy, CopyIntoAHostTensorFromTheDevice) {
  REQUIRE_GPU();
  Tensor x = random_bits({4, 5}, DType::Float32, seed_for_test());
  Tensor g = x.to(Device::CUDA());
  Tensor dst = zeros({4, 5});
  dst.copy_(g);
  EXPECT_TRUE(same_bits(dst, x));
  // Into a CUDA destination needs the CUDA copy_ kernel (ops/cuda/, helper KERNELS).
  const OpSchema* copy_op = find_op("copy_");
  if (copy_op && copy_op->kernels[static_cast<int>(DeviceType::CUDA)]) {
    Tensor gdst = zeros({4, 5}).to(Device::CUDA());
    gdst.copy_(x);
    EXPECT_TRUE(same_bits(gdst.to(Device::CPU()), x));
  }
}

TEST(CudaCopy, AMissingDeviceIsNamedWithTheCount) {
  REQUIRE_GPU();
  int n = cuda::device_count();
  std::string m = message_of([&] { (void)ones({2}).to(Device::CUDA(n)); });
  EXPECT_NE(m.find("cuda:" + std::to_string(n) + " does not exist (" + std::to_string(n) + " CUDA device"),
            std::string::npos)
      << m;
  m = message_of([&] { (void)Tensor::empty({2}, TensorOptions(DType::Float32).with_device(Device::CUDA(n))); });
  EXPECT_NE(m.find("does not exist"), std::string::npos) << m;
}

TEST(CudaCopy, MixedDevicesNameTheOpAndBothDevices) {
  REQUIRE_GPU();
  Tensor a = ones({4});
  Tensor b = ones({4}).to(Device::CUDA());
  std::string m = message_of([&] { (void)add(a, b); });
  EXPECT_NE(m.find("add: expected all tensors on the same device, got cpu (input 0) and cuda:0 (input 1)"),
            std::string::npos)
      << m;
}

// ---- the caching allocator on the device ----

TEST(CudaAllocator, FreedBlocksAreReusedAndCounted) {
  REQUIRE_GPU();
  AllocatorStats before = memory_stats(Device::CUDA());
  void* first = nullptr;
  {
    Tensor t = Tensor::empty({1 << 18}, TensorOptions(DType::Float32).with_device(Device::CUDA()));  // 1 MiB
    first = t.data_ptr();
    AllocatorStats during = memory_stats(Device::CUDA());
    EXPECT_EQ(during.current_bytes - before.current_bytes, 1 << 20);
    EXPECT_EQ(during.allocation_count - before.allocation_count, 1);
    EXPECT_GE(during.reserved_bytes, during.current_bytes);
  }
  AllocatorStats after = memory_stats(Device::CUDA());
  EXPECT_EQ(after.current_bytes, before.current_bytes);
  Tensor again = Tensor::empty({1 << 18}, TensorOptions(DType::Float32).with_device(Device::CUDA()));
  EXPECT_EQ(again.data_ptr(), first) << "the cached block is handed out again";
  EXPECT_EQ(memory_stats(Device::CUDA()).reserved_bytes, after.reserved_bytes) << "no new device memory";
  EXPECT_EQ(cuda::memory_stats(0).current_bytes, memory_stats(Device::CUDA()).current_bytes);
}

TEST(CudaAllocator, NoLeakOver1000AllocFreeSteps) {
  REQUIRE_GPU();
  AllocatorStats before = memory_stats(Device::CUDA());
  std::mt19937 rng(seed_for_test());
  std::vector<Tensor> live;
  for (int step = 0; step < 1000; ++step) {
    if (live.size() < 16 && (live.empty() || rng() % 2)) {
      int64_t n = 1 + static_cast<int64_t>(rng() % (3u << 20));
      live.push_back(Tensor::empty({n}, TensorOptions(DType::UInt8).with_device(Device::CUDA())));
    } else {
      live.erase(live.begin() + static_cast<long>(rng() % live.size()));
    }
  }
  live.clear();
  AllocatorStats after = memory_stats(Device::CUDA());
  EXPECT_EQ(after.current_bytes, before.current_bytes);
  EXPECT_LT(after.reserved_bytes - before.reserved_bytes, int64_t(256) << 20);
  cuda::empty_cache();
  EXPECT_LE(memory_stats(Device::CUDA()).reserved_bytes, before.reserved_bytes + (int64_t(2) << 20));
}

TEST(CudaAllocator, OutOfMemoryNamesTheSizeAndStatistics) {
  REQUIRE_GPU();
  int64_t absurd = int64_t(1) << 50;  // 1 PiB
  std::string m = message_of(
      [&] { (void)Tensor::empty({absurd}, TensorOptions(DType::UInt8).with_device(Device::CUDA())); });
  EXPECT_NE(m.find("cuda:0: out of memory allocating " + std::to_string(absurd) + " bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("reserved"), std::string::npos) << m;
  EXPECT_NE(m.find("retried once"), std::string::npos) << m;
  // The device is still usable afterwards.
  Tensor x = random_bits({16}, DType::Float32, 1);
  EXPECT_TRUE(same_bits(x.to(Device::CUDA()).to(Device::CPU()), x));
}

#if defined(MIXTAPE_WITH_CUDA)
TEST(CudaAllocator, EmptyCacheGivesMemoryBackToTheDriver) {
  REQUIRE_GPU();
  cuda::empty_cache();
  int64_t reserved0 = memory_stats(Device::CUDA()).reserved_bytes;
  { Tensor big = Tensor::empty({int64_t(64) << 20}, TensorOptions(DType::UInt8).with_device(Device::CUDA())); }
  EXPECT_GE(memory_stats(Device::CUDA()).reserved_bytes, reserved0 + (int64_t(64) << 20)) << "still cached";
  cuda::empty_cache();
  EXPECT_EQ(memory_stats(Device::CUDA()).reserved_bytes, reserved0);
  // Not checked: the driver's device-wide free memory (cudaMemGetInfo) before and after. Other
  // processes share the device (ctest -j runs several GPU test binaries at once), so it moves by
  // their allocations too; the allocator's own reserved bytes are this process's, and exact.
}

// cuda::record_stream: memory a tensor shares with another stream is not handed out again until
// that stream has run the work queued on it when the tensor was freed. Observable only where
// queued work waits (the emulator's deferred streams); on a GPU the kernel may already be done.
TEST(CudaAllocator, RecordStreamKeepsFreedMemoryUntilTheOtherStreamIsDone) {
  REQUIRE_GPU();
#if !defined(MIXTAPE_CUDA_EMULATOR)
  GTEST_SKIP() << "a GPU may finish queued work at any time: only the CUDA emulator can observe stream order";
#else
  if (!cuda_emulator::streams_deferred()) GTEST_SKIP() << "MIXTAPE_CUDA_EMULATOR_STREAMS=immediate";
  const TensorOptions on_gpu = TensorOptions(DType::Float32).with_device(Device::CUDA());
  cuda::synchronize();
  cuda::OwnedStream side;
  void* first = nullptr;
  {
    Tensor t = Tensor::empty({1024}, on_gpu);  // allocated for the current (legacy) stream
    first = t.data_ptr();
    {
      cuda::StreamGuard guard(side.get());
      fill_(t, 1.0);  // queued on the side stream, not run yet
    }
    cuda::record_stream(t, side.get());
  }  // freed while the side stream's fill is still queued
  Tensor u = Tensor::empty({1024}, on_gpu);
  EXPECT_NE(u.data_ptr(), first) << "handed out again while the side stream may still write it";
  ASSERT_EQ(cudaStreamSynchronize(side.get()), cudaSuccess);
  Tensor w = Tensor::empty({1024}, on_gpu);
  EXPECT_EQ(w.data_ptr(), first) << "reusable once the side stream's work has run";
  EXPECT_THROW(cuda::record_stream(ones({2}), side.get()), Error) << "a CPU tensor";
#endif
}

TEST(CudaAllocator, ScratchComesFromTheCache) {
  REQUIRE_GPU();
  int64_t before = memory_stats(Device::CUDA()).current_bytes;
  {
    cuda::Scratch s(1000);
    EXPECT_NE(s.data(), nullptr);
    EXPECT_EQ(s.size(), 1000u);
    EXPECT_EQ(memory_stats(Device::CUDA()).current_bytes, before + 1000);
    ASSERT_EQ(cudaMemset(s.data(), 0, s.size()), cudaSuccess);
  }
  EXPECT_EQ(memory_stats(Device::CUDA()).current_bytes, before);
  cuda::Scratch none(0);
  EXPECT_EQ(none.data(), nullptr);
}

// ---- streams, events, guards, handles ----

TEST(CudaStream, GuardsSetAndRestoreDeviceAndStream) {
  REQUIRE_GPU();
  EXPECT_EQ(cuda::current_stream(), nullptr) << "the legacy default stream to start with";
  cuda::OwnedStream s;
  {
    cuda::DeviceGuard dg(0);
    EXPECT_EQ(cuda::current_device(), 0);
    cuda::StreamGuard sg(s.get());
    EXPECT_EQ(cuda::current_stream(), s.get());
    EXPECT_EQ(cuda::current_stream(0), s.get());
  }
  EXPECT_EQ(cuda::current_stream(), nullptr);
}

TEST(CudaStream, CopiesFollowTheCurrentStreamAndEventsOrderThem) {
  REQUIRE_GPU();
  Tensor x = random_bits({1 << 20}, DType::Float32, seed_for_test());  // 4 MiB
  cuda::OwnedStream side;
  Tensor g;
  cuda::Event done(/*enable_timing=*/true), start(/*enable_timing=*/true);
  {
    cuda::StreamGuard sg(side.get());
    start.record();
    g = x.to(Device::CUDA());  // enqueued on `side`
    done.record();
  }
  done.wait(cuda::current_stream());  // the default stream waits for the copy
  Tensor back = g.to(Device::CPU());  // on the default stream, then synchronised
  EXPECT_TRUE(same_bits(back, x));
  done.synchronize();
  EXPECT_TRUE(done.query());
  EXPECT_GE(start.elapsed_ms(done), 0.f);
  cuda::synchronize();
}

TEST(CudaStream, HandlesFollowTheCurrentStream) {
  REQUIRE_GPU();
  cublasHandle_t blas = cuda::cublas_handle();
  ASSERT_NE(blas, nullptr);
  cudaStream_t st = reinterpret_cast<cudaStream_t>(1);
  ASSERT_EQ(cublasGetStream(blas, &st), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(st, cuda::current_stream());
  cuda::OwnedStream s;
  {
    cuda::StreamGuard sg(s.get());
    EXPECT_EQ(cuda::cublas_handle(), blas) << "one handle per thread and device";
    ASSERT_EQ(cublasGetStream(blas, &st), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(st, s.get());
    cudnnHandle_t dnn = cuda::cudnn_handle();
    ASSERT_NE(dnn, nullptr);
    ASSERT_EQ(cudnnGetStream(dnn, &st), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(st, s.get());
  }
  EXPECT_NE(cuda::cublaslt_handle(), nullptr);
  size_t ws = 0;
  EXPECT_NE(cuda::cublas_workspace(&ws), nullptr);
  EXPECT_EQ(ws, size_t(32) << 20);
}
#endif

// ---- the check macros (a CUDA build is enough) ----

TEST(CudaCheck, CudaErrorsNameTheCallTheOpAndTheStatus) {
  REQUIRE_CUDA_BUILD();
#if defined(MIXTAPE_WITH_CUDA)
  std::string m = message_of([] { MT_CUDA_CHECK(cudaErrorInvalidValue, "my_op"); });
  EXPECT_NE(m.find("my_op: CUDA call cudaErrorInvalidValue failed: cudaErrorInvalidValue ("), std::string::npos) << m;
  EXPECT_NE(m.find("tests/cuda_runtime/test_cuda_runtime.cpp:"), std::string::npos) << m;
  m = message_of([] { MT_CUBLAS_CHECK(CUBLAS_STATUS_NOT_SUPPORTED, "matmul"); });
  EXPECT_NE(m.find("matmul: cuBLAS call CUBLAS_STATUS_NOT_SUPPORTED failed: CUBLAS_STATUS_NOT_SUPPORTED ("),
            std::string::npos)
      << m;
  m = message_of([] { MT_CUDNN_CHECK(CUDNN_STATUS_BAD_PARAM, "conv2d"); });
  EXPECT_NE(m.find("conv2d: cuDNN call CUDNN_STATUS_BAD_PARAM failed: CUDNN_STATUS_BAD_PARAM"), std::string::npos)
      << m;
#endif
}

TEST(CudaCheck, LibraryCallsWithoutAGpuFailWithANamedStatus) {
  REQUIRE_CUDA_BUILD();
#if defined(MIXTAPE_WITH_CUDA)
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is available: cudnnCreate succeeds";
  cudnnHandle_t h = nullptr;
  std::string m = message_of([&] { MT_CUDNN_CHECK(cudnnCreate(&h), "conv2d"); });
  EXPECT_NE(m.find("conv2d: cuDNN call cudnnCreate(&h) failed: "), std::string::npos) << m;
  m = message_of([] { (void)cuda::current_device(); });
  EXPECT_EQ(m, "cuda::current_device: CUDA is not available: " + cuda::unavailable_reason());
#endif
}

#if defined(MIXTAPE_WITH_CUDA)
bool library_mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(name) != std::string::npos) return true;
  return false;
}
#endif

// cuBLAS is loaded at its first call (core/cuda/cublas_lazy.cpp), so processes that never use
// it — most tests — start without mapping 600 MB of libraries.
TEST(CudaCheck, CublasIsLoadedAtFirstUse) {
  REQUIRE_CUDA_BUILD();
#if defined(MIXTAPE_CUDA_EMULATOR)
  GTEST_SKIP() << "the CUDA emulator build defines cuBLAS itself (tests/cuda_emulator/cublas.cpp): nothing is loaded";
#elif defined(MIXTAPE_WITH_CUDA)
  // ctest runs each case in its own process; in a whole-binary run an earlier case may have
  // used cuBLAS already.
  if (library_mapped("libcublas.so") && ::testing::UnitTest::GetInstance()->test_to_run_count() > 1)
    GTEST_SKIP() << "cuBLAS already used by an earlier test in this process; run this case alone";
  EXPECT_FALSE(library_mapped("libcublasLt.so")) << "cuBLASLt was loaded at process start";
  EXPECT_FALSE(library_mapped("libcublas.so")) << "cuBLAS was loaded at process start";
  EXPECT_NE(cublasGetStatusString(CUBLAS_STATUS_SUCCESS), nullptr);
  EXPECT_TRUE(library_mapped("libcublas.so"));
  cublasLtHandle_t lt = nullptr;
  cublasStatus_t st = cublasLtCreate(&lt);  // without a GPU: a status, not a crash
  EXPECT_TRUE(library_mapped("libcublasLt.so"));
  if (cuda::is_available()) {
    EXPECT_EQ(st, CUBLAS_STATUS_SUCCESS);
  } else {
    EXPECT_NE(st, CUBLAS_STATUS_SUCCESS);
  }
#endif
}

// The profiler on CUDA kernels: device time from events, mixtape's own launches counted per op,
// cuBLAS calls counted as library calls, and the launch columns in the table (docs/profiling.md).
TEST(CudaProfiler, TimesKernelsWithEventsAndCountsLaunches) {
  REQUIRE_GPU();
  const Tensor a = ones({64, 64}).to(Device::CUDA());
  (void)matmul(a, a);  // handles and workspaces made before the profiled part
  profiler::Profile on;
  for (int i = 0; i < 3; ++i) {
    (void)relu(matmul(a, a));
    profiler::step();
  }
  const profiler::Report r = profiler::report();
  const profiler::OpRecord *mm = nullptr, *rl = nullptr;
  for (const auto& row : r.ops) {
    if (row.op == "matmul" && row.device == DeviceType::CUDA) mm = &row;
    if (row.op == "relu" && row.device == DeviceType::CUDA) rl = &row;
  }
  ASSERT_NE(mm, nullptr) << r.table();
  ASSERT_NE(rl, nullptr) << r.table();
  EXPECT_EQ(mm->calls, 3);
  EXPECT_EQ(rl->calls, 3);
  EXPECT_GE(mm->library_calls, 3) << r.table();  // one cuBLAS GEMM per call
  EXPECT_GE(rl->launches, 3) << r.table();       // one pointwise kernel per call
  EXPECT_GE(mm->self_ms, 0.0);
  EXPECT_GT(rl->self_ms + mm->self_ms, 0.0) << r.table();
  EXPECT_EQ(r.steps, 3);
  const std::string t = r.table();
  EXPECT_NE(t.find("launches"), std::string::npos) << t;
  EXPECT_NE(t.find("kernel launches, "), std::string::npos) << t;  // the per-step launch figure
}

}  // namespace
}  // namespace mixtape
