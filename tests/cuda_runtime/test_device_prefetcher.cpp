// tests/cuda_runtime/test_device_prefetcher.cpp — the data path (docs/CUDA.md, "The data path"):
// pinned tensors (core/cuda/pinned_memory.h) and data::DevicePrefetcher. On the emulator, whose
// streams run only when something orders them and whose copies from pinned memory read the host
// bytes when they run: the copies go on the prefetcher's copy stream, not the consumer's; a
// staging buffer is never rewritten before its copy ran, and a batch's memory is never written
// while the consumer's queued work still reads what was there; a training step waits for the
// device no more often than with plain copies.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/cuda_api.h"
#include "core/error.h"
#include "core/tensor.h"
#include "data/dataloader.h"
#include "data/device_prefetcher.h"
#include "ops/cast.h"
#include "ops/creation.h"
#include "ops/pointwise.h"
#include "ops/reduce.h"
#include "require_gpu.h"

#if defined(MIXTAPE_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "core/cuda/pinned_memory.h"
#include "core/cuda/stream.h"
#include "data/cuda/batch_copier.h"
#if defined(MIXTAPE_CUDA_EMULATOR)
#include "tests/cuda_emulator/emulator.h"
#endif
#endif

namespace mixtape {
namespace {

// n batches of 4 samples (3 floats each); sample i holds i + 0.5, i + 0.25, i + 0.125, target i.
std::shared_ptr<data::Dataset> numbered(int64_t batches) {
  const int64_t n = batches * 4;
  std::vector<double> x, y;
  for (int64_t i = 0; i < n; ++i) {
    x.insert(x.end(), {i + 0.5, i + 0.25, i + 0.125});
    y.push_back(static_cast<double>(i));
  }
  return std::make_shared<data::TensorDataset>(tensor(x, {n, 3}, TensorOptions(DType::Float32)),
                                               tensor(y, {n}, TensorOptions(DType::Int64)));
}

[[maybe_unused]] bool same(  // unused where the device tests compile out (no CUDA)
    const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(Device::CPU()), y = b.to(Device::CPU());
  return x.sizes() == y.sizes() && x.dtype() == y.dtype() && x.to_vector<double>() == y.to_vector<double>();
}

TEST(DevicePrefetcher, OnTheCpuBatchesPassThroughInTheLoadersOrder) {
  data::DataLoader loader(numbered(3), {.batch_size = 4, .shuffle = true, .seed = 7, .prefetch = 0});
  data::DevicePrefetcher batches(loader, Device::CPU());
  EXPECT_EQ(batches.copier(), nullptr);
  std::vector<double> seen;
  for (const data::DeviceBatch& b : batches) {
    EXPECT_EQ(b.device.data.data_ptr(), b.host.data.data_ptr());
    for (double t : b.host.target.to_vector<double>()) seen.push_back(t);
  }
  std::vector<double> want;
  for (int64_t i : loader.order_for_epoch(0)) want.push_back(static_cast<double>(i));
  EXPECT_EQ(seen, want);
  if (!cuda::is_available())
    try {
      data::DevicePrefetcher on_gpu(loader, Device::CUDA(0));
      ADD_FAILURE() << "a CUDA prefetcher without CUDA";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("data::DevicePrefetcher"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(cuda::unavailable_reason()), std::string::npos) << e.what();
    }
}

#if defined(MIXTAPE_WITH_CUDA)

TEST(PinnedMemory, PinMemoryCopiesIntoPageLockedMemory) {
  REQUIRE_GPU();
  const Tensor t = tensor({1.0, 2.0, 3.0, 4.0}, {2, 2}, TensorOptions(DType::Float32));
  EXPECT_FALSE(cuda::is_pinned(t));
  const Tensor p = cuda::pin_memory(t.transpose(0, 1));
  EXPECT_TRUE(cuda::is_pinned(p));
  EXPECT_TRUE(p.device().is_cpu());
  EXPECT_TRUE(p.is_contiguous());
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{1, 3, 2, 4}));
  EXPECT_EQ(cuda::pin_memory(p).data_ptr(), p.data_ptr()) << "pinned already: itself";
  EXPECT_FALSE(cuda::is_pinned(t.to(Device::CUDA(0))));
  try {
    cuda::pin_memory(t.to(Device::CUDA(0)));
    ADD_FAILURE() << "a CUDA tensor was pinned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda::pin_memory: only CPU tensors can be pinned, got a tensor on cuda:0"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(cuda::is_pinned(cuda::empty_pinned({3}, DType::Int64)));
}

// tensor.to(cuda) from pinned memory has PyTorch's non_blocking=false meaning, as from pageable
// memory: when it returns the source may be rewritten or freed. (A DMA from pinned memory reads
// the host bytes when the stream runs it: on the emulator's created stream, only when ordered.)
TEST(PinnedMemory, ToDeviceFromPinnedMemoryMayBeRewrittenOrFreedAtOnce) {
  REQUIRE_GPU();
  cuda::OwnedStream s;
  cuda::StreamGuard on(s.get());
  Tensor p = cuda::pin_memory(tensor({1.0, 2.0, 3.0}, {3}, TensorOptions(DType::Float32)));
  const Tensor d = p.to(Device::CUDA(0));
  fill_(p, 7.0);  // the host reuses its buffer, as after any blocking copy
  EXPECT_EQ(d.to(Device::CPU()).to_vector<float>(), (std::vector<float>{1, 2, 3}));
  // The pinned temporary is freed at the end of the statement (on the emulator, a cudaFreeHost
  // under a queued copy faults).
  const Tensor freed = cuda::pin_memory(tensor({4.0, 5.0}, {2}, TensorOptions(DType::Float32))).to(Device::CUDA(0));
  EXPECT_EQ(freed.to(Device::CPU()).to_vector<float>(), (std::vector<float>{4, 5}));
}

// A created stream as the consumer: its work waits in its queue until something orders it.
struct ConsumerStream {
  ConsumerStream() { stream = cuda::create_stream(); }
  ~ConsumerStream() { (void)cudaStreamDestroy(stream); }
  cudaStream_t stream = nullptr;
};

// Nothing drains the consumer while the loop runs: on the emulator every copy is still queued
// when the next batch is staged, and each batch is read (mul) by consumer work queued behind its
// copy, then dropped (its memory goes back to the consumer's pool for the next batches). A
// staging slot rewritten before its copy ran would give a batch a later batch's values; a copy
// not ordered after the consumer's work would overwrite a dropped batch before its reader ran.
// On a GPU the same checks hold whatever the timing.
TEST(DevicePrefetcher, StagingAndDeviceMemoryAreReusedOnlyAfterTheirCopiesAndReaders) {
  REQUIRE_GPU();
  ConsumerStream consumer;
  cuda::StreamGuard on(consumer.stream);
  const int64_t nb = 3 * static_cast<int64_t>(data::BatchCopier::kMaxSlots);
  data::DataLoader loader(numbered(nb), {.batch_size = 4, .prefetch = 0});
  data::DevicePrefetcher batches(loader, Device::CUDA(0));
  std::vector<Tensor> read, want;
  for (const data::DeviceBatch& b : batches) {
    read.push_back(mul(b.device.data, 1.0));
    want.push_back(b.host.data);
  }
  ASSERT_EQ(static_cast<int64_t>(read.size()), nb);
  EXPECT_LE(batches.copier()->staging_slots(), data::BatchCopier::kMaxSlots);
#if defined(MIXTAPE_CUDA_EMULATOR)
  if (cuda_emulator::streams_deferred())  // every copy was still queued: all slots were needed
    EXPECT_EQ(batches.copier()->staging_slots(), data::BatchCopier::kMaxSlots);
#endif
  for (size_t i = 0; i < read.size(); ++i) EXPECT_TRUE(same(read[i], want[i])) << "batch " << i;
}

// A loop run to its end on a consumer that has not run its work yet: the last copies are still
// queued when the prefetcher goes, and its staging slots must outlive them (the emulator faults on
// pinned memory freed under a queued copy).
TEST(DevicePrefetcher, ItsStagingOutlivesTheLastCopies) {
  REQUIRE_GPU();
  ConsumerStream consumer;
  cuda::StreamGuard on(consumer.stream);
  data::DataLoader loader(numbered(2), {.batch_size = 4, .prefetch = 0});
  std::vector<Tensor> read, want;
  {
    data::DevicePrefetcher batches(loader, Device::CUDA(0));
    for (const data::DeviceBatch& b : batches) {
      read.push_back(mul(b.device.data, 1.0));
      want.push_back(b.host.data);
    }
  }
  ASSERT_EQ(read.size(), 2u);
  for (size_t i = 0; i < read.size(); ++i) EXPECT_TRUE(same(read[i], want[i])) << "batch " << i;
}


// A prefetcher for cuda:1 driven while cuda:0 is current: its copies, events and consumer are cuda:1's.
TEST(DevicePrefetcher, ASecondDeviceGetsItsBatchesWhileTheFirstIsCurrent) {
  REQUIRE_GPU();
  if (cuda::device_count() < 2) GTEST_SKIP() << "one device";
  data::DataLoader loader(numbered(5), {.batch_size = 4, .prefetch = 0});
  data::DevicePrefetcher batches(loader, Device::CUDA(1));
  int n = 0;
  for (const data::DeviceBatch& b : batches) {
    EXPECT_EQ(b.device.data.device(), Device::CUDA(1));
    EXPECT_TRUE(same(b.device.data, b.host.data)) << n;
    EXPECT_TRUE(same(b.device.target, b.host.target)) << n;
    ++n;
  }
  EXPECT_EQ(n, 5);
}

#if defined(MIXTAPE_CUDA_EMULATOR)
using cuda_emulator::host_waits;

TEST(DevicePrefetcher, CopiesRunOnTheCopyStreamAndTheConsumerWaitsForThem) {
  REQUIRE_GPU();
  if (!cuda_emulator::streams_deferred()) GTEST_SKIP() << "MIXTAPE_CUDA_EMULATOR_STREAMS=immediate";
  ConsumerStream consumer;
  cuda::StreamGuard on(consumer.stream);
  data::DataLoader loader(numbered(3), {.batch_size = 4, .prefetch = 0});
  data::DevicePrefetcher batches(loader, Device::CUDA(0));
  const cudaStream_t copy = batches.copier()->copy_stream();
  ASSERT_NE(copy, consumer.stream);
  int n = 0;
  uint64_t on_consumer = cuda_emulator::copies_enqueued(consumer.stream);
  auto it = batches.begin();
  uint64_t on_copy = cuda_emulator::copies_enqueued(copy);
  EXPECT_EQ(on_copy, 4u) << "begin(): batch 0's data and target, then batch 1's";
  EXPECT_EQ(cuda_emulator::copies_enqueued(consumer.stream), on_consumer);
  for (; it != batches.end(); ++it) {
    const data::DeviceBatch& b = *it;
    SCOPED_TRACE(n);
    if (n > 0) {  // ++: the next batch's data and target, on the copy stream only
      EXPECT_EQ(cuda_emulator::copies_enqueued(copy) - on_copy, n < 2 ? 2u : 0u);
      EXPECT_EQ(cuda_emulator::copies_enqueued(consumer.stream), on_consumer);
    }
    EXPECT_EQ(b.device.data.device(), Device::CUDA(0));
    // The consumer runs what it has (its wait for this batch's copy included); the next batch's
    // copy, started after it, is still queued on the copy stream: it is not the consumer's.
    ASSERT_EQ(cudaStreamSynchronize(consumer.stream), cudaSuccess);
    EXPECT_EQ(cudaStreamQuery(copy), n < 2 ? cudaErrorNotReady : cudaSuccess);
    EXPECT_TRUE(same(b.device.data, b.host.data));
    EXPECT_TRUE(same(b.device.target, b.host.target));
    on_copy = cuda_emulator::copies_enqueued(copy);
    on_consumer = cuda_emulator::copies_enqueued(consumer.stream);  // after this test's own reads
    ++n;
  }
  EXPECT_EQ(n, 3);
}

// The main program's eager step shape: one host read per step (the loss). With the prefetcher
// the step waits exactly as often as with a plain copy, and two staging slots do.
TEST(DevicePrefetcher, ATrainingStepWaitsNoMoreThanWithPlainCopies) {
  REQUIRE_GPU();
  if (!cuda_emulator::streams_deferred()) GTEST_SKIP() << "MIXTAPE_CUDA_EMULATOR_STREAMS=immediate";
  ConsumerStream consumer;
  cuda::StreamGuard on(consumer.stream);
  const Tensor w = tensor({0.5, -1.0, 2.0}, {3}, TensorOptions(DType::Float32)).to(Device::CUDA(0));
  auto step = [&](const Tensor& x, const Tensor& y) {
    return sum(mul(x, w)).item<double>() + sum(y).item<double>();
  };
  data::DataLoader loader(numbered(6), {.batch_size = 4, .prefetch = 0});
  // The whole loops, the loader's and the prefetcher's own steps (taking, staging) included.
  std::vector<double> plain_loss, prefetched_loss;
  uint64_t before = host_waits();
  for (const data::Batch& b : loader) plain_loss.push_back(step(b.data.to(Device::CUDA(0)), b.target.to(Device::CUDA(0))));
  const uint64_t plain = host_waits() - before;
  data::DevicePrefetcher batches(loader, Device::CUDA(0));
  before = host_waits();
  for (const data::DeviceBatch& b : batches) prefetched_loss.push_back(step(b.device.data, b.device.target));
  const uint64_t prefetched = host_waits() - before;
  EXPECT_EQ(plain, 6u * 2u) << "two reads per step";
  EXPECT_EQ(prefetched_loss, plain_loss);
  EXPECT_EQ(prefetched, plain);
  EXPECT_LE(batches.copier()->staging_slots(), 2u);
}

#endif  // MIXTAPE_CUDA_EMULATOR
#endif  // MIXTAPE_WITH_CUDA

}  // namespace
}  // namespace mixtape
