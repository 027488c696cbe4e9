// ops/activation.cpp — gelu, leaky_relu, clamp and where: definition, AMP policy (None for all:
// no autocast list names them), backward and CPU kernel, each block in one place. Arithmetic
// comes from ops/activation_functors.h (shared with CUDA); broadcasting, promotion and 16-bit
// rounding from ops/cpu/elementwise.h.
//
// Shapes: gelu, leaky_relu, clamp keep x's shape and dtype; where(cond, a, b) broadcasts all
// three to one shape and promotes a with b.
// Gradients and conventions (PyTorch's):
//   gelu'      = Phi(x) + x phi(x) ("none"), or the derivative of the tanh form ("tanh")
//   leaky_relu' = 1 for x > 0, negative_slope for x <= 0 (so at 0 it is the slope)
//   clamp'     = 1 for min <= x <= max (bounds included), 0 outside and for NaN
//   where      : the gradient goes to a where cond is true, to b where it is false, each
//                summed back over the dims it was broadcast along
// gelu_grad / leaky_relu_grad / clamp_grad are ops of their own (like relu_grad) so the
// backward is itself differentiable: d/dg of each is the same op applied to the incoming
// gradient; d/dx of gelu_grad is g * gelu''(x) written with ops; d/dx of the other two is 0
// almost everywhere.
#include "ops/activation.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <type_traits>
#include <utility>

#include "ops/activation_functors.h"
#include "ops/cpu/elementwise.h"
#include "ops/op_def.h"

