// optim/lr_scheduler.cpp — the schedules of lr_scheduler.h. The arithmetic of StepLR and
// CosineAnnealingLR is PyTorch 1.13's get_lr(), operation for operation and left to right as
// Python evaluates it, so the doubles are identical to torch's.
#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "ops/cast.h"

namespace mixtape::optim {
namespace {

constexpr double kPi = 3.141592653589793;  // math.pi

std::string indexed(const char* name, size_t i) { return std::string(name) + "." + std::to_string(i); }

Tensor i64_scalar(int64_t v) {
  Tensor t = Tensor::empty({}, TensorOptions(DType::Int64));
  *t.data_ptr<int64_t>() = v;
  return t;
}
Tensor f64_scalar(double v) {
  Tensor t = Tensor::empty({}, TensorOptions(DType::Float64));
  *t.data_ptr<double>() = v;
  return t;
}

}  // namespace

LRScheduler::LRScheduler(Optimizer& optimizer, std::string name) : optimizer_(optimizer), name_(std::move(name)) {
  for (const ParamGroup& g : optimizer_.param_groups()) base_lrs_.push_back(g.lr());
}

void LRScheduler::initial_step() {
  check_params();
  step();
}

void LRScheduler::step(bool optimizer_stepped) {
  if (!optimizer_stepped) return;  // a skipped AMP step: the schedule does not advance
  auto& groups = optimizer_.param_groups();
  MT_CHECK(groups.size() == base_lrs_.size(), name_, ": the optimizer has ", groups.size(),
           " param groups, but the scheduler was created for ", base_lrs_.size());
  ++last_epoch_;
  std::vector<double> lrs = get_lr();
  for (size_t g = 0; g < groups.size(); ++g) groups[g].set_lr(lrs[g]);
  last_lr_ = std::move(lrs);
  // A capturable optimizer's kernels read the lr on the device: write it there now, so that a
  // step replayed without step() (a CUDA graph) uses it too. A launch, no host read.
  if (optimizer_.capturable()) optimizer_.write_device_lr();
}

StateDict LRScheduler::state_dict() const {
  StateDict sd;
  sd["last_epoch"] = i64_scalar(last_epoch_);
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    sd[indexed("base_lrs", g)] = f64_scalar(base_lrs_[g]);
    sd[indexed("last_lr", g)] = f64_scalar(last_lr_.at(g));
  }
  // The hyperparameter accessors hand out pointers for load_state_dict; here they are only read.
  auto* self = const_cast<LRScheduler*>(this);
  for (auto& [n, p] : self->int_params()) sd[n] = i64_scalar(*p);
  for (auto& [n, p] : self->double_params()) sd[n] = f64_scalar(*p);
  return sd;
}

void LRScheduler::load_state_dict(const StateDict& sd) {
  const std::string who = name_ + ".load_state_dict";
  std::set<std::string> used;
  auto need = [&](const std::string& k, DType dtype) -> Tensor {
    auto it = sd.find(k);
    MT_CHECK(it != sd.end(), who, ": missing key '", k, "'");
    const Tensor& t = it->second;
    MT_CHECK(t.defined() && t.dtype() == dtype && t.dim() == 0, who, ": '", k, "' must be a 0-d ", dtype_short(dtype),
             " tensor, got ", t.defined() ? t.describe() : "undefined");
    used.insert(k);
    return contiguous(to_device(t, Device::CPU()));
  };
  const int64_t last_epoch = *need("last_epoch", DType::Int64).data_ptr<int64_t>();
  MT_CHECK(last_epoch >= 0, who, ": last_epoch must be >= 0, got ", last_epoch);
  std::vector<double> base, last;
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    base.push_back(*need(indexed("base_lrs", g), DType::Float64).data_ptr<double>());
    last.push_back(*need(indexed("last_lr", g), DType::Float64).data_ptr<double>());
  }
  std::vector<std::pair<int64_t*, int64_t>> ints;
  std::vector<std::pair<double*, double>> doubles;
  for (auto& [n, p] : int_params()) ints.emplace_back(p, *need(n, DType::Int64).data_ptr<int64_t>());
  for (auto& [n, p] : double_params()) doubles.emplace_back(p, *need(n, DType::Float64).data_ptr<double>());
  for (auto& [n, t] : sd)
    MT_CHECK(used.count(n), who, ": unexpected key '", n, "' (this scheduler has ", base_lrs_.size(),
             " param groups)");
  // Hyperparameters: set, check, and restore the old values if the new ones are invalid.
  std::vector<int64_t> old_ints;
  std::vector<double> old_doubles;
  for (auto& [p, v] : ints) old_ints.push_back(std::exchange(*p, v));
  for (auto& [p, v] : doubles) old_doubles.push_back(std::exchange(*p, v));
  try {
    check_params();
  } catch (const Error& e) {
    for (size_t i = 0; i < ints.size(); ++i) *ints[i].first = old_ints[i];
    for (size_t i = 0; i < doubles.size(); ++i) *doubles[i].first = old_doubles[i];
    MT_ERROR(who, ": ", e.what());
  }
  last_epoch_ = last_epoch;
  base_lrs_ = std::move(base);
  last_lr_ = std::move(last);
}

