// data/dataset.h — what a data loader reads from: a sized collection of (data, target)
// examples that can also hand out whole batches (the fast path for in-memory datasets).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace mixtape::data {

struct Example {
  Tensor data;    // one sample, e.g. (H, W) u8 or (C, H, W)
  Tensor target;  // 0-d Int64 class index
};

struct Batch {
  Tensor data;    // (B, ...)
  Tensor target;  // (B) Int64
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
  // Default: get() each index and stack. In-memory datasets override with a row copy.
  virtual Batch get_batch(const std::vector<int64_t>& indices) const;
};

// Samples held as one tensor (N, ...) with targets (N).
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor data, Tensor targets);
  int64_t size() const override { return data_.size(0); }
  Example get(int64_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  const Tensor& data() const { return data_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor data_, targets_;
};

}  // namespace mixtape::data
