// models/layers/batchnorm.h — nn::BatchNorm2d: per-channel normalisation of (N, C, H, W) with
// batch statistics in training and running statistics in eval, as torch.nn.BatchNorm2d.
//
// Precision-sensitive: Module::to(Float16 | BFloat16) keeps its parameters and running
// statistics in Float32 (keep_batchnorm_fp32, mixtape's AMP decision); batch_norm accepts a
// 16-bit input with f32 statistics and returns the input's dtype.
#pragma once
#include <optional>

#include "models/module.h"

namespace mixtape::nn {

struct BatchNormOptions {
  double eps = 1e-5;
  // Weight of the new batch statistic in the running average; nullopt = cumulative moving
  // average (1 / num_batches_tracked), PyTorch's momentum=None.
  std::optional<double> momentum = 0.1;
  bool affine = true;               // learnable weight (ones) and bias (zeros)
  bool track_running_stats = true;  // running_mean, running_var, num_batches_tracked buffers
};

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions options = {});

  // x: (N, C, H, W) -> same shape and dtype.
  Tensor forward(const Tensor& x) override;
  void reset_running_stats();
  void reset_parameters();
  std::string extra_repr() const override;
  bool is_precision_sensitive() const override { return true; }

  int64_t num_features;
  BatchNormOptions options;
  Tensor weight, bias;                // (C) f32, or undefined without affine
  Tensor running_mean, running_var;   // (C) f32, or undefined without track_running_stats
  Tensor num_batches_tracked;         // () i64, or undefined without track_running_stats
};

}  // namespace mixtape::nn
