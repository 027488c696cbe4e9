// ops/cuda/batch_norm_ops.cpp — CUDA kernels of batch_norm and batch_norm_backward: inputs, attrs
// and outputs as ops/normalization.cpp, whose checks they call (ops/normalization_args.h, same
// messages), kernels in batch_norm.cu. Channel parameters and statistics of any floating dtype
// and strides are handed to the kernels as they are (read in their own dtype, no copies); the
// running statistics and the batch counter are updated in place by the kernels, versions bumped
// here, as the CPU kernel does below autograd. Statistics outputs: f64 for f64 x, else f32,
// written by the kernels directly. Launches per call: forward training 3, eval 2, backward 3,
// plus one copy for a non-contiguous x (or grad_out) and one cast for a grad_out of another dtype.
#include "core/cuda/scratch.h"
#include "ops/cuda/batch_norm_kernels.h"
#include "ops/cuda/tensor_iter.h"
#include "ops/normalization_args.h"

namespace mixtape::cuda {
namespace {

// The checked channel view as the kernels' shape.
BnShape bn_shape(const ChannelView& v) { return {v.N, v.C, v.S}; }
// A (C) tensor as the kernels see it (absent when undefined).
BnChan chan(const Tensor& t) {
  if (!t.defined()) return {};
  return {t.data_ptr(), t.stride(0), t.dtype()};
}

// inputs: x, running_mean, running_var, weight, bias, num_batches_tracked; attrs: training,
// momentum, eps
TensorList batch_norm_cuda(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& rm = call.inputs[1];
  const Tensor& rv = call.inputs[2];
  const Tensor& w = call.inputs[3];
  const Tensor& b = call.inputs[4];
  const Tensor counter = call.inputs.size() > 5 ? call.inputs[5] : Tensor();
  const bool training = call.attrs.get<bool>("training");
  const double momentum = call.attrs.get<double>("momentum");
  const double eps = call.attrs.get<double>("eps");
  const BnShape v = bn_shape(check_batch_norm_args(call.name(), x, rm, rv, w, b, training, eps, counter));
  const Device dev = x.device();
  DeviceGuard guard(dev.index());
  const Tensor xc = dense(x, call.name());
  const DType sd = norm_stat_dtype(x.dtype());
  Tensor out = empty_on(x.sizes(), x.dtype(), dev);
  Tensor mean = empty_on({v.C}, sd, dev), invstd = empty_on({v.C}, sd, dev);
  Scratch scratch(static_cast<size_t>(bn_scratch_doubles(v)) * sizeof(double), dev.index());
  const bool counted = training && counter.defined();
  MT_CUDA_CHECK(launch_bn_forward(x.dtype(), xc.data_ptr(), v, training, chan(rm), chan(rv), chan(w), chan(b), momentum,
                                  eps, counted ? static_cast<int64_t*>(counter.data_ptr()) : nullptr, chan(mean),
                                  chan(invstd), scratch.data_as<double>(), out.data_ptr(), current_stream()),
                call.name());
  if (training && rm.defined()) {  // written in place by the finalize kernel
    rm.bump_version();
    rv.bump_version();
  }
  if (counted) counter.bump_version();
  return {out, mean, invstd};
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
  const DType sd = norm_stat_dtype(x.dtype());
  Tensor gx = empty_on(x.sizes(), x.dtype(), dev);
  Tensor sum_gxhat = empty_on({v.C}, sd, dev), sum_g = empty_on({v.C}, sd, dev);
  Scratch scratch(static_cast<size_t>(bn_scratch_doubles(v)) * sizeof(double), dev.index());
  MT_CUDA_CHECK(launch_bn_backward(x.dtype(), gc.data_ptr(), xc.data_ptr(), v, training, chan(w), chan(call.inputs[3]),
                                   chan(call.inputs[4]), chan(sum_gxhat), chan(sum_g), scratch.data_as<double>(),
                                   gx.data_ptr(), current_stream()),
                call.name());
  return {gx, sum_gxhat, sum_g};
}

const bool kRegistered = [] {
  register_kernel("batch_norm", DeviceType::CUDA, batch_norm_cuda);
  register_kernel("batch_norm_backward", DeviceType::CUDA, batch_norm_backward_cuda);
  return true;
}();

}  // namespace
}  // namespace mixtape::cuda
