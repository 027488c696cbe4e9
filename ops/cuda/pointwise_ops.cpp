// ops/cuda/pointwise_ops.cpp — the CUDA kernels of the pointwise, activation, cast and creation
// ops: dtype rules, broadcasting and wrapped-number handling exactly as the CPU kernels
// (ops/cpu/elementwise.h, ops/activation.cpp, ops/cast.cpp, ops/creation.cpp), arithmetic in the
// shared functors (instantiated in unary.cu / binary.cu), one registration line per op.
// Invariant: for every op registered here, the CUDA result equals the CPU result for the same
// inputs up to the functor's transcendental calls (tests/cuda_ops/ checks each op and dtype).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "ops/cpu/elementwise.h"
#include "ops/creation.h"
#include "ops/cuda/tensor_iter.h"
#include "ops/inplace_args.h"
#include "ops/pointwise.h"

namespace mixtape::cuda {
namespace {

enum class Rule { Same, FloatingOnly, Bool };

void check_floating_input(const OpCall& call, size_t i) {
  const Tensor& x = call.inputs[i];
  MT_CHECK(x.defined() && is_floating(x.dtype()), call.name(), ": expected a floating tensor (f16, bf16, f32, f64), got ",
           x.defined() ? x.describe() : "undefined");
}

FunctorParams params_of(const OpCall& call, UnaryOp u) {
  FunctorParams p;
  const Attrs& a = call.attrs;
  switch (u) {
    case UnaryOp::Pow: p.p0 = a.get<double>("exponent"); break;
    case UnaryOp::Gelu: p.f0 = a.get<bool>("tanh"); break;
    case UnaryOp::LeakyRelu: p.p0 = a.get<double>("negative_slope"); break;
    case UnaryOp::Clamp:
      p.f0 = a.get<bool>("has_min");
      p.f1 = a.get<bool>("has_max");
      p.p0 = a.get<double>("min");
      p.p1 = a.get<double>("max");
      break;
    default: break;
  }
  return p;
}
FunctorParams params_of(const OpCall& call, BinaryOp b) {
  switch (b) {
    case BinaryOp::GeluGrad: return params_of(call, UnaryOp::Gelu);
    case BinaryOp::LeakyReluGrad: return params_of(call, UnaryOp::LeakyRelu);
    case BinaryOp::ClampGrad: return params_of(call, UnaryOp::Clamp);
    default: return {};
  }
}

TensorList run_unary(const OpCall& call, UnaryOp u, Rule rule, const FunctorParams& p) {
  Tensor x = call.inputs[0];
  MT_CHECK(x.defined(), call.name(), ": input 0 is an undefined tensor");
  MT_CHECK(x.dtype() != DType::Bool, call.name(), ": bool tensors are not supported, got ", x.describe());
  DType dt = x.dtype();
  if (rule == Rule::FloatingOnly && !is_floating(dt)) dt = kDefaultFloat;
  DeviceGuard guard(x.device().index());
  x = densify_if_huge(cast_to(x, dt, call.name()), x.sizes(), call.name());
  Tensor out = empty_on(x.sizes(), dt, x.device());
  if (out.numel() == 0) return {out};
  const Operands o = make_operands(call.name(), out, {x});
  MT_CUDA_CHECK(launch_unary(u, dt, o, p, current_stream()), call.name());
  return {out};
}

template <UnaryOp U, Rule R>
TensorList unary(const OpCall& call) {
  return run_unary(call, U, R, params_of(call, U));
}
// gelu / leaky_relu: floating inputs only (the CPU checks the same).
template <UnaryOp U>
TensorList unary_floating_only(const OpCall& call) {
  check_floating_input(call, 0);
  return run_unary(call, U, Rule::Same, params_of(call, U));
}

// clamp: an integral input needs integral bounds; bounds beyond the dtype's range move to its
// ends (ops/activation.cpp's clamp_call_for_dtype, same messages).
TensorList clamp_cuda(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  MT_CHECK(x.defined() && x.dtype() != DType::Bool, call.name(), ": bool tensors are not supported, got ",
           x.defined() ? x.describe() : "undefined");
  FunctorParams p = params_of(call, UnaryOp::Clamp);
  if (!is_floating(x.dtype())) {
    visit_dtype(x.dtype(), call.name(), [&]<typename T>() {
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        const double lo = static_cast<double>(std::numeric_limits<T>::lowest());
        const double hi = std::min(static_cast<double>(std::numeric_limits<T>::max()), 0x1.fffffffffffffp+62);
        auto adjust = [&](bool has, double& v, const char* name) {
          if (!has) return;
          MT_CHECK(std::isfinite(v) && v == std::floor(v), call.name(), ": integer input ", x.describe(),
                   " needs integer bounds, got ", name, "=", v);
          v = std::min(std::max(v, lo), hi);
        };
        adjust(p.f0, p.p0, "min");
        adjust(p.f1, p.p1, "max");
      }
    });
  }
  return run_unary(call, UnaryOp::Clamp, Rule::Same, p);
}

TensorList run_binary(const OpCall& call, BinaryOp op, Rule rule, const FunctorParams& p) {
  const Tensor& a = call.inputs[0];
  const Tensor& b = call.inputs[1];
  MT_CHECK(a.defined(), call.name(), ": input 0 is an undefined tensor");
  MT_CHECK(b.defined(), call.name(), ": input 1 is an undefined tensor");
  DType dt = result_type(a, b);
  if (rule == Rule::FloatingOnly && !is_floating(dt)) dt = kDefaultFloat;
  MT_CHECK(dt != DType::Bool, call.name(), ": bool tensors are not supported, got ", a.describe(), " and ",
           b.describe());
  const IntList shape = broadcast_shapes(a.sizes(), b.sizes(), call.name());
  const DType out_dt = rule == Rule::Bool ? DType::Bool : dt;
  const Device dev = call_device(call);
  DeviceGuard guard(dev.index());
  Tensor out = empty_on(shape, out_dt, dev);
  if (out.numel() == 0) return {out};
  // A wrapped number keeps its full value in the compute type (ops/cpu/elementwise.h).
  if (a.is_wrapped_number() || b.is_wrapped_number()) {
    const bool b_scalar = b.is_wrapped_number();
    const double s = get_element(b_scalar ? b : a, 0);
    Tensor t = densify_if_huge(cast_to(b_scalar ? a : b, dt, call.name()), shape, call.name());
    const Operands o = make_operands(call.name(), out, {t});
    MT_CUDA_CHECK(launch_binary(op, dt, rule == Rule::Bool, o, b_scalar ? 1 : 0, s, p, current_stream()), call.name());
    return {out};
  }
  Tensor ca = densify_if_huge(cast_to(a, dt, call.name()), shape, call.name());
  Tensor cb = densify_if_huge(cast_to(b, dt, call.name()), shape, call.name());
  const Operands o = make_operands(call.name(), out, {ca, cb});
  MT_CUDA_CHECK(launch_binary(op, dt, rule == Rule::Bool, o, -1, 0.0, p, current_stream()), call.name());
  return {out};
}

template <BinaryOp B, Rule R>
TensorList binary(const OpCall& call) {
  return run_binary(call, B, R, params_of(call, B));
}
template <BinaryOp B>
TensorList binary_floating_only(const OpCall& call) {
  check_floating_input(call, 0);
  check_floating_input(call, 1);
  return run_binary(call, B, Rule::Same, params_of(call, B));
}

// where(cond, a, b): a and b converted to their result dtype (one rounding each), then selected
// byte-wise (ops/activation.cpp's where_cpu).
TensorList where_cuda(const OpCall& call) {
  const Tensor& cond = call.inputs[0];
  const Tensor& a = call.inputs[1];
  const Tensor& b = call.inputs[2];
  MT_CHECK(cond.defined() && a.defined() && b.defined(), call.name(), ": condition, input and other must be defined");
  MT_CHECK(cond.dtype() == DType::Bool, call.name(), ": expected condition to be a bool tensor, got ", cond.describe());
  MT_CHECK(!cond.is_wrapped_number() && cond.device().is_cuda(), call.name(), ": expected a CUDA condition, got ",
           cond.describe(), " on ", cond.device());
  const DType dt = result_type(a, b);
  const IntList shape = broadcast_shapes(broadcast_shapes(cond.sizes(), a.sizes(), call.name()), b.sizes(), call.name());
  DeviceGuard guard(cond.device().index());
  // Wrapped numbers (where(c, g, 0.0)) become 0-d device tensors of the result dtype.
  auto operand = [&](const Tensor& t) {
    if (!t.is_wrapped_number()) return cast_to(t, dt, call.name());
    Tensor d = empty_on({}, dt, cond.device());
    fill_(d, get_element(t, 0));
    return d;
  };
  Tensor ca = operand(a), cb = operand(b);
  Tensor out = empty_on(shape, dt, cond.device());
  if (out.numel() == 0) return {out};
  const Operands o = make_operands(call.name(), out, {cond, ca, cb});
  MT_CUDA_CHECK(launch_where(element_size(dt), o, current_stream()), call.name());
  return {out};
}

// ---- casts and creation ----
TensorList to_dtype_cuda(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  DeviceGuard guard(x.device().index());
  Tensor out = empty_on(x.sizes(), call.attrs.get<DType>("dtype"), x.device());
  copy_into(out, x, call.name());
  return {out};
}
TensorList clone_cuda(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  DeviceGuard guard(x.device().index());
  Tensor out = empty_on(x.sizes(), x.dtype(), x.device());
  copy_into(out, x, call.name());
  return {out};
}

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
  MT_CHECK(t.is_contiguous(), c.name(), ": expected a contiguous tensor");
  MT_CHECK(is_floating(t.dtype()), c.name(), ": expected a floating dtype, got ", t.describe());
  DeviceGuard guard(t.device().index());
  MT_CUDA_CHECK(launch_random_fill(t.dtype(), t.data_ptr(), t.numel(), static_cast<uint64_t>(c.attrs.get<int64_t>("seed")),
                                   static_cast<uint64_t>(c.attrs.get<int64_t>("offset")), c.attrs.get<bool>("normal"),
                                   current_stream()),
                c.name());
  return {t};
}

