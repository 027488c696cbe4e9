// data/device_prefetcher.h — data::DevicePrefetcher: a DataLoader's batches on the training
// device, the next one's host-to-device copy running while the current one trains.
//
//   DevicePrefetcher batches(loader, Device::CUDA(0));
//   for (const DeviceBatch& b : batches) { model(b.device.data) ... b.host.target ... }
//
// On CUDA (data/cuda/batch_copier.h) handing out batch N starts batch N+1's copy: the host bytes
// go to a pinned staging buffer, a copy stream of the prefetcher's own copies them into device
// tensors, and the stream that was current at that moment (the consumer: keep it the same for the
// whole loop) waits for that copy's event when batch N+1 is handed out. Ordering and why:
// docs/CUDA.md, "The data path". On the CPU each batch passes through (host and device alike).
// Invariant: the batches come in the loader's order, each exactly once per epoch; a device batch
// is ready for the consumer's work queued after it was handed out, and stays valid as long as it
// is held, as any tensor.
#pragma once
#include <deque>
#include <memory>
#include <optional>

#include "data/dataloader.h"

namespace mixtape::data {

class BatchCopier;  // CUDA builds: data/cuda/batch_copier.h

// One batch: the loader's (CPU), and the same values on the prefetcher's device.
struct DeviceBatch {
  Batch host;
  Batch device;
};

class DevicePrefetcher {
 public:
  // `loader` must outlive the prefetcher. A CUDA device needs a CUDA build with a usable GPU
  // (refused naming the reason).
  DevicePrefetcher(DataLoader& loader, Device device);
  ~DevicePrefetcher();
  DevicePrefetcher(const DevicePrefetcher&) = delete;
  DevicePrefetcher& operator=(const DevicePrefetcher&) = delete;

  class Iterator {
   public:
    const DeviceBatch& operator*() const { return current_; }
    const DeviceBatch* operator->() const { return &current_; }
    Iterator& operator++();
    bool operator!=(const Iterator& o) const { return owner_ != o.owner_; }

   private:
    friend class DevicePrefetcher;
    explicit Iterator(DevicePrefetcher* owner);
    DevicePrefetcher* owner_ = nullptr;  // null: end
    DeviceBatch current_;
  };

  // Starts the loader's next epoch (a batch still in flight from a loop left early is dropped).
  Iterator begin();
  Iterator end() { return Iterator(nullptr); }
  Device device() const { return device_; }
  // The CUDA copier (its copy stream, its staging slots): for tests. Null on the CPU.
  const BatchCopier* copier() const { return copier_.get(); }

 private:
  bool advance(DeviceBatch& out);
  void start_next();

  DataLoader& loader_;
  Device device_;
  std::optional<DataLoader::Iterator> it_;  // the loader's position: the next host batch
  std::deque<Batch> host_ahead_;            // host batches whose copies are started
  std::unique_ptr<BatchCopier> copier_;
};

}  // namespace mixtape::data
