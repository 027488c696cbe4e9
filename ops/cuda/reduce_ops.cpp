// ops/cuda/reduce_ops.cpp — CUDA kernels of sum, mean, max (values + indices), amax and argmax,
// with the CPU ops' semantics (ops/reduce.cpp, ops/shape_ops.cpp): the same dims/keepdim/dtype
// attributes (read and checked by ops/reduce_dims.h, shared with the CPU), the same accumulator types (16-bit accumulate in f32, f32 in f64, integers in i64),
// one rounding to the output dtype, NaN propagation in max/amax/argmax (the first NaN wins).
// Strategy, as the CPU's: permute the reduced dims last and make the tensor dense on the device,
// so each output element reduces one contiguous run (kernels in ops/cuda/reduce.cu).
#include <algorithm>
#include <vector>

#include "ops/argmax_args.h"
#include "ops/cuda/tensor_iter.h"
#include "ops/reduce_dims.h"

namespace mixtape::cuda {
namespace {

// x with kept dims first and reduced dims last, dense on the device; returns (tensor, run length).
std::pair<Tensor, int64_t> as_runs(const Tensor& x, const IntList& rdims, const char* op) {
  auto [p, len] = reduced_last_view(x, rdims);
  return {dense(p, op), len};
}

DType reduce_acc_dtype(DType t) {
  if (is_reduced_float(t)) return DType::Float32;
  if (is_floating(t)) return DType::Float64;
  return DType::Int64;
}

// attrs: dims (empty = all), keepdim, dtype (optional); the op (sum or mean) decides the rest
TensorList sum_cuda(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const SumArgs a = sum_args(call, x);
  const bool is_mean = a.is_mean;
  DeviceGuard guard(x.device().index());
  const Tensor src = cast_to(x, a.src_dtype, call.name());
  auto [runs_t, len] = as_runs(src, a.rdims, call.name());
  Tensor out = empty_on(reduced_shape(x, a.rdims, a.keepdim), a.out_dtype, x.device());
  if (out.numel() == 0) return {out};
  Tensor acc = empty_on(out.sizes(), reduce_acc_dtype(src.dtype()), x.device());
  MT_CUDA_CHECK(launch_reduce_runs(is_mean ? ReduceOp::Mean : ReduceOp::Sum, src.dtype(), runs_t.data_ptr(), out.numel(),
                                   len, acc.data_ptr(), nullptr, current_stream()),
                call.name());
  copy_into(out, acc, call.name());  // the single rounding to the output dtype
  return {out};
}

void check_not_bool(const OpCall& call, const Tensor& x) {
  MT_CHECK(x.dtype() != DType::Bool, call.name(), ": bool tensors are not supported on CUDA, got ", x.describe());
}

TensorList max_cuda(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  MT_CHECK(x.numel() > 0, call.name(), ": cannot reduce an empty tensor ", x.describe());
  check_not_bool(call, x);
  const int64_t dim = wrap_dim(call.attrs.get<int64_t>("dim"), x.dim(), call.name());
  const bool keepdim = call.attrs.get<bool>("keepdim");
  const IntList rdims = x.dim() == 0 ? IntList{} : IntList{dim};
  DeviceGuard guard(x.device().index());
  auto [runs_t, len] = as_runs(x, rdims, call.name());
  const IntList oshape = reduced_shape(x, rdims, keepdim);
  Tensor values = empty_on(oshape, x.dtype(), x.device());
  Tensor indices = empty_on(oshape, DType::Int64, x.device());
  MT_CUDA_CHECK(launch_reduce_runs(ReduceOp::Max, x.dtype(), runs_t.data_ptr(), values.numel(), len, values.data_ptr(),
                                   static_cast<int64_t*>(indices.data_ptr()), current_stream()),
                call.name());
  return {values, indices};
}

TensorList amax_cuda(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  MT_CHECK(x.numel() > 0, call.name(), ": cannot reduce an empty tensor ", x.describe());
  check_not_bool(call, x);
  const IntList rdims = reduced_dims(x, call.attrs.get<IntList>("dims"), call.name());
  DeviceGuard guard(x.device().index());
  auto [runs_t, len] = as_runs(x, rdims, call.name());
  Tensor out = empty_on(reduced_shape(x, rdims, call.attrs.get<bool>("keepdim")), x.dtype(), x.device());
  MT_CUDA_CHECK(launch_reduce_runs(ReduceOp::Max, x.dtype(), runs_t.data_ptr(), out.numel(), len, out.data_ptr(),
                                   nullptr, current_stream()),
                call.name());
  return {out};
}

// argmax(x, dim?, keepdim): without a dim, the index into the flattened tensor.
TensorList argmax_cuda(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const ArgmaxArgs a = argmax_args(call, x);
  IntList rdims;
  if (!a.dim)
    for (int64_t d = 0; d < x.dim(); ++d) rdims.push_back(d);
  else if (x.dim() > 0)
    rdims = {*a.dim};
  DeviceGuard guard(x.device().index());
  Tensor out = empty_on(a.out_sizes, DType::Int64, x.device());
  if (out.numel() == 0) return {out};
  auto [runs_t, len] = as_runs(x, rdims, call.name());
  MT_CUDA_CHECK(launch_reduce_runs(ReduceOp::Max, x.dtype(), runs_t.data_ptr(), out.numel(), len, nullptr,
                                   static_cast<int64_t*>(out.data_ptr()), current_stream()),
                call.name());
  return {out};
}

const bool kRegistered = [] {
  register_kernel("sum", DeviceType::CUDA, sum_cuda);
  register_kernel("mean", DeviceType::CUDA, sum_cuda);  // sum_args: the op is mean
  register_kernel("max", DeviceType::CUDA, max_cuda);
  register_kernel("amax", DeviceType::CUDA, amax_cuda);
  register_kernel("argmax", DeviceType::CUDA, argmax_cuda);
  return true;
}();

}  // namespace
}  // namespace mixtape::cuda
