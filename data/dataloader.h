// data/dataloader.h — batches from a Dataset: optional seeded shuffling (a new permutation per
// epoch), drop_last, a transform, and a background thread that prepares the next `prefetch`
// batches while the model trains on the current one.
//
//   DataLoader loader(train_set, {.batch_size = 128, .shuffle = true, .seed = 0});
//   for (const Batch& b : loader) { ... }       // one epoch; the next loop is the next epoch
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "data/dataset.h"
#include "data/sampler.h"
#include "data/transforms.h"

namespace mixtape::data {

struct DataLoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = false;
  uint64_t seed = 0;
  bool drop_last = false;
  int prefetch = 2;          // batches prepared ahead; 0 = prepare in the calling thread
  Transform transform;       // optional; its random draws come from (seed, epoch, batch index)
  // Optional: the epoch's indices (DistributedSampler for one rank's shard); excludes shuffle.
  std::shared_ptr<const Sampler> sampler;
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  class Iterator {
   public:
    const Batch& operator*() const { return current_; }
    const Batch* operator->() const { return &current_; }
    Iterator& operator++();
    bool operator!=(const Iterator& o) const { return loader_ != o.loader_; }

   private:
    friend class DataLoader;
    explicit Iterator(DataLoader* loader);
    DataLoader* loader_ = nullptr;  // null: end
    Batch current_;
  };

  Iterator begin();  // starts the next epoch
  Iterator end() { return Iterator(nullptr); }
  int64_t num_batches() const;
  int64_t epoch() const { return epoch_; }  // epochs started so far
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  // The sample order of epoch e (a seeded permutation when shuffling).
  std::vector<int64_t> order_for_epoch(int64_t e) const;
  const Dataset& dataset() const { return *dataset_; }

 private:
  Batch make_batch(int64_t epoch, int64_t index, const std::vector<int64_t>& order) const;
  bool next(Batch& out);
  void stop_worker();

  std::shared_ptr<Dataset> dataset_;
  DataLoaderOptions opt_;
  int64_t epoch_ = 0;
  // Current epoch state.
  std::vector<int64_t> order_;
  int64_t cur_epoch_ = 0, next_index_ = 0, produced_ = 0;
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  std::exception_ptr error_;
  bool stop_ = false, done_ = false;
};

}  // namespace mixtape::data
