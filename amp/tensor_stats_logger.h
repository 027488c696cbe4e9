// amp/tensor_stats_logger.h — amp::TensorStatsLogger: per layer and tensor (activations,
// weights, gradients), every N steps, the statistics of amp/tensor_stats.h, kept as rows, written
// as CSV and drawn as SVG over training. Transformer Engine's LogTensorStats is the model.
//
//   amp::TensorStatsLogger stats(/*every_n_steps=*/10);
//   stats.attach(model);              // forward hooks: each layer's output and its gradient
//   for (...) {
//     auto loss = ...forward...;      // outputs recorded (when the step is due)
//     scaler.scale(loss).backward();  // output gradients recorded
//     stats.step();                   // weights and their .grad recorded; the step advances
//     scaler.step(opt); scaler.update(); opt.zero_grad();
//   }
//   stats.write_csv("stats.csv"); stats.write_svg("stats.svg", amp::StatFormat::E4M3);
//
// Values are recorded as they are: gradients of a scaled backward carry the loss scale, so their
// fates at scale 1 are what the 16-bit backward actually stored. set_scale(role, s) evaluates a
// role's fates at s instead (an FP8 recipe's current scale). Invariant: hooks hold only shared
// state; after detach() (or the logger's end) they stay on the model and do nothing.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "amp/tensor_stats.h"
#include "core/tensor.h"

namespace mixtape::amp {

enum class TensorRole : uint8_t { Activation, Weight, Gradient };
const char* tensor_role_name(TensorRole r);  // "activation", "weight", "gradient"

struct TensorStatRow {
  int64_t step = 0;
  std::string layer;   // "fc1" (the module path), "model" for the root
  std::string tensor;  // "output", "output.grad", "weight", "weight.grad"
  TensorRole role = TensorRole::Activation;
  DType dtype = DType::Float32;
  TensorStat stat;
};

class TensorStatsLogger {
 public:
  explicit TensorStatsLogger(int64_t every_n_steps = 1);
  ~TensorStatsLogger();
  TensorStatsLogger(const TensorStatsLogger&) = delete;
  TensorStatsLogger& operator=(const TensorStatsLogger&) = delete;

  // The scale a role's fates are evaluated at (1 until set; positive and finite).
  void set_scale(TensorRole role, double scale);
  // Per tensor instead (an FP8 recipe keeps one scale per module and tensor): asked for every
  // record; a value overrides the role's scale, nullopt keeps it. Null: none (the default).
  using ScaleFn = std::function<std::optional<double>(const std::string& layer, const std::string& tensor,
                                                      TensorRole role)>;
  void set_scale_fn(ScaleFn fn);
  int64_t every_n_steps() const;
  int64_t current_step() const;  // 0 until the first step()
  bool due() const;              // current_step() % every_n_steps() == 0

  // One tensor, now, when the step is due.
  void record(const std::string& layer, const std::string& tensor, TensorRole role, const Tensor& t);
  // An activation: recorded now (when due), and its gradient ("<tensor>.grad") during backward.
  void watch(const std::string& layer, const std::string& tensor, const Tensor& activation);
  // Parameters ("fc1.weight": layer "fc1", tensor "weight") and their .grad, when due.
  void record_parameters(const std::vector<std::pair<std::string, Tensor>>& named);

  // Every module of `model` (an nn::Module) that has parameters of its own gets a forward hook
  // that watch()es its output; step() then records the model's parameters. The model must
  // outlive the logger's step() calls (or detach() first).
  template <class Model>
  void attach(Model& model) {
    for (auto& [path, m] : model.named_modules()) {
      if (m->named_parameters(false).empty()) continue;
      const std::string layer = path.empty() ? "model" : path;
      m->register_forward_hook(
          [state = state_, layer](auto&, const Tensor&, const Tensor& out) { on_output(state, layer, out); });
    }
    Model* mp = &model;
    params_ = [mp] { return mp->named_parameters(); };
  }
  // The hooks stop recording; step() records no parameters.
  void detach();

  // After backward: records the attached model's parameters (when due), then advances the step.
  void step();

  const std::vector<TensorStatRow>& rows() const;
  // step,layer,tensor,role,dtype,numel,scale,amax,min_nonzero,binades,zeros,nonfinite, then
  // <fmt>_overflow,<fmt>_flushed for fp16, bf16, e4m3, e5m2 (fractions of numel).
  std::string csv() const;
  void write_csv(const std::string& path) const;  // throws naming the file when it cannot
  // Over the steps, per tensor: amax and smallest nonzero (log2, with `format`'s largest finite
  // and smallest subnormal divided by the tensor's scale as reference lines), and the fractions
  // that overflow and flush in `format`. `role`: only that role's tensors (a big model's figure
  // is easier to read one role at a time); none: every tensor.
  std::string svg(StatFormat format, std::optional<TensorRole> role = std::nullopt) const;
  void write_svg(const std::string& path, StatFormat format, std::optional<TensorRole> role = std::nullopt) const;

  struct State;

 private:
  static void on_output(const std::shared_ptr<State>& state, const std::string& layer, const Tensor& out);
  std::shared_ptr<State> state_;
  std::function<std::vector<std::pair<std::string, Tensor>>()> params_;
};

}  // namespace mixtape::amp
