// ops/pointwise.cpp — the arithmetic ops (add, sub, mul, div, eq, neg, exp, log, sqrt, sign, abs,
// pow, addcmul): definition, AMP policy and backward, each block in one place. Each op's kernels
// on every device come from its functor (ops/functors.h) through define_unary / define_binary.
//
// Shapes: inputs broadcast (NumPy rules) to the output shape; backward formulas reduce the
// gradient back to each input's shape with sum_to. Subgradients follow PyTorch: abs'(0) = 0,
// sqrt'(0) = inf.
#include "ops/pointwise.h"

#include "ops/functors.h"
#include "ops/op_def.h"
#include "ops/pointwise_op.h"

namespace mixtape {
namespace {

// ---- add: out = a + b ----
TensorList add_backward(BackwardContext& c) {
  return {c.needs_input_grad(0) ? sum_to(c.grad(), c.input_sizes(0)) : Tensor(),
          c.needs_input_grad(1) ? sum_to(c.grad(), c.input_sizes(1)) : Tensor()};
}
const OpSchema& kAdd = define_binary<fn::Add>("add")
                           .save({})
                           .grad(add_backward)
                           .sample("broadcast", {arg({2, 3, 4}), arg({3, 1})})
                           .sample("scalar", {arg({3}), scalar_arg(2.5)})
                           .sample("long-rows", {arg({3, 257}), arg({1, 257})});

// ---- sub: out = a - b ----
TensorList sub_backward(BackwardContext& c) {
  return {c.needs_input_grad(0) ? sum_to(c.grad(), c.input_sizes(0)) : Tensor(),
          c.needs_input_grad(1) ? sum_to(neg(c.grad()), c.input_sizes(1)) : Tensor()};
}
const OpSchema& kSub = define_binary<fn::Sub>("sub")
                           .save({})
                           .grad(sub_backward)
                           .sample("broadcast", {arg({4, 1}), arg({3})})
                           .sample("rscalar", {scalar_arg(1.0), arg({3})});

// ---- mul: out = a * b ----
TensorList mul_backward(BackwardContext& c) {
  return {c.needs_input_grad(0) ? sum_to(c.grad() * c.input(1), c.input_sizes(0)) : Tensor(),
          c.needs_input_grad(1) ? sum_to(c.grad() * c.input(0), c.input_sizes(1)) : Tensor()};
}
const OpSchema& kMul = define_binary<fn::Mul>("mul")
                           .grad(mul_backward)
                           .sample("broadcast", {arg({2, 3}), arg({2, 1})})
                           .sample("scalar", {arg({5}), scalar_arg(0.1)})
                           .sample("same-tensor", {arg({5})}, [](const TensorList& x) { return TensorList{mul(x[0], x[0])}; });

// ---- div: out = a / b (true division: integers divide as f32) ----
TensorList div_backward(BackwardContext& c) {
  Tensor b = c.input(1);
  return {c.needs_input_grad(0) ? sum_to(c.grad() / b, c.input_sizes(0)) : Tensor(),
          c.needs_input_grad(1) ? sum_to(neg(c.grad()) * c.input(0) / (b * b), c.input_sizes(1)) : Tensor()};
}
const OpSchema& kDiv = define_binary<fn::Div>("div")
                           .grad(div_backward)
                           .sample("broadcast", {arg({2, 3}), arg({3}, 0.5, 2.0)})
                           .sample("rscalar", {scalar_arg(3.0), arg({4}, 0.5, 2.0)});

// ---- eq: out = (a == b), bool; no gradient ----
const OpSchema& kEq = define_binary<fn::Eq>("eq").not_differentiable().sample(
    "some-equal", {values_arg({2, 3}, {1, 2, 3, 4, -0.0, 6}), values_arg({3}, {1, 0, 0.0})});

// ---- neg: out = -x ----
TensorList neg_backward(BackwardContext& c) { return {neg(c.grad())}; }
const OpSchema& kNeg = define_unary<fn::Neg>("neg").save({}).grad(neg_backward).sample("plain", {arg({2, 2})});

// ---- exp: out = e^x; AMP fp32 (exp of an f16 overflows above 11.09) ----
TensorList exp_backward(BackwardContext& c) { return {c.grad() * c.output(0)}; }
const OpSchema& kExp = define_unary<fn::Exp>("exp")
                           .args({"input"})
                           .policy(AmpPolicy::FP32)
                           .save({}, {0})
                           .grad(exp_backward)
                           .sample("plain", {arg({3, 2})})
                           .sample("odd-length", {arg({257}, -3, 3)});

// ---- log: out = ln x; AMP fp32 ----
TensorList log_backward(BackwardContext& c) { return {c.grad() / c.input(0)}; }
const OpSchema& kLog = define_unary<fn::Log>("log")
                           .args({"input"})
                           .policy(AmpPolicy::FP32)
                           .grad(log_backward)
                           .sample("positive", {arg({3, 2}, 0.2, 3.0)});

// ---- sqrt: out = sqrt(x) ----
TensorList sqrt_backward(BackwardContext& c) { return {c.grad() / (c.output(0) * 2.0)}; }
const OpSchema& kSqrt =
    define_unary<fn::Sqrt>("sqrt").save({}, {0}).grad(sqrt_backward).sample("positive", {arg({4}, 0.2, 3.0)});

// ---- sign: no gradient ----
const OpSchema& kSign =
    define_unary<fn::Sign>("sign").not_differentiable().sample("zero-included", {values_arg({4}, {-1.5, 0, 0.5, 2})});

// ---- abs: out = |x|; d/dx = sign(x), 0 at 0 ----
TensorList abs_backward(BackwardContext& c) { return {c.grad() * sign(c.input(0))}; }
const OpSchema& kAbs =  // inputs away from the kink at 0
    define_unary<fn::Abs>("abs").grad(abs_backward).sample("no-zero", {values_arg({4}, {-1.5, -0.25, 0.5, 2.0})});

// ---- pow: out = x^e for a scalar e; AMP fp32 (PyTorch's list) ----
fn::PowScalar pow_params(const Attrs& a, DType) { return fn::PowScalar{a.get<double>("exponent")}; }
TensorList pow_backward(BackwardContext& c) {
  double e = c.attrs.get<double>("exponent");
  if (e == 0.0) return {c.grad() * 0.0};
  return {c.grad() * pow(c.input(0), e - 1.0) * e};
}
const OpSchema& kPow = define_unary<fn::PowScalar, pow_params>("pow")
                           .args({"input"})
                           .policy(AmpPolicy::FP32)
                           .grad(pow_backward)
                           .sample("2", {arg({4})}, {{"exponent", 2.0}})
                           .sample("-1.5", {arg({4}, 0.5, 2.0)}, {{"exponent", -1.5}});

// ---- addcmul(self, t1, t2, value) = self + value * t1 * t2: a composite (its pieces carry the
// gradients); AMP promote, as PyTorch's list: mixed f32/f16 inputs compute in f32 ----
TensorList addcmul_composite(const OpCall& c) {
  const double value = c.attrs.get<double>("value");
  Tensor prod = mul(c.inputs[1], c.inputs[2]);
  return {add(c.inputs[0], value == 1.0 ? prod : mul(prod, value))};
}
const OpSchema& kAddcmul = define_op("addcmul")
                               .policy(AmpPolicy::Promote)
                               .args({"self", "tensor1", "tensor2"})
                               .composite_of_ops(addcmul_composite)
                               .sample("broadcast", {arg({2, 3}), arg({3}), arg({2, 1})}, {{"value", 0.5}});

}  // namespace

Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, double value) {
  return dispatch1(kAddcmul, {self, t1, t2}, {{"value", value}});
}

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
