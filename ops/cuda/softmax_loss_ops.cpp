// ops/cuda/softmax_loss_ops.cpp — CUDA kernels of softmax, log_softmax, their backward ops, nll_loss
// and nll_loss_backward (cross_entropy is a composite of log_softmax and nll_loss, so it runs on
// CUDA through them). Checks, attributes and semantics as ops/softmax.cpp, ops/nll_loss.cpp and ops/cross_entropy.cpp (shared
// checks in ops/softmax_args.h, ops/loss_args.h); device
// side in softmax_loss.cu. The targets of nll are validated on the device and reported at the
// next synchronisation (core/cuda/deferred_check.h): a located mixtape::Error, never a device
// fault, and no host stop in the training step.
#include <vector>

#include "core/cuda/deferred_check.h"
#include "core/cuda/scratch.h"
#include "ops/creation.h"
#include "ops/cuda/softmax_loss_kernels.h"
#include "ops/cuda/tensor_iter.h"
#include "ops/dim_layout.h"
#include "ops/loss.h"
#include "ops/loss_args.h"
#include "ops/softmax_args.h"

namespace mixtape::cuda {
namespace {

template <bool Log>
TensorList softmax_cuda(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const SoftmaxArgs a = softmax_args(c, x);
  const int64_t dim = a.dim;
  const DType dt = a.dtype;
  DeviceGuard guard(x.device().index());
  const Tensor src = dense(cast_to(x, dt, c.name()), c.name());
  Tensor out = empty_on(x.sizes(), dt, x.device());
  const DimLayout l = layout_of(x.sizes(), x.dim() == 0 ? -1 : dim);
  MT_CUDA_CHECK(launch_softmax(Log, dt, src.data_ptr(), out.data_ptr(), l.outer, l.len, l.inner, current_stream()),
                c.name());
  return {out};
}

template <bool Log>
TensorList softmax_grad_cuda(const OpCall& c) {
  const Tensor& g = c.inputs[0];
  const Tensor& y = c.inputs[1];
  const SoftmaxArgs a = softmax_backward_args(c, g, y);
  const int64_t dim = a.dim;
  const DType dt = a.dtype;
  DeviceGuard guard(y.device().index());
  const Tensor gd = dense(cast_to(g, dt, c.name()), c.name()), yd = dense(cast_to(y, dt, c.name()), c.name());
  Tensor out = empty_on(y.sizes(), dt, y.device());
  const DimLayout l = layout_of(y.sizes(), y.dim() == 0 ? -1 : dim);
  MT_CUDA_CHECK(launch_softmax_grad(Log, dt, gd.data_ptr(), yd.data_ptr(), out.data_ptr(), l.outer, l.len, l.inner,
                                    current_stream()),
                c.name());
  return {out};
}

// ---- nll_loss ----
int reduction_of(const OpCall& c) { return static_cast<int>(loss_reduction(c.attrs, c.name())); }
// Targets are checked on the device without stopping the host (core/cuda/deferred_check.h): the
// kernels record the first target that is neither a class in [0, C) nor ignore_index, and the
// next synchronisation reports it with ops/nll_loss.cpp's message.
DeferredCheck target_check(const char* op, const IntList& target_shape, int64_t classes, int64_t ignore) {
  return DeferredCheck(op, [target_shape, classes, ignore](uint64_t position, uint64_t value) {
    return bad_target_message(static_cast<int64_t>(value), static_cast<int64_t>(position), target_shape, classes,
                              ignore);
  });
}

NllArgs nll_args(const OpCall& c, const NllGeom& geo, const Tensor& x, const Tensor& target, const Tensor& weight) {
  NllArgs a{};
  a.x = x.defined() ? x.data_ptr() : nullptr;
  a.target = static_cast<const int64_t*>(target.data_ptr());
  a.weight = weight.defined() ? static_cast<const double*>(weight.data_ptr()) : nullptr;
  a.n = geo.n;
  a.c = geo.c;
  a.s = geo.s;
  a.ignore = c.attrs.get<int64_t>("ignore_index");
  a.reduction = reduction_of(c);
  return a;
}

TensorList nll_loss_cuda(const OpCall& c) {
  const Tensor& logp = c.inputs[0];
  const Tensor& target = c.inputs[1];
  const Tensor& weight = c.inputs[2];
  MT_CHECK(logp.defined() && is_floating(logp.dtype()), c.name(), ": expected a floating input, got ",
           logp.defined() ? logp.describe() : "undefined");
  MT_CHECK(target.defined() && target.dtype() == DType::Int64, c.name(), ": target must hold Int64 class indices, got ",
           target.defined() ? target.describe() : "undefined");
  MT_CHECK(logp.dim() >= 1, c.name(), ": expected input of shape (N, C), (N, C, d1, ...) or (C), got ", logp.describe());
  const NllGeom geo = nll_geometry(logp.sizes());
  MT_CHECK(target.sizes() == geo.target_shape, c.name(), ": expected target of shape ", shape_str(geo.target_shape),
           " for input ", logp.describe(), ", got ", target.describe());
  if (weight.defined())
    MT_CHECK(is_floating(weight.dtype()) && weight.dim() == 1 && weight.sizes()[0] == geo.c, c.name(),
             ": weight must be 1-D floating of size C = ", geo.c, " (one weight per class), got ", weight.describe());
  DeviceGuard guard(logp.device().index());
  const Tensor lp = dense(logp, c.name()), tg = dense(target, c.name());
  const Tensor wd = weight.defined() ? dense(cast_to(weight, DType::Float64, c.name()), c.name()) : Tensor();
  NllArgs a = nll_args(c, geo, lp, tg, wd);
  DeferredCheck check = target_check(c.name(), tg.sizes(), geo.c, a.ignore);
  a.bad = check.slot();
  Tensor out = empty_on(a.reduction == 0 ? geo.target_shape : IntList{}, logp.dtype(), logp.device());
  Scratch scratch(a.reduction == 0 ? 0 : sizeof(double) * 2 * static_cast<size_t>(std::max<int64_t>(geo.n * geo.s, 1)));
  MT_CUDA_CHECK(launch_nll(logp.dtype(), a, out.data_ptr(), scratch.data_as<double>(), current_stream()), c.name());
  check.commit(tg.data_ptr(), sizeof(int64_t));
  return {out};
}

TensorList nll_loss_backward_cuda(const OpCall& c) {
  const Tensor& g = c.inputs[0];
  const Tensor& target = c.inputs[1];
  const Tensor& weight = c.inputs[2];
  const IntList& sizes = c.attrs.get<IntList>("sizes");
  MT_CHECK(g.defined() && is_floating(g.dtype()), c.name(), ": expected a floating gradient, got ",
           g.defined() ? g.describe() : "undefined");
  MT_CHECK(!sizes.empty(), c.name(), ": expected input sizes (N, C, ...) or (C), got []");
  const NllGeom geo = nll_geometry(sizes);
  const int red = reduction_of(c);
  MT_CHECK(target.defined() && target.dtype() == DType::Int64 && target.sizes() == geo.target_shape, c.name(),
           ": expected Int64 target of shape ", shape_str(geo.target_shape), ", got ",
           target.defined() ? target.describe() : "undefined");
  const IntList gshape = red == 0 ? geo.target_shape : IntList{};
  MT_CHECK(g.sizes() == gshape, c.name(), ": expected a gradient of shape ", shape_str(gshape), ", got ", g.describe());
  MT_CHECK(!weight.defined() || (weight.dim() == 1 && weight.sizes()[0] == geo.c), c.name(),
           ": weight must be 1-D of size C = ", geo.c, ", got ", weight.describe());
  DeviceGuard guard(g.device().index());
  const Tensor gd = dense(g, c.name()), tg = dense(target, c.name());
  const Tensor wd = weight.defined() ? dense(cast_to(weight, DType::Float64, c.name()), c.name()) : Tensor();
  NllArgs a = nll_args(c, geo, Tensor(), tg, wd);
  DeferredCheck check = target_check(c.name(), tg.sizes(), geo.c, a.ignore);
  a.bad = check.slot();
  Tensor out = empty_on(sizes, g.dtype(), g.device());
  fill_(out, 0.0);
  Scratch scratch(sizeof(double));
  MT_CUDA_CHECK(launch_nll_backward(g.dtype(), a, gd.data_ptr(), out.data_ptr(), scratch.data_as<double>(),
                                    current_stream()),
                c.name());
  check.commit(tg.data_ptr(), sizeof(int64_t));
  return {out};
}

const bool kRegistered = [] {
  register_kernel("softmax", DeviceType::CUDA, softmax_cuda<false>);
  register_kernel("log_softmax", DeviceType::CUDA, softmax_cuda<true>);
  register_kernel("softmax_backward", DeviceType::CUDA, softmax_grad_cuda<false>);
  register_kernel("log_softmax_backward", DeviceType::CUDA, softmax_grad_cuda<true>);
  register_kernel("nll_loss", DeviceType::CUDA, nll_loss_cuda);
  register_kernel("nll_loss_backward", DeviceType::CUDA, nll_loss_backward_cuda);
  return true;
}();

}  // namespace
}  // namespace mixtape::cuda
