// optim/step_kernel.cpp — the operand checks of the fused step ops (layout in step_kernel.h).
#include "optim/step_kernel.h"

#include <atomic>

#include "ops/cast.h"
#include "ops/pointwise.h"

namespace mixtape::optim::detail {

namespace {
std::atomic<bool> g_force_portable{false};
}
void set_force_portable_loop(bool force) { g_force_portable.store(force, std::memory_order_relaxed); }
bool force_portable_loop() { return g_force_portable.load(std::memory_order_relaxed); }

bool cpu_has_fma() {
#if defined(MIXTAPE_OPTIM_FMA_DISPATCH)
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("fma") != 0;
  }();
  return has;
#else
  return false;
#endif
}

int64_t check_fused_step(const OpCall& call, size_t num_state) {
  const char* op = call.name();
  MT_CHECK(call.inputs.size() == 3 + num_state, op, ": expected ", 3 + num_state,
           " inputs (w, grad, model, state...), got ", call.inputs.size());
  const Tensor& w = call.inputs[0];
  const Tensor& grad = call.inputs[1];
  const Tensor& model = call.inputs[2];
  MT_CHECK(w.defined() && (w.dtype() == DType::Float32 || w.dtype() == DType::Float64), op,
           ": the updated tensor (master) must be f32 or f64, got ", w.defined() ? w.describe() : "undefined");
  MT_CHECK(w.is_contiguous(), op, ": the updated tensor must be contiguous, got ", w.describe());
  MT_CHECK(grad.defined() && grad.sizes() == w.sizes() && grad.is_contiguous(), op, ": grad must be a contiguous ",
           shape_str(w.sizes()), " tensor, got ", grad.defined() ? grad.describe() : "undefined");
  const bool grad_ok =
      grad.dtype() == w.dtype() || (w.dtype() == DType::Float32 && is_reduced_float(grad.dtype()));
  MT_CHECK(grad_ok, op, ": grad dtype ", dtype_name(grad.dtype()), " does not fit a ", dtype_name(w.dtype()),
           " master (expected the master's dtype, or a 16-bit grad for an f32 master)");
  if (model.defined()) {
    MT_CHECK(w.dtype() == DType::Float32 && is_reduced_float(model.dtype()), op,
             ": the model copy must be f16/bf16 with an f32 master, got model ", model.describe(), " and master ",
             w.describe());
    MT_CHECK(model.sizes() == w.sizes() && model.is_contiguous(), op, ": the model copy must be a contiguous ",
             shape_str(w.sizes()), " tensor, got ", model.describe());
  }
  for (size_t k = 0; k < num_state; ++k) {
    const Tensor& s = call.inputs[3 + k];
    MT_CHECK(s.defined() && s.dtype() == w.dtype() && s.sizes() == w.sizes() && s.is_contiguous(), op,
             ": state buffer ", k, " must be a contiguous ", dtype_short(w.dtype()), shape_str(w.sizes()),
             " tensor, got ", s.defined() ? s.describe() : "undefined");
  }
  return w.numel();
}

TensorList run_step_sample(const OpSchema& op, const TensorList& x, Attrs attrs, bool stochastic) {
  const DType dt = x[0].dtype();
  const bool master = is_reduced_float(dt);
  const DType wdt = dt == DType::Float64 ? DType::Float64 : DType::Float32;
  TensorList ops{clone(to_dtype(x[0].detach(), wdt)),
                 master ? to_dtype(to_dtype(x[1].detach(), DType::Float32) * 512.0, dt) : x[1].detach(),
                 master ? clone(x[0].detach()) : Tensor()};
  for (size_t i = 2; i < x.size(); ++i) ops.push_back(clone(to_dtype(x[i].detach(), wdt)));
  attrs.set("inv_scale", master ? 1.0 / 512.0 : 1.0);
  attrs.set("stochastic", master && stochastic).set("seed", int64_t(20261202)).set("offset", int64_t(7));
  dispatch(op, ops, std::move(attrs));
  TensorList written{ops[0]};
  for (size_t i = 2; i < ops.size(); ++i)
    if (ops[i].defined()) written.push_back(ops[i]);
  return written;
}

}  // namespace mixtape::optim::detail
