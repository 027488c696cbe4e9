// data/dataset.cpp — batch assembly by row copies.
#include "data/dataset.h"

#include <cstring>

#include "ops/cast.h"

namespace mixtape::data {

namespace {
// Copies rows `indices` of a contiguous (N, ...) tensor into a new (B, ...) tensor.
Tensor gather_rows(const Tensor& src, const std::vector<int64_t>& indices, const char* op) {
  IntList sizes = src.sizes();
  int64_t n = sizes[0];
  sizes[0] = static_cast<int64_t>(indices.size());
  Tensor out = Tensor::empty(sizes, TensorOptions(src.dtype()));
  size_t row = src.numel() / std::max<int64_t>(n, 1) * src.element_size();
  const char* s = static_cast<const char*>(src.data_ptr());
  char* d = static_cast<char*>(out.data_ptr());
  for (size_t i = 0; i < indices.size(); ++i) {
    MT_CHECK(indices[i] >= 0 && indices[i] < n, op, ": index ", indices[i], " out of range for a dataset of ", n);
    std::memcpy(d + i * row, s + indices[i] * static_cast<int64_t>(row), row);
  }
  return out;
}
}  // namespace

Batch Dataset::get_batch(const std::vector<int64_t>& indices) const {
  MT_CHECK(!indices.empty(), "Dataset::get_batch: empty batch");
  std::vector<Example> ex;
  for (int64_t i : indices) ex.push_back(get(i));
  IntList sizes = ex[0].data.sizes();
  sizes.insert(sizes.begin(), static_cast<int64_t>(ex.size()));
  Tensor data = Tensor::empty(sizes, TensorOptions(ex[0].data.dtype()));
  Tensor target = Tensor::empty({static_cast<int64_t>(ex.size())}, TensorOptions(DType::Int64));
  size_t row = ex[0].data.nbytes();
  for (size_t i = 0; i < ex.size(); ++i) {
    MT_CHECK(ex[i].data.sizes() == ex[0].data.sizes() && ex[i].data.dtype() == ex[0].data.dtype(),
             "Dataset::get_batch: sample ", indices[i], " is ", ex[i].data.describe(), " but sample ", indices[0], " is ",
             ex[0].data.describe(), " (samples in a batch must match)");
    Tensor c = contiguous(ex[i].data);
    std::memcpy(static_cast<char*>(data.data_ptr()) + i * row, c.data_ptr(), row);
    target.data_ptr<int64_t>()[i] = ex[i].target.item<int64_t>();
  }
  return {data, target};
}

TensorDataset::TensorDataset(Tensor data, Tensor targets) : data_(contiguous(data)), targets_(targets) {
  MT_CHECK(data_.dim() >= 1 && targets_.dim() == 1 && data_.size(0) == targets_.size(0),
           "TensorDataset: expected data (N, ...) and targets (N), got ", data_.describe(), " and ", targets_.describe());
  MT_CHECK(targets_.dtype() == DType::Int64, "TensorDataset: targets must be Int64, got ", targets_.describe());
  targets_ = contiguous(targets_);
}

Example TensorDataset::get(int64_t index) const {
  Batch b = get_batch({index});
  return {b.data.select(0, 0), b.target.select(0, 0)};
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  return {gather_rows(data_, indices, "TensorDataset"), gather_rows(targets_, indices, "TensorDataset")};
}

}  // namespace mixtape::data
