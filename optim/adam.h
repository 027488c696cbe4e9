// optim/adam.h — Adam and AdamW, PyTorch 1.13's torch.optim.Adam / AdamW element for element
// (formulas in optim/optim_functors.h, fn::AdamUpdate): bias-corrected moments, eps added outside
// the square root, optional AMSGrad. Adam's weight_decay is L2 (added to the gradient); AdamW's is
// decoupled (p *= 1 - lr * weight_decay before the moment update). The step count t is per
// parameter: a parameter without a gradient in some step is not counted.
// 16-bit parameters are updated through FP32 masters with FP32 moments (optim/optimizer.h).
#pragma once
#include <utility>
#include <vector>

#include "optim/optimizer.h"

namespace mixtape::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;

  // As param-group options: lr, beta1, beta2, eps, weight_decay, amsgrad (0/1).
  HyperParams hyper_params() const;
};

// AdamW differs only in its default weight decay (PyTorch's 1e-2).
struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;

  HyperParams hyper_params() const;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  Adam(std::vector<ParamGroup> groups, AdamOptions defaults = {});

 protected:
  Adam(const char* name, HyperParams defaults, bool decoupled_weight_decay);
  std::vector<std::string> state_names(const HyperParams& group) const override;
  std::vector<std::string> all_state_names() const override { return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}; }
  void check_options(const HyperParams& group) const override;
  void update(const ParamUpdate& u, const HyperParams& group) override;
  void update_many(const std::vector<const ParamUpdate*>& updates, const HyperParams& group) override;

 private:
  Attrs step_attrs(const HyperParams& group) const;  // the attrs every tensor of a group shares
  bool decoupled_;
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  AdamW(std::vector<ParamGroup> groups, AdamWOptions defaults = {});
};

}  // namespace mixtape::optim
