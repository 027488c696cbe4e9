// ops/cuda/creation_ops.cpp — fill_, full_like, copy_, add_, mul_ and random_fill_ on CUDA, as
// ops/creation.cpp defines them on the CPU (argument checks shared through ops/inplace_args.h).
#include "core/cuda/graph.h"
#include "ops/creation.h"
#include "ops/cuda/tensor_iter.h"
#include "ops/inplace_args.h"
#include "ops/pointwise.h"

namespace mixtape::cuda {
namespace {

void fill_raw(const Tensor& t, double value, const char* op) {
  if (t.numel() == 0) return;
  DeviceGuard guard(t.device().index());
  const Operands o = make_operands(op, t, {});
  MT_CUDA_CHECK(launch_fill(t.dtype(), o, value, current_stream()), op);
}
TensorList fill_cuda(const OpCall& c) {
  fill_raw(c.inputs[0], c.attrs.get<double>("value"), c.name());
  return {c.inputs[0]};
}
TensorList full_like_cuda(const OpCall& c) {
  const Tensor& t = c.inputs[0];
  Tensor out = empty_on(t.sizes(), t.dtype(), t.device());
  fill_raw(out, c.attrs.get<double>("value"), c.name());
  return {out};
}
TensorList copy_cuda(const OpCall& c) {
  const Tensor& dst = c.inputs[0];
  const Tensor& src = c.inputs[1];
  check_copy_args(c.name(), dst, src);
  copy_into(dst, src, c.name());
  return {dst};
}

// In-place a op= b, as ops/creation.cpp (checks in ops/inplace_args.h): computed out of place in
// the promoted dtype, then written back with one rounding.
TensorList add_inplace_cuda(const OpCall& c) {
  const Tensor& self = c.inputs[0];
  Tensor other = c.inputs[1];
  check_inplace_result(c.name(), self, other);
  const double alpha = c.attrs.get<double>("alpha");
  if (alpha != 1.0) other = mul(other, alpha);
  Tensor r = add(self.detach(), other.detach());
  copy_into(self, r, c.name());
  return {self};
}
TensorList mul_inplace_cuda(const OpCall& c) {
  const Tensor& self = c.inputs[0];
  check_inplace_result(c.name(), self, c.inputs[1]);
  Tensor r = mul(self.detach(), c.inputs[1].detach());
  copy_into(self, r, c.name());
  return {self};
}

TensorList random_fill_cuda(const OpCall& c) {
  const Tensor& t = c.inputs[0];
  check_not_capturing(c.name(), "draws random numbers (the generator's seed and offset would be fixed in the graph: every replay would repeat the same numbers)");
  MT_CHECK(t.is_contiguous(), c.name(), ": expected a contiguous tensor");
  MT_CHECK(is_floating(t.dtype()), c.name(), ": expected a floating dtype, got ", t.describe());
  DeviceGuard guard(t.device().index());
  MT_CUDA_CHECK(launch_random_fill(t.dtype(), t.data_ptr(), t.numel(), static_cast<uint64_t>(c.attrs.get<int64_t>("seed")),
                                   static_cast<uint64_t>(c.attrs.get<int64_t>("offset")), c.attrs.get<bool>("normal"),
                                   current_stream()),
                c.name());
  return {t};
}

const bool kRegistered = [] {
  register_kernel("fill_", DeviceType::CUDA, fill_cuda);
  register_kernel("full_like", DeviceType::CUDA, full_like_cuda);
  register_kernel("copy_", DeviceType::CUDA, copy_cuda);
  register_kernel("add_", DeviceType::CUDA, add_inplace_cuda);
  register_kernel("mul_", DeviceType::CUDA, mul_inplace_cuda);
  register_kernel("random_fill_", DeviceType::CUDA, random_fill_cuda);
  return true;
}();

}  // namespace
}  // namespace mixtape::cuda
