// amp/grad_stats.h — a look inside loss scaling: what happens to each gradient when it is
// stored in FP16, without scaling and at the scaler's current scale.
//
//   amp::GradStats stats(scaler.get_scale());              // the scale you are evaluating
//   stats.watch("conv1.out", h);                           // an activation: its grad is captured
//   scaler.scale(loss).backward();
//   stats.add_named(model.named_parameters(), scaler.get_scale());  // grads scaled by S: divided first
//   std::cout << stats.table();
//
// For every gradient value g (true units) it classifies RNE_fp16(g) and RNE_fp16(g * S):
//   zero       the value was nonzero and became 0 (flushed: underflow below 2^-25)
//   subnormal  0 < |v| < 2^-14: kept, with fewer than 11 significant bits
//   normal     2^-14 <= |v| <= 65504
//   overflow   |v| rounded to inf (the scaler would skip the step)
// Exact zeros (ReLU's dead units) are counted apart, as `exact_zero`, so they never look like
// underflow. The histogram counts floor(log2 |g|) for nonzero finite g, next to FP16's limits:
// 2^-24 (smallest subnormal), 2^-14 (smallest normal), 2^15 (largest binade).
// In use, with numbers: docs/AMP.md, "Seeing underflow"; behaviour 34 (docs/amp-behaviours.md).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace mixtape::amp {

struct Fp16Fate {
  int64_t exact_zero = 0, flushed = 0, subnormal = 0, normal = 0, overflow = 0, nonfinite_in = 0;
  int64_t total() const { return exact_zero + flushed + subnormal + normal + overflow + nonfinite_in; }
  // Fractions of the nonzero, finite values.
  double frac(int64_t n) const;
  double flushed_frac() const { return frac(flushed); }
  double subnormal_frac() const { return frac(subnormal); }
  double overflow_frac() const { return frac(overflow); }
};

// What storing `true_value * scale` in FP16 does to one value.
enum class Fp16Class { ExactZero, Flushed, Subnormal, Normal, Overflow, NonFiniteIn };
Fp16Class classify_in_fp16(double true_value, double scale);

struct GradStat {
  std::string name;
  bool activation = false;
  int64_t numel = 0;
  Fp16Fate unscaled;  // stored in FP16 as is (scale 1)
  Fp16Fate scaled;    // stored in FP16 after multiplying by the evaluated scale
  // histogram[i] counts values with floor(log2|g|) == kLog2Min + i (clamped at both ends)
  std::vector<int64_t> log2_histogram;
};

class GradStats {
 public:
  static constexpr int kLog2Min = -40, kLog2Max = 20;

  // `scale`: the loss scale whose effect is shown next to scale 1 (e.g. scaler.get_scale()).
  explicit GradStats(double scale = 65536.0) : scale_(scale) {}

  // One gradient. `observed_scale`: the scale it already carries (a .grad after
  // scaler.scale(loss).backward() carries S); values are divided by it to get true units.
  void add(const std::string& name, const Tensor& grad, double observed_scale = 1.0, bool activation = false);
  // Every parameter's .grad (parameters without one are skipped).
  void add_named(const std::vector<std::pair<std::string, Tensor>>& params, double observed_scale = 1.0);
  // Registers a hook on a tensor of the forward pass; its gradient is recorded during backward
  // (this GradStats must outlive that backward). `observed_scale` as in add().
  void watch(const std::string& name, const Tensor& activation, double observed_scale = 1.0);

  const std::vector<GradStat>& stats() const { return stats_; }
  const GradStat& get(const std::string& name) const;  // error if absent
  double scale() const { return scale_; }
  void clear() { stats_.clear(); }

  // A fixed-width table: name, numel, flushed/subnormal/overflow % at scale 1 and at S.
  std::string table() const;
  // CSV: name,log2,count (one row per nonzero bin), for plotting.
  std::string histogram_csv() const;

 private:
  double scale_;
  std::vector<GradStat> stats_;
};

}  // namespace mixtape::amp
