// core/storage.h — a refcounted buffer of bytes on one device. Tensors and their views share a
// Storage; the version counter lives here too, so every alias sees an in-place write (autograd
// uses it to detect tensors modified after they were saved for backward).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/allocator.h"
#include "core/device.h"

namespace mixtape {

class StorageImpl {
 public:
  // Allocates nbytes from the device's allocator.
  StorageImpl(size_t nbytes, Device device);
  // Wraps memory owned elsewhere; `deleter` (may be empty) runs when the last user lets go.
  StorageImpl(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;          // set when we allocated the bytes
  std::function<void(void*)> deleter_;      // set for external buffers
  std::atomic<uint32_t> version_{0};
};

using Storage = std::shared_ptr<StorageImpl>;

}  // namespace mixtape
