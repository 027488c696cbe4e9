// ops/pointwise.cpp — elementwise ops: definition, AMP policy, backward, CPU kernel, each
// block in one place. Arithmetic comes from ops/functors.h (shared with CUDA); broadcasting,
// promotion and 16-bit rounding from ops/cpu/elementwise.h.
//
// Shapes: inputs broadcast (NumPy rules) to the output shape; backward formulas reduce the
// gradient back to each input's shape with sum_to. Subgradients follow PyTorch: abs'(0) = 0,
// relu'(0) = 0, sqrt'(0) = inf.
#include "ops/pointwise.h"

#include "ops/cpu/elementwise.h"
#include "ops/functors.h"
#include "ops/op_def.h"

namespace mixtape {
namespace {
using cpu::TypeRule;

// ---- add: out = a + b ----
TensorList add_backward(BackwardContext& c) {
  return {c.needs_input_grad(0) ? sum_to(c.grad(), c.input_sizes(0)) : Tensor(),
          c.needs_input_grad(1) ? sum_to(c.grad(), c.input_sizes(1)) : Tensor()};
}
const OpSchema& kAdd = define_op("add").save({}).grad(add_backward).kernel(DeviceType::CPU, cpu::binary_kernel<fn::Add>);

// ---- sub: out = a - b ----
TensorList sub_backward(BackwardContext& c) {
  return {c.needs_input_grad(0) ? sum_to(c.grad(), c.input_sizes(0)) : Tensor(),
          c.needs_input_grad(1) ? sum_to(neg(c.grad()), c.input_sizes(1)) : Tensor()};
}
const OpSchema& kSub = define_op("sub").save({}).grad(sub_backward).kernel(DeviceType::CPU, cpu::binary_kernel<fn::Sub>);

// ---- mul: out = a * b ----
TensorList mul_backward(BackwardContext& c) {
  return {c.needs_input_grad(0) ? sum_to(c.grad() * c.input(1), c.input_sizes(0)) : Tensor(),
          c.needs_input_grad(1) ? sum_to(c.grad() * c.input(0), c.input_sizes(1)) : Tensor()};
}
const OpSchema& kMul = define_op("mul").grad(mul_backward).kernel(DeviceType::CPU, cpu::binary_kernel<fn::Mul>);

// ---- div: out = a / b (true division: integers divide as f32) ----
TensorList div_backward(BackwardContext& c) {
  Tensor b = c.input(1);
  return {c.needs_input_grad(0) ? sum_to(c.grad() / b, c.input_sizes(0)) : Tensor(),
          c.needs_input_grad(1) ? sum_to(neg(c.grad()) * c.input(0) / (b * b), c.input_sizes(1)) : Tensor()};
}
const OpSchema& kDiv =
    define_op("div").grad(div_backward).kernel(DeviceType::CPU, cpu::binary_kernel<fn::Div, TypeRule::FloatingOnly>);

// ---- eq: out = (a == b), bool; no gradient ----
const OpSchema& kEq =
    define_op("eq").not_differentiable().kernel(DeviceType::CPU, cpu::binary_kernel<fn::Eq, TypeRule::Bool>);

// ---- neg: out = -x ----
TensorList neg_backward(BackwardContext& c) { return {neg(c.grad())}; }
const OpSchema& kNeg =
    define_op("neg").save({}).grad(neg_backward).kernel(DeviceType::CPU, cpu::unary_kernel<fn::Neg, TypeRule::Same>);

// ---- exp: out = e^x; AMP fp32 (exp of an f16 overflows above 11.09) ----
TensorList exp_backward(BackwardContext& c) { return {c.grad() * c.output(0)}; }
const OpSchema& kExp = define_op("exp").args({"input"})
                           .policy(AmpPolicy::FP32)
                           .save({}, {0})
                           .grad(exp_backward)
                           .kernel(DeviceType::CPU, cpu::unary_kernel<fn::Exp>);

// ---- log: out = ln x; AMP fp32 ----
TensorList log_backward(BackwardContext& c) { return {c.grad() / c.input(0)}; }
const OpSchema& kLog =
    define_op("log").args({"input"}).policy(AmpPolicy::FP32).grad(log_backward).kernel(DeviceType::CPU, cpu::unary_kernel<fn::Log>);

// ---- sqrt: out = sqrt(x) ----
TensorList sqrt_backward(BackwardContext& c) { return {c.grad() / (c.output(0) * 2.0)}; }
const OpSchema& kSqrt =
    define_op("sqrt").save({}, {0}).grad(sqrt_backward).kernel(DeviceType::CPU, cpu::unary_kernel<fn::Sqrt>);

// ---- sign: no gradient ----
const OpSchema& kSign =
    define_op("sign").not_differentiable().kernel(DeviceType::CPU, cpu::unary_kernel<fn::Sign, TypeRule::Same>);

// ---- abs: out = |x|; d/dx = sign(x), 0 at 0 ----
TensorList abs_backward(BackwardContext& c) { return {c.grad() * sign(c.input(0))}; }
const OpSchema& kAbs =
    define_op("abs").grad(abs_backward).kernel(DeviceType::CPU, cpu::unary_kernel<fn::Abs, TypeRule::Same>);

// ---- relu: out = max(x, 0); backward g * (out > 0) via relu_grad, itself differentiable in g ----
TensorList relu_grad_backward(BackwardContext& c) { return {relu_grad(c.grad(), c.input(1)), Tensor()}; }
const OpSchema& kReluGrad = define_op("relu_grad")
                                .save({1})
                                .grad(relu_grad_backward)
                                .kernel(DeviceType::CPU, cpu::binary_kernel<fn::ReluGrad>);
TensorList relu_backward(BackwardContext& c) { return {relu_grad(c.grad(), c.output(0))}; }
const OpSchema& kRelu =
    define_op("relu").save({}, {0}).grad(relu_backward).kernel(DeviceType::CPU, cpu::unary_kernel<fn::Relu>);

// ---- sigmoid: out = 1 / (1 + e^-x); d/dx = out (1 - out) ----
TensorList sigmoid_backward(BackwardContext& c) {
  Tensor y = c.output(0);
  return {c.grad() * y * (1.0 - y)};
}
const OpSchema& kSigmoid =
    define_op("sigmoid").save({}, {0}).grad(sigmoid_backward).kernel(DeviceType::CPU, cpu::unary_kernel<fn::Sigmoid>);

// ---- tanh: d/dx = 1 - out^2 ----
TensorList tanh_backward(BackwardContext& c) {
  Tensor y = c.output(0);
  return {c.grad() * (1.0 - y * y)};
}
const OpSchema& kTanh =
    define_op("tanh").save({}, {0}).grad(tanh_backward).kernel(DeviceType::CPU, cpu::unary_kernel<fn::Tanh>);

// ---- pow: out = x^e for a scalar e; AMP fp32 (PyTorch's list) ----
struct PowFunctor : fn::PowScalar {
  static PowFunctor from(const Attrs& a) { return PowFunctor{{a.get<double>("exponent")}}; }
};
TensorList pow_backward(BackwardContext& c) {
  double e = c.attrs.get<double>("exponent");
  if (e == 0.0) return {c.grad() * 0.0};
  return {c.grad() * pow(c.input(0), e - 1.0) * e};
}
const OpSchema& kPow = define_op("pow").args({"input"})
                           .policy(AmpPolicy::FP32)
                           .grad(pow_backward)
                           .kernel(DeviceType::CPU, cpu::unary_kernel<PowFunctor>);

// ---- addcmul(self, t1, t2, value) = self + value * t1 * t2: a composite (its pieces carry the
// gradients); AMP promote, as PyTorch's list: mixed f32/f16 inputs compute in f32 ----
TensorList addcmul_composite(const OpCall& c) {
  const double value = c.attrs.get<double>("value");
  Tensor prod = mul(c.inputs[1], c.inputs[2]);
  return {add(c.inputs[0], value == 1.0 ? prod : mul(prod, value))};
}
const OpSchema& kAddcmul =
    define_op("addcmul").policy(AmpPolicy::Promote).args({"self", "tensor1", "tensor2"}).composite_of_ops(addcmul_composite);

}  // namespace

Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, double value) {
  return dispatch1(kAddcmul, {self, t1, t2}, {{"value", value}});
}
Tensor relu_grad(const Tensor& g, const Tensor& out) { return dispatch1(kReluGrad, {g, out}); }

