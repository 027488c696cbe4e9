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

DType unary_compute_dtype(const OpCall& call, PointwiseDtypes rule) {
  const Tensor& x = call.inputs[0];
  MT_CHECK(x.defined(), call.name(), ": input 0 is an undefined tensor");
  if (rule == PointwiseDtypes::FloatOnly) check_floating_input(call, 0);
  // exp(bool) is f32, as in PyTorch; neg/abs of a bool has no meaning there either.
  if (rule == PointwiseDtypes::ToFloat && !is_floating(x.dtype())) return kDefaultFloat;
  MT_CHECK(x.dtype() != DType::Bool, call.name(), ": bool tensors are not supported, got ", x.describe());
  return x.dtype();
}

DType binary_compute_dtype(const OpCall& call, PointwiseDtypes rule) {
  MT_CHECK(call.inputs.size() == 2, call.name(), ": expected 2 inputs, got ", call.inputs.size());
  const Tensor& a = call.inputs[0];
  const Tensor& b = call.inputs[1];
  MT_CHECK(a.defined(), call.name(), ": input 0 is an undefined tensor");
  MT_CHECK(b.defined(), call.name(), ": input 1 is an undefined tensor");
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
