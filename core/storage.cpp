// core/storage.cpp — storage lifetime.
#include "core/storage.h"

namespace mixtape {

StorageImpl::StorageImpl(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), allocator_(get_allocator(device)) {
  data_ = allocator_->allocate_on(device, nbytes);
}

StorageImpl::StorageImpl(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

StorageImpl::~StorageImpl() {
  if (allocator_) {
    allocator_->deallocate(data_, nbytes_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace mixtape
