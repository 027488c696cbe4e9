// data/device_prefetcher.cpp — a loader's batches on the device, one copy ahead (rules in
// device_prefetcher.h; the CUDA copies in data/cuda/batch_copier.cpp).
#include "data/device_prefetcher.h"

#include "core/cuda_api.h"
#include "core/error.h"

#if defined(MIXTAPE_WITH_CUDA)
#include "data/cuda/batch_copier.h"
#else
namespace mixtape::data {
class BatchCopier {};  // never made: CUDA devices are refused in this build
}  // namespace mixtape::data
#endif

namespace mixtape::data {

DevicePrefetcher::DevicePrefetcher(DataLoader& loader, Device device) : loader_(loader), device_(device) {
  if (!device.is_cuda()) return;
  cuda::check_device(device.index(), "data::DevicePrefetcher");
#if defined(MIXTAPE_WITH_CUDA)
  copier_ = std::make_unique<BatchCopier>(device.index());
#endif
}

DevicePrefetcher::~DevicePrefetcher() = default;

DevicePrefetcher::Iterator DevicePrefetcher::begin() {
#if defined(MIXTAPE_WITH_CUDA)
  if (copier_) copier_->discard();
#endif
  host_ahead_.clear();
  it_.emplace(loader_.begin());
  if (copier_) start_next();
  return Iterator(this);
}

// CUDA: the loader's next batch, if any, into the copier.
void DevicePrefetcher::start_next() {
#if defined(MIXTAPE_WITH_CUDA)
  if (!(*it_ != loader_.end())) return;
  host_ahead_.push_back(**it_);
  copier_->start(host_ahead_.back());
  ++*it_;
#endif
}

bool DevicePrefetcher::advance(DeviceBatch& out) {
  if (!copier_) {  // the CPU: pass through
    if (!(*it_ != loader_.end())) return false;
    out = DeviceBatch{**it_, **it_};
    ++*it_;
    return true;
  }
#if defined(MIXTAPE_WITH_CUDA)
  if (host_ahead_.empty()) return false;
  out.host = std::move(host_ahead_.front());
  host_ahead_.pop_front();
  out.device = copier_->take();  // the consumer waits for this copy
  start_next();                  // the next copy overlaps the work queued on this batch
  return true;
#else
  return false;
#endif
}

DevicePrefetcher::Iterator::Iterator(DevicePrefetcher* owner) : owner_(owner) {
  if (owner_ && !owner_->advance(current_)) owner_ = nullptr;
}

DevicePrefetcher::Iterator& DevicePrefetcher::Iterator::operator++() {
  if (owner_ && !owner_->advance(current_)) owner_ = nullptr;
  return *this;
}

}  // namespace mixtape::data