Tensor add(const Tensor& a, const Tensor& b) { return dispatch1(kAdd, {a, b}); }
Tensor add(const Tensor& a, const Scalar& b) { return dispatch1(kAdd, {a, wrapped_scalar(b)}); }
Tensor sub(const Tensor& a, const Tensor& b) { return dispatch1(kSub, {a, b}); }
Tensor sub(const Tensor& a, const Scalar& b) { return dispatch1(kSub, {a, wrapped_scalar(b)}); }
Tensor rsub(const Tensor& a, const Scalar& b) { return dispatch1(kSub, {wrapped_scalar(b), a}); }
Tensor mul(const Tensor& a, const Tensor& b) { return dispatch1(kMul, {a, b}); }
Tensor mul(const Tensor& a, const Scalar& b) { return dispatch1(kMul, {a, wrapped_scalar(b)}); }
Tensor div(const Tensor& a, const Tensor& b) { return dispatch1(kDiv, {a, b}); }
Tensor div(const Tensor& a, const Scalar& b) { return dispatch1(kDiv, {a, wrapped_scalar(b)}); }
Tensor rdiv(const Tensor& a, const Scalar& b) { return dispatch1(kDiv, {wrapped_scalar(b), a}); }
Tensor eq(const Tensor& a, const Tensor& b) { return dispatch1(kEq, {a, b}); }
Tensor neg(const Tensor& x) { return dispatch1(kNeg, {x}); }
Tensor exp(const Tensor& x) { return dispatch1(kExp, {x}); }
Tensor log(const Tensor& x) { return dispatch1(kLog, {x}); }
Tensor sqrt(const Tensor& x) { return dispatch1(kSqrt, {x}); }
Tensor sign(const Tensor& x) { return dispatch1(kSign, {x}); }
Tensor abs(const Tensor& x) { return dispatch1(kAbs, {x}); }
Tensor relu(const Tensor& x) { return dispatch1(kRelu, {x}); }
Tensor sigmoid(const Tensor& x) { return dispatch1(kSigmoid, {x}); }
Tensor tanh(const Tensor& x) { return dispatch1(kTanh, {x}); }
Tensor pow(const Tensor& x, double exponent) { return dispatch1(kPow, {x}, {{"exponent", exponent}}); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, const Scalar& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Scalar& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Scalar& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Scalar& b) { return div(a, b); }
Tensor operator+(const Scalar& a, const Tensor& b) { return add(b, a); }
Tensor operator-(const Scalar& a, const Tensor& b) { return rsub(b, a); }
Tensor operator*(const Scalar& a, const Tensor& b) { return mul(b, a); }
Tensor operator/(const Scalar& a, const Tensor& b) { return rdiv(b, a); }

}  // namespace mixtape
