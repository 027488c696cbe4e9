// ops/mse_loss.cpp — mse_loss, (input - target)^2 (torch 1.13 semantics; no broadcasting).
// Invariant: the result is in the promoted floating dtype of input and target; its gradient,
// 2 (x - t) g (/ numel for Mean), is built from recorded ops, so it is differentiable again.
// Dtypes: ops/loss_util.h's contract.
#include "ops/loss.h"
#include "ops/loss_args.h"
#include "ops/loss_util.h"
#include "ops/op_def.h"

namespace mixtape {
using namespace loss_impl;  // the shared loss helpers (ops/loss_util.h)
namespace {

// ---- mse_loss(x, t) = (x - t)^2; d/dx = 2 (x - t) g (/ numel for Mean), d/dt = -d/dx ----
TensorList mse_loss_cpu(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& tt = c.inputs[1];
  check_elementwise_loss_args(c.name(), x, tt);
  const Reduction red = loss_reduction(c.attrs, c.name());
  const DType dt = promote_types(x.dtype(), tt.dtype());
  Tensor xd = dense(x, dt), td = dense(tt, dt);
  Tensor out = Tensor::empty(output_shape(red, x.sizes()), TensorOptions(dt));
  const int64_t n = x.numel();
  visit_floating(dt, c.name(), [&]<typename T>() {
    using A = acc_t<T>;
    const T* xp = static_cast<const T*>(xd.data_ptr());
    const T* tp = static_cast<const T*>(td.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    double total = 0;
    for (int64_t i = 0; i < n; ++i) {
      const A d = static_cast<A>(xp[i]) - static_cast<A>(tp[i]);
      if (red == Reduction::None)
        o[i] = static_cast<T>(d * d);
      else
        total += static_cast<double>(d * d);
    }
    if (red == Reduction::Sum) o[0] = static_cast<T>(total);
    if (red == Reduction::Mean) o[0] = static_cast<T>(total / static_cast<double>(n));  // empty: NaN
  });
  return {out};
}
TensorList mse_loss_grad(BackwardContext& c) {
  Tensor x = c.input(0), t = c.input(1);
  const double scale = loss_reduction(c.attrs, "mse_loss") == Reduction::Mean ? 2.0 / static_cast<double>(x.numel()) : 2.0;
  Tensor gx = (x - t) * (c.grad() * scale);
  return {c.needs_input_grad(0) ? gx : Tensor(), c.needs_input_grad(1) ? -gx : Tensor()};
}
// Samples: input and target both differentiated. Parity: each term (x - t)^2 is the same two
// roundings on the device (no a b + c to contract), and so is the backward (x - t) (g scale), op by
// op: reduction None is bit-identical (0). Mean and Sum add the 12 terms in f64 in another order
// (block partials): 12 roundings of the accumulator, which only the f64 result can show.
const OpSchema& kMseLoss =
    define_op("mse_loss")
        .args({"input", "target"})
        .policy(AmpPolicy::FP32)
        .grad(mse_loss_grad)
        .kernel(DeviceType::CPU, mse_loss_cpu)
        .sample("mean", {arg({3, 4}), arg({3, 4})},
                [](const TensorList& x) { return TensorList{mse_loss(x[0], x[1])}; }, sums_of(12))
        .sample("sum", {arg({3, 4}), arg({3, 4})},
                [](const TensorList& x) { return TensorList{mse_loss(x[0], x[1], Reduction::Sum)}; }, sums_of(12))
        .sample("none", {arg({2, 3}), arg({2, 3})},
                [](const TensorList& x) { return TensorList{mse_loss(x[0], x[1], Reduction::None)}; },
                SampleChecks{.parity_roundings = 0});

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return dispatch1(kMseLoss, {input, target}, {{"reduction", reduction_attr(reduction)}});
}

}  // namespace mixtape
