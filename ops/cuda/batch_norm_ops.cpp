// ops/cuda/batch_norm_ops.cpp — CUDA kernels of batch_norm and batch_norm_backward: inputs, attrs
// and outputs as ops/normalization.cpp, whose checks they call (ops/normalization_args.h, same
// messages), kernels in batch_norm.cu. Channel parameters and statistics of any floating dtype
// are read as f64 device copies; the running statistics are updated in place (written back in
// their own dtype, versions bumped, as the CPU kernel does below autograd). Statistics outputs:
// f64 for f64 x, else f32.
#include "ops/cuda/batch_norm_kernels.h"
#include "ops/cuda/tensor_iter.h"
#include "ops/normalization_args.h"

namespace mixtape::cuda {
namespace {

// The checked channel view as the kernels' shape.
BnShape bn_shape(const ChannelView& v) { return {v.N, v.C, v.S}; }
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
  const BnShape v = bn_shape(check_batch_norm_args(call.name(), x, rm, rv, w, b, training, eps));
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
  const DType sd = norm_stat_dtype(x.dtype());
  return {out, cast_to(mean, sd, call.name()), cast_to(invstd, sd, call.name())};
}

// inputs: grad_out, x, weight, save_mean, save_invstd; attrs: training, eps
TensorList batch_norm_backward_cuda(const OpCall& call) {
  const Tensor& x = call.inputs[1];
  const Tensor& w = call.inputs[2];
  const bool training = call.attrs.get<bool>("training");
  const BnShape v = bn_shape(
      check_batch_norm_backward_args(call.name(), call.inputs[0], x, w, call.inputs[3], call.inputs[4], training));
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
  const DType sd = norm_stat_dtype(x.dtype());
  return {gx, cast_to(sum_gxhat, sd, call.name()), cast_to(sum_g, sd, call.name())};
}

const bool kRegistered = [] {
  register_kernel("batch_norm", DeviceType::CUDA, batch_norm_cuda);
  register_kernel("batch_norm_backward", DeviceType::CUDA, batch_norm_backward_cuda);
  return true;
}();

}  // namespace
}  // namespace mixtape::cuda
