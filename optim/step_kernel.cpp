// optim/step_kernel.cpp — the operand checks of the fused step ops, single- and multi-tensor
// (layout in step_kernel.h), the portable-loop switch, and the operands their samples run on.
#include "optim/step_kernel.h"

#include <atomic>
#include <cstring>
#include <variant>

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

namespace {

const char* const kListNames[6] = {"w", "grad", "model", "state 0", "state 1", "state 2"};

// The checks of one tensor's operands (layout in step_kernel.h). `who` is "" for a single-tensor
// op, "tensor k: " for tensor k of a multi-tensor op.
void check_operands(const char* op, const std::string& who, const Tensor& w, const Tensor& grad, const Tensor& model,
                    const Tensor* state, size_t num_state) {
  MT_CHECK(w.defined() && (w.dtype() == DType::Float32 || w.dtype() == DType::Float64), op, ": ", who,
           "the updated tensor (master) must be f32 or f64, got ", w.defined() ? w.describe() : "undefined");
  MT_CHECK(w.is_contiguous(), op, ": ", who, "the updated tensor must be contiguous, got ", w.describe());
  MT_CHECK(grad.defined() && grad.sizes() == w.sizes() && grad.is_contiguous(), op, ": ", who,
           "grad must be a contiguous ", shape_str(w.sizes()), " tensor, got ",
           grad.defined() ? grad.describe() : "undefined");
  const bool grad_ok =
      grad.dtype() == w.dtype() || (w.dtype() == DType::Float32 && is_reduced_float(grad.dtype()));
  MT_CHECK(grad_ok, op, ": ", who, "grad dtype ", dtype_name(grad.dtype()), " does not fit a ", dtype_name(w.dtype()),
           " master (expected the master's dtype, or a 16-bit grad for an f32 master)");
  if (model.defined()) {
    MT_CHECK(w.dtype() == DType::Float32 && is_reduced_float(model.dtype()), op, ": ", who,
             "the model copy must be f16/bf16 with an f32 master, got model ", model.describe(), " and master ",
             w.describe());
    MT_CHECK(model.sizes() == w.sizes() && model.is_contiguous(), op, ": ", who,
             "the model copy must be a contiguous ", shape_str(w.sizes()), " tensor, got ", model.describe());
  }
  for (size_t k = 0; k < num_state; ++k) {
    const Tensor& s = state[k];
    MT_CHECK(s.defined() && s.dtype() == w.dtype() && s.sizes() == w.sizes() && s.is_contiguous(), op, ": ", who,
             "state buffer ", k, " must be a contiguous ", dtype_short(w.dtype()), shape_str(w.sizes()),
             " tensor, got ", s.defined() ? s.describe() : "undefined");
  }
}

// "w f32, grad f16, model bf16" (model "none" when absent): the dtypes one kernel runs with.
std::string dtypes_of(const FusedOperands& o) {
  std::string s = "w " + std::string(dtype_short(o.w.dtype())) + ", grad " + std::string(dtype_short(o.grad.dtype()));
  return s + ", model " + (o.model.defined() ? std::string(dtype_short(o.model.dtype())) : std::string("none"));
}

}  // namespace

bool capturable(const OpCall& call) { return call.attrs.get_or<bool>("capturable", false); }

size_t list_inputs(const OpCall& call, size_t count) {
  const size_t extra = capturable(call) ? 3 + count : 0;
  MT_CHECK(call.inputs.size() >= extra, call.name(), ": a capturable step takes found_inf, inv_scale, lr and ", count,
           " step tensor(s) after the lists; got only ", call.inputs.size(), " inputs");
  return call.inputs.size() - extra;
}