// dropout(x; p, seed, offset) -> (out, mask): ops/dropout.cpp's stream layout, element i from
// word i, so CUDA and CPU drop the same elements for the same generator state.
TensorList dropout_cuda(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const double p = c.attrs.get<double>("p");
  MT_CHECK(is_floating(x.dtype()), c.name(), ": expected a floating input (f16, bf16, f32, f64), got ", x.describe());
  MT_CHECK(p >= 0.0 && p <= 1.0, c.name(), ": probability has to be between 0 and 1, got p=", p);
  DeviceGuard guard(x.device().index());
  const Tensor xc = dense(x, c.name());
  Tensor out = empty_on(x.sizes(), x.dtype(), x.device());
  Tensor mask = empty_on(x.sizes(), DType::Bool, x.device());
  MT_CUDA_CHECK(launch_dropout(x.dtype(), xc.data_ptr(), out.data_ptr(), static_cast<bool*>(mask.data_ptr()), x.numel(),
                               p, static_cast<uint64_t>(c.attrs.get<int64_t>("seed")),
                               static_cast<uint64_t>(c.attrs.get<int64_t>("offset")), current_stream()),
                c.name());
  return {out, mask};
}

constexpr DeviceType kCUDA = DeviceType::CUDA;
// One line per op: the CUDA twin of each CPU registration.
const bool kRegistered = [] {
  register_kernel("neg", kCUDA, unary<UnaryOp::Neg, Rule::Same>);
  register_kernel("exp", kCUDA, unary<UnaryOp::Exp, Rule::FloatingOnly>);
  register_kernel("log", kCUDA, unary<UnaryOp::Log, Rule::FloatingOnly>);
  register_kernel("sqrt", kCUDA, unary<UnaryOp::Sqrt, Rule::FloatingOnly>);
  register_kernel("sign", kCUDA, unary<UnaryOp::Sign, Rule::Same>);
  register_kernel("abs", kCUDA, unary<UnaryOp::Abs, Rule::Same>);
  register_kernel("relu", kCUDA, unary<UnaryOp::Relu, Rule::FloatingOnly>);
  register_kernel("sigmoid", kCUDA, unary<UnaryOp::Sigmoid, Rule::FloatingOnly>);
  register_kernel("tanh", kCUDA, unary<UnaryOp::Tanh, Rule::FloatingOnly>);
  register_kernel("pow", kCUDA, unary<UnaryOp::Pow, Rule::FloatingOnly>);
  register_kernel("gelu", kCUDA, unary_floating_only<UnaryOp::Gelu>);
  register_kernel("leaky_relu", kCUDA, unary_floating_only<UnaryOp::LeakyRelu>);
  register_kernel("clamp", kCUDA, clamp_cuda);

  register_kernel("add", kCUDA, binary<BinaryOp::Add, Rule::Same>);
  register_kernel("sub", kCUDA, binary<BinaryOp::Sub, Rule::Same>);
  register_kernel("mul", kCUDA, binary<BinaryOp::Mul, Rule::Same>);
  register_kernel("div", kCUDA, binary<BinaryOp::Div, Rule::FloatingOnly>);
  register_kernel("eq", kCUDA, binary<BinaryOp::Eq, Rule::Bool>);
  register_kernel("relu_grad", kCUDA, binary<BinaryOp::ReluGrad, Rule::Same>);
  register_kernel("gelu_grad", kCUDA, binary_floating_only<BinaryOp::GeluGrad>);
  register_kernel("leaky_relu_grad", kCUDA, binary_floating_only<BinaryOp::LeakyReluGrad>);
  register_kernel("clamp_grad", kCUDA, binary_floating_only<BinaryOp::ClampGrad>);
  register_kernel("where", kCUDA, where_cuda);

  register_kernel("to_dtype", kCUDA, to_dtype_cuda);
  register_kernel("clone", kCUDA, clone_cuda);
  register_kernel("fill_", kCUDA, fill_cuda);
  register_kernel("full_like", kCUDA, full_like_cuda);
  register_kernel("copy_", kCUDA, copy_cuda);
  register_kernel("add_", kCUDA, add_inplace_cuda);
  register_kernel("mul_", kCUDA, mul_inplace_cuda);
  register_kernel("random_fill_", kCUDA, random_fill_cuda);
  register_kernel("dropout", kCUDA, dropout_cuda);
  return true;
}();

}  // namespace
}  // namespace mixtape::cuda
