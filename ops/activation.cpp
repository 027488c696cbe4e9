// ops/activation.cpp — relu, sigmoid, tanh, gelu, leaky_relu, clamp and where: definition, AMP
// policy (None for all: no autocast list names them) and backward, each block in one place. The
// pointwise ones take their kernels on every device from their functors
// (ops/activation_functors.h) through define_unary / define_binary; where has its own kernels.
//
// Shapes: the activations keep x's shape and dtype; where(cond, a, b) broadcasts all three to one
// shape and promotes a with b.
// Gradients and conventions (PyTorch's):
//   relu'      = 1 for x > 0, 0 elsewhere (so 0 at 0), from the output
//   sigmoid'   = y (1 - y), tanh' = 1 - y^2, from the output y
//   gelu'      = Phi(x) + x phi(x) ("none"), or the derivative of the tanh form ("tanh")
//   leaky_relu' = 1 for x > 0, negative_slope for x <= 0 (so at 0 it is the slope)
//   clamp'     = 1 for min <= x <= max (bounds included), 0 outside and for NaN
//   where      : the gradient goes to a where cond is true, to b where it is false, each
//                summed back over the dims it was broadcast along
// relu_grad / gelu_grad / leaky_relu_grad / clamp_grad are ops of their own so the
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
#include "ops/pointwise_op.h"
#include "ops/relu_mask.h"

