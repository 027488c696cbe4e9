// optim/clip_grad.cpp — clip_grad_norm_, and the reduction it needs as a dispatcher op:
//   norm_pow_sum(x; p) -> f64 0-d:  sum |x|^p over all elements (p = inf: max |x|, NaN propagates),
//   accumulated in double (x widened exactly). Not differentiable.
#include "optim/clip_grad.h"

#include <cmath>
#include <limits>

#include "autograd/grad_mode.h"
#include "core/dispatcher.h"
#include "ops/cast.h"
#include "ops/creation.h"

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

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  MT_CHECK(norm_type > 0.0, "clip_grad_norm_: norm_type must be > 0 or inf, got ", norm_type);
  MT_CHECK(!std::isnan(max_norm), "clip_grad_norm_: max_norm is NaN");
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    MT_CHECK(p.defined(), "clip_grad_norm_: got an undefined parameter");
    Tensor g = p.grad();
    if (!g.defined()) continue;
    MT_CHECK(g.is_floating_point(), "clip_grad_norm_: gradients must be floating point, got ", g.describe());
    grads.push_back(g);
  }
  if (grads.empty()) return 0.0;
  const bool inf_norm = std::isinf(norm_type);
  double acc = 0.0;
  for (const Tensor& g : grads) {
    const double s = *to_device(dispatch1(kNormPowSum, {g.detach()}, {{"p", norm_type}}), Device::CPU()).data_ptr<double>();
    if (inf_norm)
      acc = (acc != acc || s != s) ? std::numeric_limits<double>::quiet_NaN() : std::fmax(acc, s);
    else
      acc += s;
  }
  const double total = inf_norm ? acc : norm_type == 1.0 ? acc : norm_type == 2.0 ? std::sqrt(acc) : std::pow(acc, 1.0 / norm_type);
  const double coef = max_norm / (total + 1e-6);
  if (!(coef < 1.0) && !std::isnan(coef)) return total;  // clamped to 1: multiplying would change nothing
  for (Tensor g : grads) mul_(g, Scalar(coef));
  return total;
}

}  // namespace mixtape::optim