namespace mixtape {
namespace {
using cpu::TypeRule;

void check_floating(const OpCall& call, size_t i) {
  const Tensor& x = call.inputs[i];
  MT_CHECK(is_floating(x.dtype()), call.name(), ": expected a floating tensor (f16, bf16, f32, f64), got ",
           x.describe());
}

// Required tensor arguments must be defined (the dispatcher does not check).
void check_defined(const char* op, std::initializer_list<std::pair<const Tensor*, const char*>> args) {
  for (const auto& [t, what] : args) MT_CHECK(t->defined(), op, ": ", what, " is an undefined tensor");
}

// Functors with their parameters read from the call's attributes.
struct GeluF : fn::Gelu {
  static GeluF from(const Attrs& a) { return GeluF{{a.get<bool>("tanh")}}; }
};
struct GeluGradF : fn::GeluGrad {
  static GeluGradF from(const Attrs& a) { return GeluGradF{{a.get<bool>("tanh")}}; }
};
struct LeakyReluF : fn::LeakyRelu {
  static LeakyReluF from(const Attrs& a) { return LeakyReluF{{a.get<double>("negative_slope")}}; }
};
struct LeakyReluGradF : fn::LeakyReluGrad {
  static LeakyReluGradF from(const Attrs& a) { return LeakyReluGradF{{a.get<double>("negative_slope")}}; }
};
template <typename F>
F clamp_functor(const Attrs& a) {
  F f;
  f.has_lo = a.get<bool>("has_min");
  f.has_hi = a.get<bool>("has_max");
  f.lo = a.get<double>("min");
  f.hi = a.get<double>("max");
  return f;
}
struct ClampF : fn::Clamp {
  static ClampF from(const Attrs& a) { return clamp_functor<ClampF>(a); }
};
struct ClampGradF : fn::ClampGrad {
  static ClampGradF from(const Attrs& a) { return clamp_functor<ClampGradF>(a); }
};

Attrs clamp_attrs(std::optional<double> min, std::optional<double> max) {
  return {{"has_min", min.has_value()}, {"min", min.value_or(0.0)}, {"has_max", max.has_value()},
          {"max", max.value_or(0.0)}};
}

// ---- gelu ----
TensorList gelu_cpu(const OpCall& call) {
  check_floating(call, 0);
  return cpu::unary_kernel<GeluF, TypeRule::Same>(call);
}
TensorList gelu_grad_cpu(const OpCall& call) {
  check_floating(call, 0);
  check_floating(call, 1);
  return cpu::binary_kernel<GeluGradF>(call);
}

// gelu''(x), with ops (so a third derivative is available too). Computed in f32 for 16-bit x.
Tensor gelu_second_derivative(const Tensor& x_in, bool tanh_approx) {
  const Tensor x = is_reduced_float(x_in.dtype()) ? to_dtype(x_in, DType::Float32) : x_in;
  const Tensor x2 = x * x;
  if (!tanh_approx) {
    // d/dx (Phi + x phi) = 2 phi + x phi' = phi (2 - x^2)
    return exp(x2 * -0.5) * fn::kGeluInvSqrt2Pi * (2.0 - x2);
  }
  // u = k (x + kappa x^3), t = tanh u, u' = k (1 + 3 kappa x^2), u'' = 6 k kappa x:
  // gelu'' = (1 - t^2) (u' + x u'' / 2 - x t u'^2)
  const double k = fn::kGeluSqrt2OverPi, kappa = fn::kGeluKappa;
  const Tensor t = tanh((x + x2 * x * kappa) * k);
  const Tensor up = (x2 * (3.0 * kappa) + 1.0) * k;
  const Tensor upp = x * (6.0 * k * kappa);
  return (1.0 - t * t) * (up + x * upp * 0.5 - x * t * up * up);
}

TensorList gelu_grad_backward(BackwardContext& c) {
  const bool tanh_approx = c.attrs.get<bool>("tanh");
  const Tensor x = c.input(1);
  Tensor gg, gx;
  if (c.needs_input_grad(0)) gg = gelu_grad(c.grad(), x, tanh_approx);
  if (c.needs_input_grad(1)) gx = c.grad() * c.input(0) * gelu_second_derivative(x, tanh_approx);
  return {gg, gx};
}
const OpSchema& kGeluGrad =
    define_op("gelu_grad").grad(gelu_grad_backward).kernel(DeviceType::CPU, gelu_grad_cpu);

TensorList gelu_backward(BackwardContext& c) { return {gelu_grad(c.grad(), c.input(0), c.attrs.get<bool>("tanh"))}; }
const OpSchema& kGelu = define_op("gelu").grad(gelu_backward).kernel(DeviceType::CPU, gelu_cpu);

// ---- leaky_relu ----
TensorList leaky_relu_cpu(const OpCall& call) {
  check_floating(call, 0);
  return cpu::unary_kernel<LeakyReluF, TypeRule::Same>(call);
}
TensorList leaky_relu_grad_cpu(const OpCall& call) {
  check_floating(call, 0);
  check_floating(call, 1);
  return cpu::binary_kernel<LeakyReluGradF>(call);
}
TensorList leaky_relu_grad_backward(BackwardContext& c) {
  return {leaky_relu_grad(c.grad(), c.input(1), c.attrs.get<double>("negative_slope")), Tensor()};
}
const OpSchema& kLeakyReluGrad = define_op("leaky_relu_grad")
                                     .save({1})
                                     .grad(leaky_relu_grad_backward)
                                     .kernel(DeviceType::CPU, leaky_relu_grad_cpu);
TensorList leaky_relu_backward(BackwardContext& c) {
  return {leaky_relu_grad(c.grad(), c.input(0), c.attrs.get<double>("negative_slope"))};
}
const OpSchema& kLeakyRelu =
    define_op("leaky_relu").grad(leaky_relu_backward).kernel(DeviceType::CPU, leaky_relu_cpu);

// ---- clamp ----
// Integral x: the bounds must be integers; a bound outside the dtype's range moves to the end
// of the range (same result, and the functor never converts an out-of-range double).
OpCall clamp_call_for_dtype(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  MT_CHECK(x.dtype() != DType::Bool, call.name(), ": bool tensors are not supported, got ", x.describe());
  if (is_floating(x.dtype())) return call;
  OpCall adjusted = call;
  visit_dtype(x.dtype(), call.name(), [&]<typename T>() {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      // The largest double below 2^63 (T = int64: max() itself rounds up to 2^63, out of range).
      const double lo = static_cast<double>(std::numeric_limits<T>::lowest());
      const double hi = std::min(static_cast<double>(std::numeric_limits<T>::max()), 0x1.fffffffffffffp+62);
      for (auto [has, name] : {std::pair{"has_min", "min"}, std::pair{"has_max", "max"}}) {
        if (!call.attrs.get<bool>(has)) continue;
        const double v = call.attrs.get<double>(name);
        MT_CHECK(std::isfinite(v) && v == std::floor(v), call.name(), ": integer input ", x.describe(),
                 " needs integer bounds, got ", name, "=", v);
        adjusted.attrs.set(name, std::min(std::max(v, lo), hi));
      }
    }
  });
  return adjusted;
}
TensorList clamp_cpu(const OpCall& call) {
  return cpu::unary_kernel<ClampF, TypeRule::Same>(clamp_call_for_dtype(call));
}
TensorList clamp_grad_cpu(const OpCall& call) {
  check_floating(call, 0);
  check_floating(call, 1);
  return cpu::binary_kernel<ClampGradF>(call);
}
std::optional<double> opt_attr(const Attrs& a, const char* has, const char* v) {
  return a.get<bool>(has) ? std::optional<double>(a.get<double>(v)) : std::nullopt;
}
TensorList clamp_grad_backward(BackwardContext& c) {
  return {clamp_grad(c.grad(), c.input(1), opt_attr(c.attrs, "has_min", "min"), opt_attr(c.attrs, "has_max", "max")),
          Tensor()};
}
const OpSchema& kClampGrad =
    define_op("clamp_grad").save({1}).grad(clamp_grad_backward).kernel(DeviceType::CPU, clamp_grad_cpu);
TensorList clamp_backward(BackwardContext& c) {
  return {clamp_grad(c.grad(), c.input(0), opt_attr(c.attrs, "has_min", "min"), opt_attr(c.attrs, "has_max", "max"))};
}
const OpSchema& kClamp = define_op("clamp").grad(clamp_backward).kernel(DeviceType::CPU, clamp_cpu);

// ---- where ----
// A byte copy per element (no arithmetic), so every dtype works and nothing is rounded twice:
// a and b are converted to the result dtype first (at most one rounding each), then selected.
TensorList where_cpu(const OpCall& call) {
  const Tensor& cond = call.inputs[0];
  const Tensor& a = call.inputs[1];
  const Tensor& b = call.inputs[2];
  MT_CHECK(cond.dtype() == DType::Bool, call.name(), ": expected condition to be a bool tensor, got ", cond.describe());
  const DType dt = result_type(a, b);
  const IntList shape = broadcast_shapes(broadcast_shapes(cond.sizes(), a.sizes(), call.name()), b.sizes(), call.name());
  const Tensor ca = cpu::cast_to(a, dt), cb = cpu::cast_to(b, dt);
  Tensor out = Tensor::empty(shape, TensorOptions(dt));
  auto run = [&]<typename U>() {
    cpu::strided_loop<4>(shape,
                         {{static_cast<char*>(out.data_ptr()), static_cast<char*>(cond.data_ptr()),
                           static_cast<char*>(ca.data_ptr()), static_cast<char*>(cb.data_ptr())},
                          {cpu::broadcast_byte_strides(out, shape), cpu::broadcast_byte_strides(cond, shape),
                           cpu::broadcast_byte_strides(ca, shape), cpu::broadcast_byte_strides(cb, shape)}},
                         [&](std::array<char*, 4> p, std::array<int64_t, 4> s, int64_t n) {
                           for (int64_t i = 0; i < n; ++i) {
                             uint8_t c;
                             std::memcpy(&c, p[1] + i * s[1], 1);
                             U v;
                             std::memcpy(&v, c ? p[2] + i * s[2] : p[3] + i * s[3], sizeof(U));
                             std::memcpy(p[0] + i * s[0], &v, sizeof(U));
                           }
                         });
  };
  switch (element_size(dt)) {
    case 1: run.template operator()<uint8_t>(); break;
    case 2: run.template operator()<uint16_t>(); break;
    case 4: run.template operator()<uint32_t>(); break;
    case 8: run.template operator()<uint64_t>(); break;
    default: MT_ERROR(call.name(), ": unsupported element size for ", dtype_name(dt));
  }
  return {out};
}
TensorList where_backward(BackwardContext& c) {
  const Tensor cond = c.input(0);
  const Tensor zero = wrapped_scalar(0.0);
  return {Tensor(), c.needs_input_grad(1) ? sum_to(where(cond, c.grad(), zero), c.input_sizes(1)) : Tensor(),
          c.needs_input_grad(2) ? sum_to(where(cond, zero, c.grad()), c.input_sizes(2)) : Tensor()};
}
const OpSchema& kWhere = define_op("where").save({0}).grad(where_backward).kernel(DeviceType::CPU, where_cpu);

}  // namespace

