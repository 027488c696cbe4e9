// ops/pointwise_op.cpp — the dtype rules of pointwise ops (ops/pointwise_op.h), one place for the
// CPU loops and the CUDA kernels: the compute dtype, and the errors for inputs a rule refuses.
#include "ops/pointwise_op.h"

namespace mixtape {
namespace {

void check_floating_input(const OpCall& call, size_t i) {
  const Tensor& x = call.inputs[i];
  MT_CHECK(is_floating(x.dtype()), call.name(), ": expected a floating tensor (f16, bf16, f32, f64), got ",
           x.describe());
}

}  // namespace

DType unary_compute_dtype(const OpCall& call, PointwiseDtypes rule, bool float8_ok) {
  const Tensor& x = call.inputs[0];
  MT_CHECK(x.defined(), call.name(), ": input 0 is an undefined tensor");
  if (is_float8(x.dtype()) && !float8_ok) throw_no_float8_kernel(x.dtype(), call.name());
  if (rule == PointwiseDtypes::FloatOnly) check_floating_input(call, 0);
  // exp(bool) is f32, as in PyTorch; neg/abs of a bool has no meaning there either.
  if (rule == PointwiseDtypes::ToFloat && !is_floating(x.dtype())) return kDefaultFloat;
  MT_CHECK(x.dtype() != DType::Bool, call.name(), ": bool tensors are not supported, got ", x.describe());
  return x.dtype();
}

DType binary_compute_dtype(const OpCall& call, PointwiseDtypes rule, bool float8_ok) {
  MT_CHECK(call.inputs.size() == 2, call.name(), ": expected 2 inputs, got ", call.inputs.size());
  const Tensor& a = call.inputs[0];
  const Tensor& b = call.inputs[1];
  MT_CHECK(a.defined(), call.name(), ": input 0 is an undefined tensor");
  MT_CHECK(b.defined(), call.name(), ": input 1 is an undefined tensor");
  for (const Tensor* t : {&a, &b})
    if (is_float8(t->dtype()) && !float8_ok) throw_no_float8_kernel(t->dtype(), call.name());
  // result_type would refuse FP8 with another dtype of the same priority class (promote_types);
  // refuse it here first, naming the op. A wrapped number or 0-d tensor of another class is fine.
  const bool same_class = a.is_wrapped_number() == b.is_wrapped_number() && (a.dim() == 0) == (b.dim() == 0);
  MT_CHECK(!(same_class && a.dtype() != b.dtype() && (is_float8(a.dtype()) || is_float8(b.dtype()))), call.name(),
           ": FP8 does not promote with another dtype (as in PyTorch), got ", a.describe(), " and ", b.describe(),
           "; convert one operand with to() first");
  if (rule == PointwiseDtypes::FloatOnly) {
    check_floating_input(call, 0);
    check_floating_input(call, 1);
  }
  const DType dt = result_type(a, b);
  if (rule == PointwiseDtypes::ToFloat && !is_floating(dt)) return kDefaultFloat;  // true division of ints
  MT_CHECK(dt != DType::Bool, call.name(), ": bool tensors are not supported, got ", a.describe(), " and ",
           b.describe());
  return dt;
}

}  // namespace mixtape
