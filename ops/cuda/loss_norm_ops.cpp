// ops/cuda/loss_norm_ops.cpp — CUDA kernels of mse_loss, binary_cross_entropy (+ backward),
// binary_cross_entropy_with_logits and layer_norm: dtypes and attributes as ops/bce_loss.cpp, ops/mse_loss.cpp and
// ops/normalization.cpp, whose checks they call (ops/loss_args.h, ops/normalization_args.h), kernels in
// loss_norm.cu. Weights are broadcast to the input's shape and materialised in the compute dtype
// (f32, f64 for f64), as the CPU does.
#include <algorithm>
#include <cstring>

#include "core/cuda/deferred_check.h"
#include "core/cuda/scratch.h"
#include "ops/creation.h"
#include "ops/cuda/loss_norm_kernels.h"
#include "ops/cuda/tensor_iter.h"
#include "ops/loss_args.h"
#include "ops/normalization_args.h"

namespace mixtape::cuda {
namespace {

int reduction_of(const OpCall& c) { return static_cast<int>(loss_reduction(c.attrs, c.name())); }
DType weight_dtype(DType dt) { return dt == DType::Float64 ? DType::Float64 : DType::Float32; }
Tensor broadcast_dense(const Tensor& w, const IntList& shape, DType dt, Device dev, const char* op) {
  if (!w.defined()) return w;
  Tensor out = empty_on(shape, dt, dev);
  copy_into(out, w, op);
  return out;
}
const void* ptr(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// One reduced or elementwise loss over dense x, t of dtype dt.
Tensor run_loss(const OpCall& c, LossKind kind, const Tensor& x, const Tensor& t, const Tensor& w, const Tensor& pw,
                DType dt) {
  const int red = reduction_of(c);
  DeviceGuard guard(x.device().index());
  const Tensor xd = dense(cast_to(x, dt, c.name()), c.name()), td = dense(cast_to(t, dt, c.name()), c.name());
  const Tensor wd = broadcast_dense(w, x.sizes(), weight_dtype(dt), x.device(), c.name());
  const Tensor pwd = broadcast_dense(pw, x.sizes(), weight_dtype(dt), x.device(), c.name());
  Tensor out = empty_on(red == 0 ? x.sizes() : IntList{}, dt, x.device());
  Scratch scratch(red == 0 ? 0 : sizeof(double) * static_cast<size_t>(loss_scratch_doubles()));
  MT_CUDA_CHECK(launch_loss(kind, dt, xd.data_ptr(), td.data_ptr(), ptr(wd), ptr(pwd), x.numel(), red, out.data_ptr(),
                            scratch.data_as<double>(), current_stream()),
                c.name());
  return out;
}

TensorList mse_loss_cuda(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& t = c.inputs[1];
  check_elementwise_loss_args(c.name(), x, t);
  return {run_loss(c, LossKind::Mse, x, t, Tensor(), Tensor(), promote_types(x.dtype(), t.dtype()))};
}

// Probabilities outside [0, 1] are an error naming the first position, found on the device and
// reported at the next synchronisation (core/cuda/deferred_check.h); meanwhile they give NaN.
// The element of dtype dt whose bytes are `bits` (little-endian, zero-extended), as a double.
double value_from_bits(DType dt, uint64_t bits) {
  Tensor one = Tensor::empty({1}, TensorOptions(dt));
  std::memcpy(one.data_ptr(), &bits, one.element_size());
  return get_element(one, 0);
}

void check_probabilities(const OpCall& c, const Tensor& pd) {
  const DType dt = pd.dtype();
  DeferredCheck check(c.name(), [dt, shape = pd.sizes()](uint64_t position, uint64_t bits) {
    return bad_probability_message(value_from_bits(dt, bits), static_cast<int64_t>(position), shape);
  });
  MT_CUDA_CHECK(launch_first_bad_probability(dt, pd.data_ptr(), pd.numel(), check.slot(), current_stream()), c.name());
  check.commit(pd.data_ptr(), pd.element_size());
}

TensorList bce_cuda(const OpCall& c) {
  const Tensor& p = c.inputs[0];
  const Tensor& t = c.inputs[1];
  const Tensor& w = c.inputs[2];
  check_elementwise_loss_args(c.name(), p, t, w);
  const DType dt = promote_types(p.dtype(), t.dtype());
  DeviceGuard guard(p.device().index());
  const Tensor pd = dense(cast_to(p, dt, c.name()), c.name());
  check_probabilities(c, pd);
  return {run_loss(c, LossKind::Bce, pd, t, w, Tensor(), dt)};
}

TensorList bce_backward_cuda(const OpCall& c) {
  const Tensor& g = c.inputs[0];
  const Tensor& p = c.inputs[1];
  const Tensor& t = c.inputs[2];
  const Tensor& w = c.inputs[3];
  check_loss_floating(c.name(), g, "gradient");
  check_elementwise_loss_args(c.name(), p, t, w);
  const int red = reduction_of(c);
  const IntList gshape = red == 0 ? p.sizes() : IntList{};
  MT_CHECK(g.sizes() == gshape, c.name(), ": expected a gradient of shape ", shape_str(gshape), ", got ", g.describe());
  const DType dt = promote_types(g.dtype(), promote_types(p.dtype(), t.dtype()));
  DeviceGuard guard(p.device().index());
  const Tensor gd = dense(cast_to(g, dt, c.name()), c.name()), pd = dense(cast_to(p, dt, c.name()), c.name());
  const Tensor td = dense(cast_to(t, dt, c.name()), c.name());
  const Tensor wd = broadcast_dense(w, p.sizes(), weight_dtype(dt), p.device(), c.name());
  Tensor out = empty_on(p.sizes(), dt, p.device());
  MT_CUDA_CHECK(launch_bce_backward(dt, gd.data_ptr(), pd.data_ptr(), td.data_ptr(), ptr(wd), p.numel(), red,
                                    out.data_ptr(), current_stream()),
                c.name());
  return {out};
}

TensorList bce_logits_cuda(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& t = c.inputs[1];
  const Tensor& w = c.inputs[2];
  const Tensor& pw = c.inputs[3];
  check_elementwise_loss_args(c.name(), x, t, w, pw);
  return {run_loss(c, LossKind::BceLogits, x, t, w, pw, promote_types(x.dtype(), t.dtype()))};
}

TensorList layer_norm_cuda(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& w = call.inputs[1];
  const Tensor& b = call.inputs[2];
  const IntList ns = call.attrs.get<IntList>("normalized_shape");
  const double eps = call.attrs.get<double>("eps");
  const LayerNormRows lr = check_layer_norm_args(call.name(), x, w, b, ns, eps);
  const int64_t M = lr.M, rows = lr.rows;
  const IntList& stat_shape = lr.stat_shape;
  const DType sd = norm_stat_dtype(x.dtype());  // acc dtype = stat dtype
  DeviceGuard guard(x.device().index());
  const Tensor xc = dense(x, call.name());
  const Tensor wc = w.defined() ? dense(cast_to(w.detach(), sd, call.name()), call.name()) : Tensor();
  const Tensor bc = b.defined() ? dense(cast_to(b.detach(), sd, call.name()), call.name()) : Tensor();
  Tensor out = empty_on(x.sizes(), x.dtype(), x.device());
  Tensor mean = empty_on(stat_shape, DType::Float64, x.device()), rstd = empty_on(stat_shape, DType::Float64, x.device());
  MT_CUDA_CHECK(launch_layer_norm(x.dtype(), xc.data_ptr(), ptr(wc), ptr(bc), rows, M, eps, out.data_ptr(),
                                  static_cast<double*>(mean.data_ptr()), static_cast<double*>(rstd.data_ptr()),
                                  current_stream()),
                call.name());
  return {out, cast_to(mean, sd, call.name()), cast_to(rstd, sd, call.name())};
}

const bool kRegistered = [] {
  register_kernel("mse_loss", DeviceType::CUDA, mse_loss_cuda);
  register_kernel("binary_cross_entropy", DeviceType::CUDA, bce_cuda);
  register_kernel("binary_cross_entropy_backward", DeviceType::CUDA, bce_backward_cuda);
  register_kernel("binary_cross_entropy_with_logits", DeviceType::CUDA, bce_logits_cuda);
  register_kernel("layer_norm", DeviceType::CUDA, layer_norm_cuda);
  return true;
}();

}  // namespace
}  // namespace mixtape::cuda
