// data/cuda/batch_copier.cpp — host batches to the device on a copy stream (rules in batch_copier.h).
#include "data/cuda/batch_copier.h"

#include <cstring>
#include <iostream>

#include "core/cuda/check.h"
#include "core/cuda/graph.h"
#include "core/cuda/pinned_memory.h"

namespace mixtape::data {
namespace {
constexpr const char* kOp = "data::BatchCopier";
constexpr size_t kAlign = 256;  // the target's bytes start on a fresh 256-byte line of the slot
size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

BatchCopier::BatchCopier(int device) : device_(device) {
  cuda::DeviceGuard on(device_);
  copy_ = cuda::create_stream();
  consumer_mark_ = std::make_unique<cuda::Event>();
}

BatchCopier::~BatchCopier() {
  try {
    cuda::DeviceGuard on(device_);
    // Even with every batch taken, the last copies may still be reading the staging slots, which
    // are freed next (the consumer's wait for them is on the device, not the host).
    MT_CUDA_CHECK(cudaStreamSynchronize(copy_), kOp);
    started_.clear();
    MT_CUDA_CHECK(cudaStreamDestroy(copy_), kOp);
  } catch (const std::exception& e) {
    std::cerr << "mixtape: " << kOp << " teardown: " << e.what() << std::endl;
  }
}

BatchCopier::Slot& BatchCopier::free_slot() {
  for (auto& s : slots_)
    if (!s->busy) return *s;
  for (auto& s : slots_)
    if (s->copied.query()) {  // done: no host wait
      s->busy = false;
      return *s;
    }
  if (slots_.size() < kMaxSlots) {
    slots_.push_back(std::make_unique<Slot>());
    return *slots_.back();
  }
  // Every slot's copy still queued: the host is kMaxSlots batches ahead of the copy stream.
  Slot* oldest = slots_.front().get();
  for (auto& s : slots_)
    if (s->issued < oldest->issued) oldest = s.get();
  oldest->copied.synchronize();
  oldest->busy = false;
  return *oldest;
}

void BatchCopier::start(const Batch& b) {
  cuda::check_not_capturing(kOp, "starts a host-to-device batch copy");
  MT_CHECK(b.data.defined() && b.target.defined(), kOp, ": the batch has an undefined data or target tensor");
  MT_CHECK(b.data.device().is_cpu() && b.target.device().is_cpu(), kOp, ": expected a host batch, got data on ",
           b.data.device(), " and target on ", b.target.device());
  cuda::DeviceGuard on(device_);
  const cudaStream_t consumer = cuda::current_stream();
  const Tensor x = b.data.contiguous(), y = b.target.contiguous();
  const size_t xb = x.nbytes(), yb = y.nbytes(), y_at = round_up(xb);
  Slot& slot = free_slot();
  if (!slot.staging.defined() || slot.staging.nbytes() < y_at + yb)
    slot.staging = cuda::empty_pinned({static_cast<int64_t>(y_at + yb)}, DType::UInt8);  // the old one's copy is done
  auto* base = static_cast<unsigned char*>(slot.staging.data_ptr());
  if (xb) std::memcpy(base, x.data_ptr(), xb);
  if (yb) std::memcpy(base + y_at, y.data_ptr(), yb);
  const Device dev = Device::CUDA(device_);
  Batch out{Tensor::empty(x.sizes(), TensorOptions(x.dtype()).with_device(dev)),
            Tensor::empty(y.sizes(), TensorOptions(y.dtype()).with_device(dev))};
  // The copy writes memory the consumer may have used until now (freed batches): after its work.
  consumer_mark_->record(consumer);
  consumer_mark_->wait(copy_);
  if (xb) MT_CUDA_CHECK(cudaMemcpyAsync(out.data.data_ptr(), base, xb, cudaMemcpyHostToDevice, copy_), kOp);
  if (yb) MT_CUDA_CHECK(cudaMemcpyAsync(out.target.data_ptr(), base + y_at, yb, cudaMemcpyHostToDevice, copy_), kOp);
  slot.copied.record(copy_);
  slot.busy = true;
  slot.issued = ++starts_;
  started_.push_back(Started{std::move(out), &slot, consumer});
}

Batch BatchCopier::take() {
  MT_CHECK(!started_.empty(), kOp, ".take: no batch was started");
  cuda::DeviceGuard on(device_);
  const cudaStream_t consumer = cuda::current_stream();
  MT_CHECK(consumer == started_.front().consumer, kOp, ".take: the batch was started for another stream than the "
           "current one (its device memory belongs to that stream's allocations); take it on the stream that was "
           "current at start()");
  Started s = std::move(started_.front());
  started_.pop_front();
  // The slot's event is this batch's copy, or a later copy on the same stream (a slot is reused
  // once its copy is done): waiting for it orders the consumer after this batch's copy either way.
  s.slot->copied.wait(consumer);
  return std::move(s.device);
}

void BatchCopier::discard() {
  if (started_.empty()) return;
  cuda::DeviceGuard on(device_);
  // The batches' memory goes back to the consumer's pool: their copies must be done first.
  MT_CUDA_CHECK(cudaStreamSynchronize(copy_), kOp);
  started_.clear();
}

}  // namespace mixtape::data
