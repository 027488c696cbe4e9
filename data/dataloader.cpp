// data/dataloader.cpp — the epoch iterator and its prefetching worker.
#include "data/dataloader.h"

#include <numeric>

namespace mixtape::data {

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), opt_(std::move(options)) {
  MT_CHECK(dataset_ != nullptr, "DataLoader: dataset is null");
  MT_CHECK(opt_.batch_size > 0, "DataLoader: batch_size must be positive, got ", opt_.batch_size);
  MT_CHECK(opt_.prefetch >= 0, "DataLoader: prefetch must be >= 0, got ", opt_.prefetch);
  MT_CHECK(!(opt_.sampler && opt_.shuffle), "DataLoader: sampler and shuffle are mutually exclusive (the sampler "
           "decides the order; DistributedSampler shuffles itself)");
}

DataLoader::~DataLoader() { stop_worker(); }

int64_t DataLoader::num_batches() const {
  int64_t n = opt_.sampler ? opt_.sampler->size() : dataset_->size();
  return opt_.drop_last ? n / opt_.batch_size : (n + opt_.batch_size - 1) / opt_.batch_size;
}

std::vector<int64_t> DataLoader::order_for_epoch(int64_t e) const {
  if (opt_.sampler) return opt_.sampler->indices(e);
  if (opt_.shuffle) return seeded_permutation(dataset_->size(), opt_.seed, e);
  std::vector<int64_t> order(static_cast<size_t>(dataset_->size()));
  std::iota(order.begin(), order.end(), 0);
  return order;
}

Batch DataLoader::make_batch(int64_t epoch, int64_t index, const std::vector<int64_t>& order) const {
  int64_t b0 = index * opt_.batch_size;
  int64_t b1 = std::min<int64_t>(b0 + opt_.batch_size, static_cast<int64_t>(order.size()));
  std::vector<int64_t> idx(order.begin() + b0, order.begin() + b1);
  Batch b = dataset_->get_batch(idx);
  if (opt_.transform) {
    Generator g(opt_.seed ^ (static_cast<uint64_t>(epoch) << 32) ^ (static_cast<uint64_t>(index) * 0x2545F4914F6CDD1Dull));
    b = opt_.transform(std::move(b), g);
  }
  return b;
}

void DataLoader::stop_worker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

DataLoader::Iterator DataLoader::begin() {
  stop_worker();
  cur_epoch_ = epoch_++;
  order_ = order_for_epoch(cur_epoch_);
  next_index_ = 0;
  produced_ = 0;
  queue_.clear();
  error_ = nullptr;
  stop_ = false;
  done_ = false;
  if (opt_.prefetch > 0) {
    worker_ = std::thread([this] {
      int64_t n = num_batches();
      for (int64_t i = 0; i < n; ++i) {
        Batch b;
        try {
          b = make_batch(cur_epoch_, i, order_);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu_);
          error_ = std::current_exception();
          done_ = true;
          cv_.notify_all();
          return;
        }
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || static_cast<int>(queue_.size()) < opt_.prefetch; });
        if (stop_) return;
        queue_.push_back(std::move(b));
        cv_.notify_all();
      }
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      cv_.notify_all();
    });
  }
  return Iterator(this);
}

bool DataLoader::next(Batch& out) {
  if (opt_.prefetch == 0) {
    if (next_index_ >= num_batches()) return false;
    out = make_batch(cur_epoch_, next_index_++, order_);
    return true;
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !queue_.empty() || done_; });
  if (queue_.empty()) {
    if (error_) std::rethrow_exception(error_);
    return false;
  }
  out = std::move(queue_.front());
  queue_.pop_front();
  cv_.notify_all();
  return true;
}

DataLoader::Iterator::Iterator(DataLoader* loader) : loader_(loader) {
  if (loader_ && !loader_->next(current_)) loader_ = nullptr;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  if (loader_ && !loader_->next(current_)) loader_ = nullptr;
  return *this;
}

}  // namespace mixtape::data