Tensor gelu(const Tensor& x, const std::string& approximate) {
  check_defined("gelu", {{&x, "input"}});
  MT_CHECK(approximate == "none" || approximate == "tanh", "gelu: approximate must be 'none' or 'tanh', got '",
           approximate, "'");
  return dispatch1(kGelu, {x}, {{"tanh", approximate == "tanh"}});
}
Tensor gelu_grad(const Tensor& g, const Tensor& x, bool tanh_approx) {
  check_defined("gelu_grad", {{&g, "grad"}, {&x, "input"}});
  return dispatch1(kGeluGrad, {g, x}, {{"tanh", tanh_approx}});
}
Tensor leaky_relu(const Tensor& x, double negative_slope) {
  check_defined("leaky_relu", {{&x, "input"}});
  return dispatch1(kLeakyRelu, {x}, {{"negative_slope", negative_slope}});
}
Tensor leaky_relu_grad(const Tensor& g, const Tensor& x, double negative_slope) {
  check_defined("leaky_relu_grad", {{&g, "grad"}, {&x, "input"}});
  return dispatch1(kLeakyReluGrad, {g, x}, {{"negative_slope", negative_slope}});
}
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  check_defined("clamp", {{&x, "input"}});
  MT_CHECK(min.has_value() || max.has_value(), "clamp: at least one of min or max must be given, got neither (input ",
           x.describe(), ")");
  return dispatch1(kClamp, {x}, clamp_attrs(min, max));
}
Tensor clamp_grad(const Tensor& g, const Tensor& x, std::optional<double> min, std::optional<double> max) {
  check_defined("clamp_grad", {{&g, "grad"}, {&x, "input"}});
  MT_CHECK(min.has_value() || max.has_value(), "clamp_grad: at least one of min or max must be given, got neither");
  return dispatch1(kClampGrad, {g, x}, clamp_attrs(min, max));
}
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_defined("where", {{&cond, "condition"}, {&a, "input"}, {&b, "other"}});
  return dispatch1(kWhere, {cond, a, b});
}

}  // namespace mixtape
