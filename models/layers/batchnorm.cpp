// models/layers/batchnorm.cpp — nn::BatchNorm2d (torch.nn.modules.batchnorm._BatchNorm.forward).
#include "models/layers/batchnorm.h"

#include "autograd/checkpoint.h"

#include "autograd/grad_mode.h"
#include "models/init.h"
#include "models/layers/detail.h"
#include "ops/creation.h"
#include "ops/normalization.h"

namespace mixtape::nn {

BatchNorm2d::BatchNorm2d(int64_t c, BatchNormOptions o) : num_features(c), options(o) {
  MT_CHECK(c > 0, "BatchNorm2d: num_features must be positive, got ", c);
  MT_CHECK(o.eps > 0, "BatchNorm2d: eps must be positive, got ", o.eps);
  MT_CHECK(!o.momentum || (*o.momentum >= 0 && *o.momentum <= 1), "BatchNorm2d: momentum must be in [0, 1], got ",
           *o.momentum);
  if (o.affine) {
    weight = register_parameter("weight", empty({c}));
    bias = register_parameter("bias", empty({c}));
  }
  if (o.track_running_stats) {
    running_mean = register_buffer("running_mean", empty({c}));
    running_var = register_buffer("running_var", empty({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, DType::Int64));
  }
  reset_parameters();
}

void BatchNorm2d::reset_running_stats() {
  if (!options.track_running_stats) return;
  init::zeros_(running_mean);
  init::ones_(running_var);
  NoGradGuard no_grad;
  fill_(num_batches_tracked, 0);
}

void BatchNorm2d::reset_parameters() {
  reset_running_stats();
  if (options.affine) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  if (!x.defined() || x.dim() != 4 || x.size(1) != num_features)
    input_error(detail::str_cat("num_features=", num_features),
                detail::str_cat("expected a 4-D input [N, ", num_features, ", H, W], got ",
                                x.defined() ? x.describe() : std::string("an undefined tensor")));
  double factor = options.momentum.value_or(0.0);
  // A checkpointed segment rerun in backward already updated the statistics in its forward.
  const bool recompute = autograd::in_checkpoint_recompute();
  // The batch counter, counted where the buffer lives, without reading it back (on a GPU a read
  // would stop the host at every batch-norm layer): batch_norm adds 1 to it in the kernel that
  // updates the running statistics, so counting costs no launch. Only momentum=None (a
  // cumulative average, whose factor is 1 / count) needs the count first and reads it, as
  // PyTorch does.
  Tensor counter;
  if (is_training() && options.track_running_stats && !recompute) {
    if (options.momentum) {
      counter = num_batches_tracked;
    } else {
      NoGradGuard no_grad;
      num_batches_tracked.add_(ones({}, TensorOptions(DType::Int64).with_device(num_batches_tracked.device())));
      factor = 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>());
    }
  }
  // Batch statistics in training, or in eval when there are no running statistics.
  bool use_batch_stats = is_training() || !options.track_running_stats;
  if (use_batch_stats && recompute) return batch_norm(x, {}, {}, weight, bias, true, factor, options.eps);
  return batch_norm(x, running_mean, running_var, weight, bias, use_batch_stats, factor, options.eps, counter);
}

std::string BatchNorm2d::extra_repr() const {
  std::string m = options.momentum ? detail::str_cat(*options.momentum) : "None";
  return detail::str_cat(num_features, ", eps=", options.eps, ", momentum=", m,
                         ", affine=", options.affine ? "True" : "False",
                         ", track_running_stats=", options.track_running_stats ? "True" : "False");
}

}  // namespace mixtape::nn