namespace mixtape {
namespace {

// Required tensor arguments must be defined (the dispatcher does not check).
void check_defined(const char* op, std::initializer_list<std::pair<const Tensor*, const char*>> args) {
  for (const auto& [t, what] : args) MT_CHECK(t->defined(), op, ": ", what, " is an undefined tensor");
}

// The functors' parameters, from the call's attributes.
fn::Gelu gelu_params(const Attrs& a, DType) { return fn::Gelu{a.get<bool>("tanh")}; }
fn::GeluGrad gelu_grad_params(const Attrs& a, DType) { return fn::GeluGrad{a.get<bool>("tanh")}; }
fn::LeakyRelu leaky_relu_params(const Attrs& a, DType) { return fn::LeakyRelu{a.get<double>("negative_slope")}; }
fn::LeakyReluGrad leaky_relu_grad_params(const Attrs& a, DType) {
  return fn::LeakyReluGrad{a.get<double>("negative_slope")};
}
template <typename F>
F clamp_bounds(const Attrs& a) {
  F f;
  f.has_lo = a.get<bool>("has_min");
  f.has_hi = a.get<bool>("has_max");
  f.lo = a.get<double>("min");
  f.hi = a.get<double>("max");
  return f;
}
fn::ClampGrad clamp_grad_params(const Attrs& a, DType) { return clamp_bounds<fn::ClampGrad>(a); }
// Integral x: the bounds must be integers; a bound outside the dtype's range moves to the end
// of the range (same result, and the functor never converts an out-of-range double).
fn::Clamp clamp_params(const Attrs& a, DType dt) {
  fn::Clamp f = clamp_bounds<fn::Clamp>(a);
  if (is_floating(dt)) return f;
  visit_dtype(dt, "clamp", [&]<typename T>() {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      // The largest double below 2^63 (T = int64: max() itself rounds up to 2^63, out of range).
      const double lo = static_cast<double>(std::numeric_limits<T>::lowest());
      const double hi = std::min(static_cast<double>(std::numeric_limits<T>::max()), 0x1.fffffffffffffp+62);
      auto adjust = [&](bool has, double& v, const char* name) {
        if (!has) return;
        MT_CHECK(std::isfinite(v) && v == std::floor(v), "clamp: integer input of dtype ", dtype_name(dt),
                 " needs integer bounds, got ", name, "=", v);
        v = std::min(std::max(v, lo), hi);
      };
      adjust(f.has_lo, f.lo, "min");
      adjust(f.has_hi, f.hi, "max");
    }
  });
  return f;
}

Attrs clamp_attrs(std::optional<double> min, std::optional<double> max) {
  return {{"has_min", min.has_value()}, {"min", min.value_or(0.0)}, {"has_max", max.has_value()},
          {"max", max.value_or(0.0)}};
}

// ---- relu: out = max(x, 0); the backward keeps only the mask out > 0 (ops/relu_mask.h) ----
// relu_grad(g, out) stays the public op from the output (PyTorch's threshold_backward); relu's own
// backward is relu_mask_grad(g, mask), the same bits from 1 bit per element instead of the output.
TensorList relu_grad_backward(BackwardContext& c) { return {relu_grad(c.grad(), c.input(1)), Tensor()}; }
const OpSchema& kReluGrad =
    define_binary<fn::ReluGrad>("relu_grad")
        .save({1})
        .grad(relu_grad_backward)
        .sample("double-backward", {arg({4}), values_arg({4}, {-1.0, 0.5, 2.0, -3.0}).constant()});

// relu_mask_grad(g, mask) = g where the mask bit is set, +0 elsewhere: linear in g, so its
// gradient in g is itself (double backward); the mask gets none.
TensorList relu_mask_grad_backward(BackwardContext& c) { return {relu_mask_grad(c.grad(), c.input(1)), Tensor()}; }
const OpSchema& kReluMaskGrad =
    define_op("relu_mask_grad")
        .save({1})
        .grad(relu_mask_grad_backward)
        .kernel(DeviceType::CPU, relu_mask_grad_cpu)
        // The mask of relu on a second, constant input (an odd count: the last byte is partial).
        .sample("double-backward", {arg({3, 7}), arg({3, 7}, -1, 1).constant()},
                [](const TensorList& x) { return TensorList{relu_mask_grad(x[0], relu_mask_of(x[1]))}; });

TensorList relu_cpu(const OpCall& call) {
  if (relu_wants_mask(call.attrs))
    if (TensorList r = relu_and_mask_cpu(call.inputs[0]); !r.empty()) return r;  // one pass where it applies
  TensorList r = pointwise_detail::unary_cpu<fn::Relu, FunctorParams<fn::Relu>{nullptr}>(call);
  return {r[0], relu_wants_mask(call.attrs) ? relu_mask_cpu(r[0]) : Tensor()};
}
TensorList relu_backward(BackwardContext& c) { return {relu_mask_grad(c.grad(), c.output(1))}; }
const OpSchema& kRelu = [] () -> const OpSchema& {
  OpSchema& op = define_op("relu")  // inputs away from the kink at 0
                     .save({}, {1})
                     .grad(relu_backward)
                     .backward_ignores_output_grads({1})  // the mask gets none (no zeros made for it)
                     .kernel(DeviceType::CPU, relu_cpu)
                     .sample("no-zero", {values_arg({4}, {-1.5, -0.25, 0.5, 2.0})},
                             [](const TensorList& x) { return TensorList{relu(x[0])}; })
                     .sample("strided", {arg({7, 5})}, [](const TensorList& x) { return TensorList{relu(x[0].t())}; });
  op.pointwise = true;  // one rounding per element, as a define_unary op (the samples' 16-bit check)
  return op;
}();

// ---- sigmoid: out = 1 / (1 + e^-x); d/dx = out (1 - out) ----
TensorList sigmoid_backward(BackwardContext& c) {
  Tensor y = c.output(0);
  return {c.grad() * y * (1.0 - y)};
}
const OpSchema& kSigmoid =
    define_unary<fn::Sigmoid>("sigmoid").save({}, {0}).grad(sigmoid_backward).sample("plain", {arg({3, 3}, -3, 3)});

// ---- tanh: d/dx = 1 - out^2 ----
TensorList tanh_backward(BackwardContext& c) {
  Tensor y = c.output(0);
  return {c.grad() * (1.0 - y * y)};
}
const OpSchema& kTanh =
    define_unary<fn::Tanh>("tanh").save({}, {0}).grad(tanh_backward).sample("plain", {arg({3, 3}, -2, 2)});

// ---- gelu ----
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
const OpSchema& kGeluGrad = define_binary<fn::GeluGrad, gelu_grad_params>("gelu_grad")
                                .grad(gelu_grad_backward)
                                .sample("none", {arg({2, 5}), arg({2, 5}, -3, 3)}, {{"tanh", false}})
                                .sample("tanh", {arg({2, 5}), arg({2, 5}, -3, 3)}, {{"tanh", true}});

TensorList gelu_backward(BackwardContext& c) { return {gelu_grad(c.grad(), c.input(0), c.attrs.get<bool>("tanh"))}; }
const OpSchema& kGelu = define_unary<fn::Gelu, gelu_params>("gelu")
                            .grad(gelu_backward)
                            .sample("none", {arg({3, 4}, -3, 3)}, {{"tanh", false}})
                            .sample("tanh", {arg({3, 4}, -3, 3)}, {{"tanh", true}});

// ---- leaky_relu ----
TensorList leaky_relu_grad_backward(BackwardContext& c) {
  return {leaky_relu_grad(c.grad(), c.input(1), c.attrs.get<double>("negative_slope")), Tensor()};
}
const OpSchema& kLeakyReluGrad =
    define_binary<fn::LeakyReluGrad, leaky_relu_grad_params>("leaky_relu_grad")
        .save({1})
        .grad(leaky_relu_grad_backward)
        .sample("double-backward", {arg({6}), values_arg({6}, {-1.0, 0.5, 2.0, -3.0, 0.25, -0.25}).constant()},
                {{"negative_slope", 0.3}});
TensorList leaky_relu_backward(BackwardContext& c) {
  return {leaky_relu_grad(c.grad(), c.input(0), c.attrs.get<double>("negative_slope"))};
}
const OpSchema& kLeakyRelu = define_unary<fn::LeakyRelu, leaky_relu_params>("leaky_relu")
                                 .grad(leaky_relu_backward)
                                 .sample("default-slope", {values_arg({4}, {-1.5, -0.25, 0.5, 2.0})},
                                         {{"negative_slope", 0.01}})
                                 .sample("slope-0.2", {arg({2, 3})}, {{"negative_slope", 0.2}});

// ---- clamp ----
std::optional<double> opt_attr(const Attrs& a, const char* has, const char* v) {
  return a.get<bool>(has) ? std::optional<double>(a.get<double>(v)) : std::nullopt;
}
TensorList clamp_grad_backward(BackwardContext& c) {
  return {clamp_grad(c.grad(), c.input(1), opt_attr(c.attrs, "has_min", "min"), opt_attr(c.attrs, "has_max", "max")),
          Tensor()};
}
const OpSchema& kClampGrad =
    define_binary<fn::ClampGrad, clamp_grad_params>("clamp_grad")
        .save({1})
        .grad(clamp_grad_backward)
        .sample("double-backward", {arg({5}), values_arg({5}, {-2.0, -0.3, 0.1, 0.45, 1.7}).constant()},
                clamp_attrs(-0.5, 0.5));
TensorList clamp_backward(BackwardContext& c) {
  return {clamp_grad(c.grad(), c.input(0), opt_attr(c.attrs, "has_min", "min"), opt_attr(c.attrs, "has_max", "max"))};
}
const OpSchema& kClamp =  // inputs away from the bounds (kinks)
    define_unary<fn::Clamp, clamp_params>("clamp")
        .grad(clamp_backward)
        .sample("both", {values_arg({7}, {-2.0, -0.6, -0.3, 0.1, 0.45, 0.9, 1.7})}, clamp_attrs(-0.5, 0.5))
        .sample("min-only", {values_arg({5}, {-2.0, -0.6, -0.3, 0.1, 1.7})}, clamp_attrs(-0.5, std::nullopt))
        .sample("max-only", {values_arg({5}, {-2.0, -0.6, 0.45, 0.9, 1.7})}, clamp_attrs(std::nullopt, 0.5));

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
const OpSchema& kWhere = define_op("where")
                             .save({0})
                             .grad(where_backward)
                             .kernel(DeviceType::CPU, where_cpu)
                             .sample("broadcast", {bool_arg({3, 1}), arg({2, 3, 4}), arg({4})})
                             .sample("scalar-branch", {arg({3, 2})},
                                     [](const TensorList& x) {  // a fixed condition: both branches taken
                                       const Tensor cond = tensor({1.0, 0.0}, DType::Bool).to(x[0].device());
                                       return TensorList{where(cond, wrapped_scalar(0.5), x[0])};
                                     },
                                     SampleChecks{.rounds_once_16 = true});

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
Tensor relu(const Tensor& x) {
  // The mask only when the call is recorded (the autograd layer's rule): inference pays nothing.
  const bool recorded = x.defined() && autograd::GradMode::is_enabled() && x.requires_grad();
  return dispatch(kRelu, {x}, {{"mask", recorded}})[0];
}
Tensor relu_mask_grad(const Tensor& g, const Tensor& mask) {
  check_defined("relu_mask_grad", {{&g, "grad"}, {&mask, "mask"}});
  return dispatch1(kReluMaskGrad, {g, mask});
}
Tensor relu_mask_of(const Tensor& x) { return dispatch(kRelu, {x.detach()}, {{"mask", true}})[1]; }
Tensor relu_grad(const Tensor& g, const Tensor& out) { return dispatch1(kReluGrad, {g, out}); }
Tensor sigmoid(const Tensor& x) { return dispatch1(kSigmoid, {x}); }
Tensor tanh(const Tensor& x) { return dispatch1(kTanh, {x}); }
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_defined("where", {{&cond, "condition"}, {&a, "input"}, {&b, "other"}});
  return dispatch1(kWhere, {cond, a, b});
}

}  // namespace mixtape