DeviceScalars device_scalars(const OpCall& call, size_t lists_end, size_t count) {
  const char* op = call.name();
  MT_CHECK(call.inputs.size() == lists_end + 3 + count, op, ": a capturable step takes ", lists_end,
           " list inputs, then found_inf, inv_scale, lr and ", count, " step tensor(s); got ", call.inputs.size(),
           " inputs");
  const Device dev = call.inputs[0].device();
  auto scalar = [&](size_t i, DType dtype, const char* what, bool optional) -> void* {
    const Tensor& t = call.inputs[i];
    if (!t.defined()) {
      MT_CHECK(optional, op, ": ", what, " (capturable input ", i - lists_end, ") is required, got an undefined tensor");
      return nullptr;
    }
    MT_CHECK(t.dtype() == dtype && t.numel() == 1 && t.device() == dev, op, ": ", what, " must be a 1-element ",
             dtype_name(dtype), " tensor on ", dev, ", got ", t.describe());
    return t.data_ptr();
  };
  DeviceScalars d;
  d.found_inf = static_cast<const float*>(scalar(lists_end, DType::Float32, "found_inf", true));
  d.inv_scale = static_cast<const float*>(scalar(lists_end + 1, DType::Float32, "inv_scale", true));
  d.lr = static_cast<const double*>(scalar(lists_end + 2, DType::Float64, "lr", false));
  for (size_t k = 0; k < count; ++k)
    d.step.push_back(static_cast<int64_t*>(
        scalar(lists_end + 3 + k, DType::Int64, ("step " + std::to_string(k)).c_str(), false)));
  return d;
}

FusedOperands fused_operands(const OpCall& call, size_t num_state) {
  const char* op = call.name();
  MT_CHECK(list_inputs(call, 1) == 3 + num_state, op, ": expected ", 3 + num_state,
           " inputs (w, grad, model, state...", capturable(call) ? ", then capturable's found_inf, inv_scale, lr, step" : "",
           "), got ", list_inputs(call, 1), capturable(call) ? " before the 4 capturable ones" : "");
  FusedOperands o;
  o.w = call.inputs[0];
  o.grad = call.inputs[1];
  o.model = call.inputs[2];
  for (size_t k = 0; k < num_state; ++k) o.state[k] = call.inputs[3 + k];
  check_operands(op, "", o.w, o.grad, o.model, o.state.data(), num_state);
  o.n = o.w.numel();
  o.inv_scale = static_cast<float>(call.attrs.get<double>("inv_scale"));
  o.stochastic = call.attrs.get_or<bool>("stochastic", false);
  o.seed = static_cast<uint64_t>(call.attrs.get_or<int64_t>("seed", 0));
  o.offset = static_cast<uint64_t>(call.attrs.get_or<int64_t>("offset", 0));
  return o;
}

const IntList& per_tensor_attr(const OpCall& call, const char* name, size_t count) {
  const AttrValue* value = nullptr;
  for (auto& [n, v] : call.attrs.items())
    if (std::strcmp(n, name) == 0) value = &v;
  MT_CHECK(value != nullptr, call.name(), ": missing attr '", name, "' (a list with one entry per tensor, ", count,
           ")");
  const IntList* list = std::get_if<IntList>(value);
  MT_CHECK(list != nullptr, call.name(), ": attr '", name, "' must be a list (IntList) with one entry per tensor (",
           count, "), got a single value");
  MT_CHECK(list->size() == count, call.name(), ": attr '", name, "' has ", list->size(),
           " entries, expected one per tensor (", count, ")");
  return *list;
}