// ---- StepLR ----

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer, "StepLR"), step_size_(step_size), gamma_(gamma) {
  initial_step();
}

void StepLR::check_params() const {
  MT_CHECK(step_size_ >= 1, "StepLR: step_size must be >= 1, got ", step_size_);
  MT_CHECK(std::isfinite(gamma_), "StepLR: gamma must be finite, got ", gamma_);
}

std::vector<double> StepLR::get_lr() const {
  std::vector<double> out;
  for (const ParamGroup& g : optimizer_.param_groups()) {
    if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0)
      out.push_back(g.lr());
    else
      out.push_back(g.lr() * gamma_);
  }
  return out;
}

// ---- CosineAnnealingLR ----

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer, "CosineAnnealingLR"), T_max_(T_max), eta_min_(eta_min) {
  initial_step();
}

void CosineAnnealingLR::check_params() const {
  MT_CHECK(T_max_ >= 1, "CosineAnnealingLR: T_max must be >= 1, got ", T_max_);
  MT_CHECK(std::isfinite(eta_min_), "CosineAnnealingLR: eta_min must be finite, got ", eta_min_);
}

std::vector<double> CosineAnnealingLR::get_lr() const {
  const auto& groups = optimizer_.param_groups();
  const double e = static_cast<double>(last_epoch_), T = static_cast<double>(T_max_);
  std::vector<double> out;
  for (size_t g = 0; g < groups.size(); ++g) {
    const double lr = groups[g].lr();
    if (last_epoch_ == 0)
      out.push_back(lr);
    else if ((last_epoch_ - 1 - T_max_) % (2 * T_max_) == 0)  // the restart point of the period
      out.push_back(lr + (base_lrs_[g] - eta_min_) * (1 - std::cos(kPi / T)) / 2);
    else
      out.push_back((1 + std::cos(kPi * e / T)) / (1 + std::cos(kPi * (e - 1) / T)) * (lr - eta_min_) + eta_min_);
  }
  return out;
}

// ---- WarmupCosine ----

WarmupCosine::WarmupCosine(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps, double eta_min)
    : LRScheduler(optimizer, "WarmupCosine"), warmup_steps_(warmup_steps), total_steps_(total_steps), eta_min_(eta_min) {
  initial_step();
}

void WarmupCosine::check_params() const {
  MT_CHECK(warmup_steps_ >= 0, "WarmupCosine: warmup_steps must be >= 0, got ", warmup_steps_);
  MT_CHECK(total_steps_ >= warmup_steps_ && total_steps_ >= 1, "WarmupCosine: total_steps must be >= warmup_steps "
           "and >= 1, got total_steps ", total_steps_, " with warmup_steps ", warmup_steps_);
  MT_CHECK(std::isfinite(eta_min_), "WarmupCosine: eta_min must be finite, got ", eta_min_);
}

std::vector<double> WarmupCosine::get_lr() const {
  const int64_t t = last_epoch_;
  std::vector<double> out;
  for (double base : base_lrs_) {
    if (t < warmup_steps_) {
      out.push_back(base * (static_cast<double>(t) / static_cast<double>(std::max<int64_t>(1, warmup_steps_))));
    } else {
      double progress = static_cast<double>(t - warmup_steps_) /
                        static_cast<double>(std::max<int64_t>(1, total_steps_ - warmup_steps_));
      progress = std::min(1.0, progress);
      const double f = std::max(0.0, 0.5 * (1.0 + std::cos(kPi * progress)));
      out.push_back(eta_min_ + (base - eta_min_) * f);
    }
  }
  return out;
}

}  // namespace mixtape::optim
