// ops/cuda/creation_ops.cpp — fill_, full_like, copy_, add_, mul_ and random_fill_ on CUDA, as
// ops/creation.cpp defines them on the CPU (argument checks shared through ops/inplace_args.h).
#include <cstdint>
#include <utility>

#include "core/cuda/graph.h"
#include "ops/creation.h"
#include "ops/cuda/tensor_iter.h"
#include "ops/inplace_args.h"
#include "ops/functors.h"
#include "ops/pointwise.h"
#include "ops/pointwise_op.h"

namespace mixtape::cuda {
namespace {

void fill_raw(const Tensor& t, double value, const char* op) {
  if (t.numel() == 0) return;
  DeviceGuard guard(t.device().index());
  const Operands o = make_operands_float8_ok(op, t, {});
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

// The bytes [first, last) a tensor's elements span.
std::pair<uintptr_t, uintptr_t> byte_span(const Tensor& t) {
  uintptr_t lo = reinterpret_cast<uintptr_t>(t.data_ptr()), hi = lo;
  for (size_t d = 0; d < t.sizes().size(); ++d) {
    const int64_t reach = (t.sizes()[d] - 1) * t.strides()[d] * static_cast<int64_t>(t.element_size());
    (reach < 0 ? lo : hi) += static_cast<uintptr_t>(reach);  // a negative stride reaches below the origin
  }
  return {lo, hi + t.element_size()};
}

// Whether self op= other can be written straight into self with the arithmetic of the out-of-place
// op plus write-back: the op computes in self's dtype (so the write-back would be an exact copy),
// self's elements are distinct and dense (contiguous), and `other` is a wrapped number, lies in
// memory self does not touch, or is self itself — an elementwise kernel reads each element before
// writing it at the same index, so only a different view of self's memory (shifted, transposed,
// broadcast from part of it) could read an element already written.
bool writes_in_place(const OpSchema& op, const Tensor& self, const Tensor& other, PointwiseDtypes rule) {
  if (self.numel() == 0 || !self.is_contiguous()) return false;
  if (!other.is_wrapped_number() && other.device() != self.device()) return false;
  if (binary_compute_dtype(OpCall{{self, other}, {}, &op}, rule) != self.dtype()) return false;
  if (other.is_wrapped_number()) return true;
  if (other.data_ptr() == self.data_ptr() && other.sizes() == self.sizes() && other.strides() == self.strides())
    return true;
  const auto [a0, a1] = byte_span(self);
  const auto [b0, b1] = byte_span(other);
  return other.numel() == 0 || b1 <= a0 || a1 <= b0;
}

// In-place a op= b, as ops/creation.cpp (checks in ops/inplace_args.h): the result of the
// out-of-place op in the promoted dtype, written back with one rounding — computed straight into
// self when that is the same arithmetic (writes_in_place: one launch), else out of place and
// copied back.
TensorList add_inplace_cuda(const OpCall& c) {
  const Tensor& self = c.inputs[0];
  Tensor other = c.inputs[1];
  check_inplace_result(c.name(), self, other);
  const double alpha = c.attrs.get<double>("alpha");
  if (alpha != 1.0) other = mul(other, alpha);
  static const OpSchema& add_op = *find_op("add");
  if (writes_in_place(add_op, self, other, fn::Add::kDtypes)) {
    const fn::Add f{};
    run_binary_into(c.name(), self, self, other.detach(), self.dtype(), false, &f, &fn::CudaKernels<fn::Add>::binary);
    return {self};
  }
  Tensor r = add(self.detach(), other.detach());
  copy_into(self, r, c.name());
  return {self};
}
TensorList mul_inplace_cuda(const OpCall& c) {
  const Tensor& self = c.inputs[0];
  const Tensor& other = c.inputs[1];
  check_inplace_result(c.name(), self, other);
  static const OpSchema& mul_op = *find_op("mul");
  if (writes_in_place(mul_op, self, other, fn::Mul::kDtypes)) {
    const fn::Mul f{};
    run_binary_into(c.name(), self, self, other.detach(), self.dtype(), false, &f, &fn::CudaKernels<fn::Mul>::binary);
    return {self};
  }
  Tensor r = mul(self.detach(), other.detach());
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