std::vector<FusedOperands> fused_operands_multi(const OpCall& call, size_t num_state) {
  const char* op = call.name();
  const size_t lists = 3 + num_state;
  std::string names;
  for (size_t l = 0; l < lists; ++l) names += std::string(l ? ", " : "") + kListNames[l] + "...";
  MT_CHECK(call.attrs.has("count"), op, ": missing attr 'count' (the number of tensors, the length of each of the ",
           lists, " input lists ", names, ")");
  const int64_t count = call.attrs.get<int64_t>("count");
  MT_CHECK(count >= 1, op, ": attr 'count' (the number of tensors) must be >= 1, got ", count);
  const size_t n = static_cast<size_t>(count);
  const size_t total = list_inputs(call, n);
  MT_CHECK(total == lists * n, op, ": expected ", lists, " lists of ", n, " tensors (", names, ") = ", lists * n,
           " inputs, got ", total);
  const IntList& seeds = per_tensor_attr(call, "seed", n);
  const IntList& offsets = per_tensor_attr(call, "offset", n);
  const float inv_scale = static_cast<float>(call.attrs.get<double>("inv_scale"));
  const bool stochastic = call.attrs.get_or<bool>("stochastic", false);
  std::vector<FusedOperands> out(n);
  for (size_t k = 0; k < n; ++k) {
    FusedOperands& o = out[k];
    o.w = call.inputs[k];
    o.grad = call.inputs[n + k];
    o.model = call.inputs[2 * n + k];
    for (size_t j = 0; j < num_state; ++j) o.state[j] = call.inputs[(3 + j) * n + k];
    check_operands(op, "tensor " + std::to_string(k) + ": ", o.w, o.grad, o.model, o.state.data(), num_state);
    o.n = o.w.numel();
    o.inv_scale = inv_scale;
    o.stochastic = stochastic;
    o.seed = static_cast<uint64_t>(seeds[k]);
    o.offset = static_cast<uint64_t>(offsets[k]);
    // One kernel runs every tensor of the call: its dtypes must be tensor 0's.
    const FusedOperands& f = out[0];
    const bool same = o.w.dtype() == f.w.dtype() && o.grad.dtype() == f.grad.dtype() &&
                      o.model.defined() == f.model.defined() &&
                      (!o.model.defined() || o.model.dtype() == f.model.dtype());
    MT_CHECK(same, op, ": every tensor of one call must have the same dtypes (one kernel runs them all; call once ",
             "per combination): expected ", dtypes_of(f), " (tensor 0), got ", dtypes_of(o), " (tensor ", k, ")");
  }
  return out;
}

namespace {
// One tensor's operands for a sample, from its arguments x[begin], x[begin + 1], ... (see
// run_step_sample): w, grad, model, state...
TensorList sample_operands(const TensorList& x, size_t begin, size_t count) {
  const DType dt = x[begin].dtype();
  const bool master = is_reduced_float(dt);
  const DType wdt = dt == DType::Float64 ? DType::Float64 : DType::Float32;
  TensorList ops{clone(to_dtype(x[begin].detach(), wdt)),
                 master ? to_dtype(to_dtype(x[begin + 1].detach(), DType::Float32) * 512.0, dt) : x[begin + 1].detach(),
                 master ? clone(x[begin].detach()) : Tensor()};
  for (size_t i = begin + 2; i < begin + count; ++i) ops.push_back(clone(to_dtype(x[i].detach(), wdt)));
  return ops;
}
}  // namespace

TensorList run_step_sample(const OpSchema& op, const TensorList& x, Attrs attrs, bool stochastic) {
  const bool master = is_reduced_float(x[0].dtype());
  TensorList ops = sample_operands(x, 0, x.size());
  attrs.set("inv_scale", master ? 1.0 / 512.0 : 1.0);
  attrs.set("stochastic", master && stochastic).set("seed", int64_t(20261202)).set("offset", int64_t(7));
  dispatch(op, ops, std::move(attrs));
  TensorList written{ops[0]};
  for (size_t i = 2; i < ops.size(); ++i)
    if (ops[i].defined()) written.push_back(ops[i]);
  return written;
}

TensorList run_multi_step_sample(const OpSchema& op, const TensorList& x, size_t per_tensor, Attrs attrs,
                                 bool stochastic) {
  MT_CHECK(per_tensor >= 2 && x.size() % per_tensor == 0, op.name, " sample: ", x.size(),
           " arguments are not whole tensors of ", per_tensor);
  const size_t n = x.size() / per_tensor, lists = per_tensor + 1;  // + the model copy
  const bool master = is_reduced_float(x[0].dtype());
  TensorList ops(lists * n);
  IntList seeds, offsets;
  for (size_t k = 0; k < n; ++k) {
    const TensorList one = sample_operands(x, k * per_tensor, per_tensor);
    for (size_t l = 0; l < lists; ++l) ops[l * n + k] = one[l];
    seeds.push_back(20261202);
    offsets.push_back(7 + 4096 * static_cast<int64_t>(k));
  }
  attrs.set("inv_scale", master ? 1.0 / 512.0 : 1.0);
  attrs.set("stochastic", master && stochastic).set("seed", seeds).set("offset", offsets);
  attrs.set("count", static_cast<int64_t>(n));
  dispatch(op, ops, std::move(attrs));
  TensorList written;
  for (size_t i = 0; i < ops.size(); ++i)
    if (i / n != 1 && ops[i].defined()) written.push_back(ops[i]);
  return written;
}

}  // namespace mixtape::optim::detail
