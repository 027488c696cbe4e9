// ops/cuda/batch_norm_ops.cpp — CUDA kernels of batch_norm and batch_norm_backward: inputs, attrs,
// outputs and checks as ops/normalization.cpp (same messages), kernels in batch_norm.cu. Channel
// parameters and statistics of any floating dtype are read as f64 device copies; the running
// statistics are updated in place (written back in their own dtype, versions bumped, as the CPU
// kernel does below autograd). Statistics outputs: f64 for f64 x, else f32.
#include "ops/cuda/batch_norm_kernels.h"
#include "ops/cuda/tensor_iter.h"

namespace mixtape::cuda {
namespace {

DType stat_dtype(DType x) { return x == DType::Float64 ? DType::Float64 : DType::Float32; }

void check_bn_input(const char* op, const Tensor& x) {
  MT_CHECK(x.defined() && x.dim() >= 2, op, ": expected input of shape (N, C) or (N, C, *), got ",
           x.defined() ? x.describe() : std::string("an undefined tensor"));
  MT_CHECK(is_floating(x.dtype()), op, ": expected a floating input (f16, bf16, f32, f64), got ", x.describe());
}
void check_channel_param(const char* op, const char* what, const Tensor& t, int64_t C) {
  if (!t.defined()) return;
  MT_CHECK(t.dim() == 1 && t.size(0) == C, op, ": ", what, " must have shape [", C, "] (C = input.size(1)), got ",
           t.describe());
  MT_CHECK(is_floating(t.dtype()), op, ": ", what, " must be floating, got ", t.describe());
}
BnShape shape_of(const Tensor& x) {
  int64_t S = 1;
  for (int64_t d = 2; d < x.dim(); ++d) S *= x.size(d);
  return {x.size(0), x.size(1), S};
}
// A (C) parameter as a dense f64 device tensor (a copy: the kernels may write it).
Tensor f64_copy(const Tensor& t, const char* op) {
  if (!t.defined()) return Tensor();
  Tensor out = empty_on(t.sizes(), DType::Float64, t.device());
  copy_into(out, t.detach(), op);
  return out;
}
const double* dptr(const Tensor& t) { return t.defined() ? static_cast<const double*>(t.data_ptr()) : nullptr; }
double* mptr(const Tensor& t) { return t.defined() ? static_cast<double*>(t.data_ptr()) : nullptr; }

// inputs: x, running_mean, running_var, weight, bias; attrs: training, momentum, eps
TensorList batch_norm_cuda(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& rm = call.inputs[1];
  const Tensor& rv = call.inputs[2];
  const Tensor& w = call.inputs[3];
  const Tensor& b = call.inputs[4];
  const bool training = call.attrs.get<bool>("training");
  const double momentum = call.attrs.get<double>("momentum");
  const double eps = call.attrs.get<double>("eps");
  check_bn_input(call.name(), x);
  const BnShape v = shape_of(x);
  check_channel_param(call.name(), "running_mean", rm, v.C);
  check_channel_param(call.name(), "running_var", rv, v.C);
  check_channel_param(call.name(), "weight", w, v.C);
  check_channel_param(call.name(), "bias", b, v.C);
  MT_CHECK(rm.defined() == rv.defined(), call.name(), ": running_mean and running_var must both be given or both be "
           "undefined, got ", rm.defined() ? "only running_mean" : "only running_var");
  MT_CHECK(training || rm.defined(), call.name(), ": running_mean and running_var must be defined in evaluation mode "
           "(training=false), got undefined tensors");
  MT_CHECK(!training || v.N * v.S > 1, call.name(), ": expected more than 1 value per channel when training, got input ",
           x.describe());
  MT_CHECK(eps >= 0, call.name(), ": eps must be non-negative, got ", eps);
  const Device dev = x.device();
  DeviceGuard guard(dev.index());
  const Tensor xc = dense(x, call.name());
  auto chan = [&]() { return empty_on({v.C}, DType::Float64, dev); };
  Tensor mean, var, var_unbiased;
  Tensor rm64 = training ? f64_copy(rm, call.name()) : Tensor(), rv64 = training ? f64_copy(rv, call.name()) : Tensor();
  if (training) {
    mean = chan(), var = chan(), var_unbiased = chan();
    MT_CUDA_CHECK(launch_bn_stats(x.dtype(), xc.data_ptr(), v, mptr(mean), mptr(var), mptr(var_unbiased),
                                  current_stream()),
                  call.name());
  } else {
    mean = f64_copy(rm, call.name());
    var = f64_copy(rv, call.name());
  }
  const Tensor w64 = f64_copy(w, call.name()), b64 = f64_copy(b, call.name());
  Tensor invstd = chan(), scale = chan(), shift = chan();
  MT_CUDA_CHECK(launch_bn_coefficients(v.C, dptr(mean), dptr(var), dptr(w64), dptr(b64), eps, mptr(invstd), mptr(scale),
                                       mptr(shift), mptr(rm64), mptr(rv64), dptr(var_unbiased), momentum,
                                       current_stream()),
                call.name());
  Tensor out = empty_on(x.sizes(), x.dtype(), dev);
  MT_CUDA_CHECK(launch_bn_affine(x.dtype(), xc.data_ptr(), v, dptr(scale), dptr(shift), out.data_ptr(), current_stream()),
                call.name());
  if (training && rm.defined()) {  // the running statistics, in place, in their own dtype
    copy_into(rm, rm64, call.name());
    copy_into(rv, rv64, call.name());
    rm.bump_version();
    rv.bump_version();
  }
  const DType sd = stat_dtype(x.dtype());
  return {out, cast_to(mean, sd, call.name()), cast_to(invstd, sd, call.name())};
}

// inputs: grad_out, x, weight, save_mean, save_invstd; attrs: training, eps
TensorList batch_norm_backward_cuda(const OpCall& call) {
  const Tensor& x = call.inputs[1];
  const Tensor& w = call.inputs[2];
  const bool training = call.attrs.get<bool>("training");
  check_bn_input(call.name(), x);
  const BnShape v = shape_of(x);
  MT_CHECK(call.inputs[0].sizes() == x.sizes(), call.name(), ": grad_out must have the input's shape ",
           shape_str(x.sizes()), ", got ", call.inputs[0].describe());
  check_channel_param(call.name(), "weight", w, v.C);
  check_channel_param(call.name(), "save_mean", call.inputs[3], v.C);
  check_channel_param(call.name(), "save_invstd", call.inputs[4], v.C);
  MT_CHECK(call.inputs[3].defined() && call.inputs[4].defined(), call.name(), ": save_mean and save_invstd are required");
  MT_CHECK(!training || v.N * v.S > 1, call.name(), ": expected more than 1 value per channel when training, got input ",
           x.describe());
  const Device dev = x.device();
  DeviceGuard guard(dev.index());
  const Tensor xc = dense(x, call.name());
  const Tensor gc = dense(cast_to(call.inputs[0], x.dtype(), call.name()), call.name());
  const Tensor mean = f64_copy(call.inputs[3], call.name()), invstd = f64_copy(call.inputs[4], call.name());
  const Tensor w64 = f64_copy(w, call.name());
  Tensor sum_g = empty_on({v.C}, DType::Float64, dev), sum_gxhat = empty_on({v.C}, DType::Float64, dev);
  Tensor coeffs = empty_on({3 * v.C}, DType::Float64, dev);
  Tensor gx = empty_on(x.sizes(), x.dtype(), dev);
  MT_CUDA_CHECK(launch_bn_backward(x.dtype(), gc.data_ptr(), xc.data_ptr(), v, dptr(mean), dptr(invstd), dptr(w64),
                                   training, mptr(sum_g), mptr(sum_gxhat), mptr(coeffs), gx.data_ptr(),
                                   current_stream()),
                call.name());
  const DType sd = stat_dtype(x.dtype());
  return {gx, cast_to(sum_gxhat, sd, call.name()), cast_to(sum_g, sd, call.name())};
}

const bool kRegistered = [] {
  register_kernel("batch_norm", DeviceType::CUDA, batch_norm_cuda);
  register_kernel("batch_norm_backward", DeviceType::CUDA, batch_norm_backward_cuda);
  return true;
}();

}  // namespace
}  // namespace mixtape::cuda
