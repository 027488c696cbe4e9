// optim/clip_grad.cpp — clip_grad_norm_, and the reduction it needs as a dispatcher op:
//   norm_pow_sum(x; p) -> f64 0-d:  sum |x|^p over all elements (p = inf: max |x|, NaN propagates),
//   accumulated in double (x widened exactly). Not differentiable.
#include "optim/clip_grad.h"

#include <cmath>
#include <limits>

#include "autograd/grad_mode.h"
#include "core/dispatcher.h"
#include "ops/cast.h"
#include "ops/activation.h"
#include "ops/creation.h"
#include "ops/pointwise.h"
#include "ops/shape_ops.h"

namespace mixtape::optim {
namespace {

TensorList norm_pow_sum_cpu(const OpCall& c) {
  const Tensor x = contiguous(c.inputs[0]);
  const double p = c.attrs.get<double>("p");
  const int64_t n = x.numel();
  double acc = 0.0;
  visit_floating(x.dtype(), c.name(), [&]<typename T>() {
    const T* d = static_cast<const T*>(x.data_ptr());
    if (std::isinf(p)) {
      for (int64_t i = 0; i < n; ++i) {
        const double a = std::fabs(static_cast<double>(static_cast<acc_t<T>>(d[i])));
        if (a > acc || a != a) acc = (acc != acc) ? acc : a;  // NaN sticks
      }
    } else if (p == 2.0) {
      for (int64_t i = 0; i < n; ++i) {
        const double v = static_cast<double>(static_cast<acc_t<T>>(d[i]));
        acc += v * v;
      }
    } else if (p == 1.0) {
      for (int64_t i = 0; i < n; ++i) acc += std::fabs(static_cast<double>(static_cast<acc_t<T>>(d[i])));
    } else {
      for (int64_t i = 0; i < n; ++i) acc += std::pow(std::fabs(static_cast<double>(static_cast<acc_t<T>>(d[i]))), p);
    }
  });
  Tensor out = Tensor::empty({}, TensorOptions(DType::Float64));
  *out.data_ptr<double>() = acc;
  return {out};
}
// A double sum of n terms in another order on CUDA: sums_of(n); |x|^3 adds a pow per term.
const OpSchema& kNormPowSum = define_op("norm_pow_sum")
                                  .not_differentiable()
                                  .kernel(DeviceType::CPU, norm_pow_sum_cpu)
                                  .sample("p1", {arg({3001}, -3, 3)}, {{"p", 1.0}}, sums_of(3001))
                                  .sample("p2", {arg({3001}, -3, 3)}, {{"p", 2.0}}, sums_of(3001))
                                  .sample("p3", {arg({3001}, -3, 3)}, {{"p", 3.0}}, sums_of(2 * 3001))
                                  .sample("inf", {arg({3001}, -3, 3)}, {{"p", double(INFINITY)}});

}  // namespace

namespace {

// The grads of `params`, checked.
std::vector<Tensor> grads_of(const std::vector<Tensor>& params, double norm_type) {
  MT_CHECK(norm_type > 0.0, "clip_grad_norm_: norm_type must be > 0 or inf, got ", norm_type);
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    MT_CHECK(p.defined(), "clip_grad_norm_: got an undefined parameter");
    Tensor g = p.grad();
    if (!g.defined()) continue;
    MT_CHECK(g.is_floating_point(), "clip_grad_norm_: gradients must be floating point, got ", g.describe());
    grads.push_back(g);
  }
  return grads;
}

// sum |g|^p over `grads` (p = inf: max |g|), a 0-d f64 on the first one's device. Every partial
// stays on the device: one host read at most, by the caller. The sum is folded in parameter
// order, one f64 add at a time from 0, as a host loop would; the max norm folds the per-gradient
// maxima with norm_pow_sum's own NaN-sticking max.
Tensor pow_sum(const std::vector<Tensor>& grads, double norm_type) {
  const bool inf_norm = std::isinf(norm_type);
  std::vector<Tensor> partials;
  // Each partial is a 0-d f64 on its gradient's device, gathered on the first one's (gradients on
  // several devices: a model split across them, as PyTorch allows).
  const Device home = grads.front().device();
  for (const Tensor& g : grads)
    partials.push_back(to_device(dispatch1(kNormPowSum, {g.detach()}, {{"p", norm_type}}), home));
  if (inf_norm) return dispatch1(kNormPowSum, {stack(partials)}, {{"p", norm_type}});
  Tensor acc = zeros({}, TensorOptions(DType::Float64).with_device(home));
  for (const Tensor& s : partials) add_(acc, s);
  return acc;
}

// The total norm from pow_sum's value.
Tensor root(const Tensor& acc, double norm_type) {
  return std::isinf(norm_type) || norm_type == 1.0 ? acc : norm_type == 2.0 ? sqrt(acc) : pow(acc, 1.0 / norm_type);
}

// PyTorch's rule: coef = max_norm / (total + 1e-6), clamped to 1; f64 grads are multiplied by
// the double, the others by it rounded to float (16-bit ones rounded once, at the store).
void scale_grads(const std::vector<Tensor>& grads, double max_norm, double total) {
  const double coef = max_norm / (total + 1e-6);
  if (!(coef < 1.0) && !std::isnan(coef)) return;  // clamped to 1: multiplying would change nothing
  for (Tensor g : grads) mul_(g, Scalar(coef));
}

}  // namespace

