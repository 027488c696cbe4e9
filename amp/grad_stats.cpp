// amp/grad_stats.cpp — see amp/grad_stats.h.
#include "amp/grad_stats.h"

#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>

#include "core/error.h"
#include "core/half.h"

namespace mixtape::amp {

double Fp16Fate::frac(int64_t n) const {
  const int64_t nonzero = flushed + subnormal + normal + overflow;
  return nonzero == 0 ? 0.0 : static_cast<double>(n) / static_cast<double>(nonzero);
}

Fp16Class classify_in_fp16(double true_value, double scale) {
  if (!std::isfinite(true_value)) return Fp16Class::NonFiniteIn;
  if (true_value == 0.0) return Fp16Class::ExactZero;
  // The value as the f32 arithmetic of a scaled backward would hold it, then stored in f16.
  const float v = static_cast<float>(true_value * scale);
  const Half h(v);
  const float back = static_cast<float>(h);
  if (std::isinf(back)) return Fp16Class::Overflow;
  if (back == 0.0f) return Fp16Class::Flushed;
  if (std::fabs(back) < static_cast<float>(Half::min_normal())) return Fp16Class::Subnormal;
  return Fp16Class::Normal;
}

namespace {
void count(Fp16Fate& f, Fp16Class c) {
  switch (c) {
    case Fp16Class::ExactZero: ++f.exact_zero; break;
    case Fp16Class::Flushed: ++f.flushed; break;
    case Fp16Class::Subnormal: ++f.subnormal; break;
    case Fp16Class::Normal: ++f.normal; break;
    case Fp16Class::Overflow: ++f.overflow; break;
    case Fp16Class::NonFiniteIn: ++f.nonfinite_in; break;
  }
}
}  // namespace

void GradStats::add(const std::string& name, const Tensor& grad, double observed_scale, bool activation) {
  MT_CHECK(grad.defined(), "GradStats::add: '", name, "' has no gradient");
  MT_CHECK(grad.is_floating_point(), "GradStats::add: '", name, "' expected a floating gradient, got ", grad.describe());
  MT_CHECK(observed_scale > 0 && std::isfinite(observed_scale), "GradStats::add: observed_scale must be positive, got ",
           observed_scale);
  GradStat s;
  s.name = name;
  s.activation = activation;
  s.numel = grad.numel();
  s.log2_histogram.assign(kLog2Max - kLog2Min + 1, 0);
  for (double g : grad.to_vector<double>()) {
    const double t = g / observed_scale;
    count(s.unscaled, classify_in_fp16(t, 1.0));
    count(s.scaled, classify_in_fp16(t, scale_));
    if (t != 0.0 && std::isfinite(t)) {
      int e = static_cast<int>(std::floor(std::log2(std::fabs(t))));
      e = std::min(std::max(e, kLog2Min), kLog2Max);
      ++s.log2_histogram[static_cast<size_t>(e - kLog2Min)];
    }
  }
  stats_.push_back(std::move(s));
}

void GradStats::add_named(const std::vector<std::pair<std::string, Tensor>>& params, double observed_scale) {
  for (const auto& [name, p] : params)
    if (p.grad().defined()) add(name, p.grad(), observed_scale);
}

void GradStats::watch(const std::string& name, const Tensor& activation, double observed_scale) {
  MT_CHECK(activation.requires_grad(), "GradStats::watch: '", name,
           "' does not require grad, so no gradient will reach it");
  activation.register_hook([this, name, observed_scale](const Tensor& g) {
    add(name, g, observed_scale, /*activation=*/true);
    return Tensor();
  });
}

const GradStat& GradStats::get(const std::string& name) const {
  for (const auto& s : stats_)
    if (s.name == name) return s;
  MT_ERROR("GradStats: no gradient recorded under '", name, "'");
}

std::string GradStats::table() const {
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "%-28s %10s | %-26s | %-26s\n", "gradient", "values", "in fp16 at scale 1",
                ("in fp16 at scale " + std::to_string(static_cast<long long>(scale_))).c_str());
  os << line;
  std::snprintf(line, sizeof line, "%-28s %10s | %8s %8s %8s | %8s %8s %8s\n", "", "", "flushed", "subnorm",
                "overflow", "flushed", "subnorm", "overflow");
  os << line;
  for (const auto& s : stats_) {
    std::snprintf(line, sizeof line, "%-28s %10lld | %7.2f%% %7.2f%% %7.2f%% | %7.2f%% %7.2f%% %7.2f%%\n",
                  (s.name + (s.activation ? " (act)" : "")).c_str(), static_cast<long long>(s.numel),
                  100 * s.unscaled.flushed_frac(), 100 * s.unscaled.subnormal_frac(), 100 * s.unscaled.overflow_frac(),
                  100 * s.scaled.flushed_frac(), 100 * s.scaled.subnormal_frac(), 100 * s.scaled.overflow_frac());
    os << line;
  }
  return os.str();
}

std::string GradStats::histogram_csv() const {
  std::ostringstream os;
  os << "name,log2,count\n";
  for (const auto& s : stats_)
    for (size_t i = 0; i < s.log2_histogram.size(); ++i)
      if (s.log2_histogram[i]) os << s.name << ',' << (kLog2Min + static_cast<int>(i)) << ',' << s.log2_histogram[i] << '\n';
  return os.str();
}

}  // namespace mixtape::amp