Tensor grad_norm_pow_sum(const std::vector<Tensor>& params, double norm_type) {
  autograd::NoGradGuard no_grad;
  const std::vector<Tensor> grads = grads_of(params, norm_type);
  return grads.empty() ? zeros({}, TensorOptions(DType::Float64)) : pow_sum(grads, norm_type);
}

double total_norm_from_pow_sum(double pow_sum, double norm_type) {
  MT_CHECK(norm_type > 0.0, "clip_grad_norm_: norm_type must be > 0 or inf, got ", norm_type);
  return root(full({}, pow_sum, TensorOptions(DType::Float64)), norm_type).item<double>();
}

void clip_grads_with_norm_(const std::vector<Tensor>& params, double max_norm, double total_norm) {
  autograd::NoGradGuard no_grad;
  MT_CHECK(!std::isnan(max_norm), "clip_grad_norm_: max_norm is NaN");
  scale_grads(grads_of(params, 2.0), max_norm, total_norm);
}

namespace {

Tensor total_norm(const std::vector<Tensor>& params, double max_norm, double norm_type, std::vector<Tensor>& grads) {
  MT_CHECK(norm_type > 0.0, "clip_grad_norm_: norm_type must be > 0 or inf, got ", norm_type);
  MT_CHECK(!std::isnan(max_norm), "clip_grad_norm_: max_norm is NaN");
  grads = grads_of(params, norm_type);
  if (grads.empty()) return Tensor();
  return root(pow_sum(grads, norm_type), norm_type);
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> grads;
  const Tensor total_t = total_norm(params, max_norm, norm_type, grads);
  if (grads.empty()) return 0.0;
  const double total = to_device(total_t, Device::CPU()).item<double>();  // the one host read
  scale_grads(grads, max_norm, total);
  return total;
}

Tensor clip_grad_norm_on_device_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> grads;
  const Tensor total = total_norm(params, max_norm, norm_type, grads);
  if (grads.empty()) return zeros({}, TensorOptions(DType::Float64));
  // coef = max_norm / (total + 1e-6), clamped to 1 (NaN stays NaN). A coefficient of 1 leaves
  // every gradient's bits as they are, so multiplying unconditionally changes no value.
  const Tensor coef = clamp(rdiv(add(total, 1e-6), max_norm), std::nullopt, 1.0);
  // The host path multiplies by Scalar(coef): f64 grads by the double, f32 and 16-bit ones by the
  // double rounded to float, in float (16-bit ones rounded once, at the store). The same here.
  const Tensor coef32 = to_dtype(coef, DType::Float32);
  for (Tensor g : grads) {
    // On the gradient's own device (a no-op where it is the first gradient's).
    const Tensor c = to_device(g.dtype() == DType::Float64 ? coef : coef32, g.device());
    if (g.dtype() == DType::Float64 || g.dtype() == DType::Float32)
      mul_(g, c);
    else
      copy_(g, mul(to_dtype(g, DType::Float32), c));
  }
  return total;
}

}  // namespace mixtape::optim
