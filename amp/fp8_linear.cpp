// amp/fp8_linear.cpp — linear and 2-D matmul inside Fp8Autocast: the three GEMMs of a layer on
// FP8 operands (amp/fp8_gemm.h), recorded as one tape node, Fp8GemmBackward.
//
// Operands in their stored layouts: P (M, K) is the input (linear's x with its leading dims
// flattened, matmul's a); Q is linear's weight w (N, K), used transposed, or matmul's b (K, N).
//   forward   C  = P @ op(Q)                  reduction over K
//   dgrad     dP = G @ op(Q)^T                reduction over N   (G: the output gradient, (M, N))
//   wgrad     dQ = G^T @ P (linear) or P^T @ G (matmul)          reduction over M
// Per-tensor recipes cast P, Q once in forward (saved in FP8 for backward: the transposes are
// layout flags) and G once in backward. MXFP8 blocks run along each GEMM's reduction dim, so
// each tensor is cast twice, once per dim, as TE's MXFP8 keeps a rowwise and a columnwise copy:
// P along K (forward) and M (wgrad), Q along K (forward) and N (dgrad), G along N and M.
// Bias: added to the f32 result before the one rounding to the output dtype; its gradient is
// G summed over rows, from the unquantized G (as TE's bgrad). The casts are straight-through:
// backward treats quantize as the identity, so dP and dQ are the exact gradients of the
// quantized product, with G quantized too.
#include <sstream>

#include "amp/fp8_autocast.h"
#include "amp/fp8_gemm.h"
#include "amp/mx_block.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "core/error.h"
#include "core/trace.h"
#include "ops/cast.h"
#include "ops/cpu/elementwise.h"
#include "ops/linear_args.h"
#include "ops/shape_ops.h"

namespace mixtape::amp {

namespace {

using autograd::Edge;
using autograd::Node;

// Casts one role's tensor (2-D, f32) as the recipe says. `axis`: the dim the GEMM reduces over
// (MX blocks run along it). meta: the layer's delayed-scaling state, or nullptr (then a delayed
// recipe scales from the tensor's own amax, as current scaling does: a matmul of two
// activations belongs to no module whose state could carry scales from step to step).
Fp8Operand cast_role(const Tensor& t32, Fp8Role role, int64_t axis, const Fp8Recipe& recipe, Fp8Meta* meta,
                     const char* who) {
  const DType dt = fp8_dtype_for(recipe_format(recipe), role);
  if (const auto* mx = std::get_if<MXFP8BlockScaling>(&recipe)) return mx_quantize(t32, axis, dt, *mx, who);
  const float amax = amax_of(t32);
  if (meta != nullptr) {
    meta->record_amax(role, amax);  // recorded while casting, used from the next update on
    return quantize_per_tensor(t32, dt, meta->scale_of(role));
  }
  const bool pow2 = std::visit([](const auto& r) {
    if constexpr (std::is_same_v<std::decay_t<decltype(r)>, MXFP8BlockScaling>) return false;
    else return r.power_of_2_scales;
  }, recipe);
  return quantize_per_tensor(t32, dt, scale_from_amax(amax, fp8_max(dt), 0.0f, pow2, 1.0f));
}

Tensor as_f32_2d(const Tensor& t, int64_t rows, int64_t cols) {
  return contiguous(cpu::cast_to(t.detach(), DType::Float32)).reshape({rows, cols});
}

bool is_mx(const Fp8Recipe& r) { return std::holds_alternative<MXFP8BlockScaling>(r); }

struct GemmSetup {
  bool linear;        // Q is w (N, K), used transposed; else matmul's b (K, N)
  Fp8Recipe recipe;
  std::optional<Fp8Meta> meta;  // handles sharing the layer's state tensors
  int64_t m, k, n;
};

class Fp8GemmNode final : public Node {
 public:
  Fp8GemmNode(GemmSetup s, const TensorList& inputs, Fp8Operand p_bwd, Fp8Operand q_bwd)
      : Node(next_seq_nr()), s_(std::move(s)), p_(std::move(p_bwd)), q_(std::move(q_bwd)) {
    for (const Tensor& t : inputs) {
      next_edges_.push_back(t.defined() && t.requires_grad() ? autograd::gradient_edge(t) : Edge{});
      meta_.push_back(t.defined() ? autograd::TensorMeta::of(t) : autograd::TensorMeta{});
    }
  }

  TensorList apply(TensorList grads) override {
    const char* who = s_.linear ? "linear (Fp8Autocast backward)" : "matmul (Fp8Autocast backward)";
    MT_CHECK(!released_, who, ": trying to backward through the FP8 GEMM a second time; pass retain_graph=true "
             "to the first backward");
    MT_CHECK(!autograd::GradMode::is_enabled(), who, ": the FP8 GEMM's backward is not differentiable "
             "(create_graph / double backward); run that part outside Fp8Autocast");
    TensorList out(next_edges_.size());
    if (grads.empty() || !grads[0].defined()) return out;
    const bool need_p = next_edges_[0].valid(), need_q = next_edges_[1].valid();
    const bool need_b = next_edges_.size() > 2 && next_edges_[2].valid();
    const Tensor g32 = as_f32_2d(grads[0], s_.m, s_.n);
    Fp8Meta* meta = s_.meta ? &*s_.meta : nullptr;
    const bool mx = is_mx(s_.recipe);
    Fp8Operand g_n, g_m;  // G cast for the dgrad (reduction over N) and the wgrad (over M)
    if (!mx) {
      if (need_p || need_q) g_n = g_m = cast_role(g32, Fp8Role::GradOutput, -1, s_.recipe, meta, who);
    } else {
      if (need_p) g_n = cast_role(g32, Fp8Role::GradOutput, 1, s_.recipe, meta, who);
      if (need_q) g_m = cast_role(g32, Fp8Role::GradOutput, 0, s_.recipe, meta, who);
    }
    if (need_p) {
      // dP (M, K) = G (M, N) @ op(Q)^T: linear's Q is w (N, K) itself; matmul's is b (K, N), transposed.
      Tensor dp = fp8_gemm(g_n, false, q_, !s_.linear, who);
      out[0] = cpu::cast_to(dp.reshape(meta_[0].sizes), meta_[0].dtype);
    }
    if (need_q) {
      // linear: dW (N, K) = G^T @ X; matmul: dB (K, N) = A^T @ G.
      Tensor dq = s_.linear ? fp8_gemm(g_m, true, p_, false, who) : fp8_gemm(p_, true, g_m, false, who);
      out[1] = cpu::cast_to(dq, meta_[1].dtype);
    }
    if (need_b) {
      Tensor gb = Tensor::empty({s_.n}, TensorOptions(DType::Float32));
      float* o = gb.data_ptr<float>();
      const float* g = g32.data_ptr<float>();
      for (int64_t j = 0; j < s_.n; ++j) o[j] = 0.0f;
      for (int64_t i = 0; i < s_.m; ++i)
        for (int64_t j = 0; j < s_.n; ++j) o[j] += g[i * s_.n + j];
      out[2] = cpu::cast_to(gb, meta_[2].dtype);
    }
    return out;
  }

  std::string name() const override { return s_.linear ? "Fp8LinearBackward" : "Fp8MatmulBackward"; }
  std::string describe() const override {
    std::ostringstream os;
    os << name() << "  (" << recipe_string(s_.recipe) << "; saved: " << (p_.data.defined() ? p_.data.describe() : "-")
       << ", " << (q_.data.defined() ? q_.data.describe() : "-") << ')';
    return os.str();
  }
  void release_saved() override {
    p_ = {};
    q_ = {};
    released_ = true;
  }

 private:
  GemmSetup s_;
  Fp8Operand p_, q_;  // P cast for the wgrad, Q cast for the dgrad (per-tensor: the forward casts)
  std::vector<autograd::TensorMeta> meta_;
  bool released_ = false;
};

bool cpu_floating(const Tensor& t) {
  return t.defined() && t.device().is_cpu() &&
         (t.dtype() == DType::Float32 || t.dtype() == DType::BFloat16 || t.dtype() == DType::Float16);
}

void trace_fp8(const char* op, const GemmSetup& s, const Fp8Operand& p, const Fp8Operand& q) {
  if (!trace_enabled(TraceKind::Amp)) return;
  std::ostringstream os;
  os << "fp8 " << op << ' ' << recipe_string(s.recipe) << ": M=" << s.m << " K=" << s.k << " N=" << s.n << ", "
     << fp8_role_name(Fp8Role::Input) << "->" << dtype_short(p.data.dtype());
  if (p.axis < 0) os << " (scale_inv " << p.scale_inv << ')';
  os << ", " << fp8_role_name(Fp8Role::Weight) << "->" << dtype_short(q.data.dtype());
  if (q.axis < 0) os << " (scale_inv " << q.scale_inv << ')';
  trace_line(TraceKind::Amp, os.str());
}

// x (*, K), w (N, K), b (N) or undefined / a (M, K), b (K, N).
TensorList run_fp8(bool linear, const Tensor& x, const Tensor& w, const Tensor& bias,
                   const detail::Fp8RegionSettings& region) {
  const char* who = linear ? "linear (Fp8Autocast)" : "matmul (Fp8Autocast)";
  GemmSetup s{linear, region.recipe, std::nullopt, 0, 0, 0};
  s.k = x.size(-1);
  s.n = linear ? w.size(0) : w.size(1);
  s.m = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) s.m *= x.size(d);
  if (std::holds_alternative<DelayedScaling>(region.recipe) && linear) {
    Fp8Meta* meta = region.metas->find(w);
    MT_CHECK(meta != nullptr, who, ": under ", recipe_string(region.recipe), " the weight ", w.describe(),
             " has no FP8 metadata; make the Fp8Metas from the model that owns it (model.named_parameters())");
    s.meta = *meta;
  }
  Fp8Meta* meta = s.meta ? &*s.meta : nullptr;
  const Tensor p32 = as_f32_2d(x, s.m, s.k);
  const Tensor q32 = linear ? as_f32_2d(w, s.n, s.k) : as_f32_2d(w, s.k, s.n);
  const int64_t q_fwd_axis = linear ? 1 : 0, q_dgrad_axis = linear ? 0 : 1;
  const bool grad = autograd::GradMode::is_enabled() &&
                    (x.requires_grad() || w.requires_grad() || (bias.defined() && bias.requires_grad()));
  Fp8Operand p_fwd = cast_role(p32, Fp8Role::Input, 1, s.recipe, meta, who);
  Fp8Operand q_fwd = cast_role(q32, Fp8Role::Weight, q_fwd_axis, s.recipe, meta, who);
  trace_fp8(linear ? "linear" : "matmul", s, p_fwd, q_fwd);
  Tensor c = fp8_gemm(p_fwd, false, q_fwd, linear, who);
  if (bias.defined()) {
    const Tensor b32 = contiguous(cpu::cast_to(bias.detach(), DType::Float32));
    float* cp = c.data_ptr<float>();
    const float* bp = b32.data_ptr<float>();
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) cp[i * s.n + j] += bp[j];
  }
  IntList out_shape = x.sizes();
  out_shape.back() = s.n;
  Tensor out = cpu::cast_to(c, region.output_dtype).reshape(out_shape);
  if (!grad) return {out};
  // What backward needs: P for the wgrad (if Q needs a gradient), Q for the dgrad (if P does).
  Fp8Operand p_bwd, q_bwd;
  if (w.requires_grad()) p_bwd = is_mx(s.recipe) ? cast_role(p32, Fp8Role::Input, 0, s.recipe, nullptr, who) : p_fwd;
  if (x.requires_grad()) q_bwd = is_mx(s.recipe) ? cast_role(q32, Fp8Role::Weight, q_dgrad_axis, s.recipe, nullptr, who) : q_fwd;
  TensorList inputs{x, w};
  if (linear) inputs.push_back(bias);
  auto node = std::make_shared<Fp8GemmNode>(std::move(s), inputs, std::move(p_bwd), std::move(q_bwd));
  out = out.detach();
  out.set_history(node, 0);
  return {out};
}

}  // namespace

namespace detail {

std::optional<TensorList> fp8_dispatch(const OpSchema& op, OpCall& call) {
  const Fp8RegionSettings* region = fp8_region();
  if (region == nullptr) return std::nullopt;
  const bool linear = op.name == "linear";
  if (!linear && op.name != "matmul") return std::nullopt;
  const Tensor& x = call.inputs[0];
  const Tensor& w = call.inputs[1];
  const Tensor bias = linear && call.inputs.size() > 2 ? call.inputs[2] : Tensor();
  // Only CPU floating operands (f64 is never autocast) of the shapes the FP8 GEMM takes; a
  // batched matmul follows BF16 autocast (traced).
  if (!cpu_floating(x) || !cpu_floating(w) || (bias.defined() && !cpu_floating(bias))) return std::nullopt;
  if (!linear && (x.dim() != 2 || w.dim() != 2)) {
    if (trace_enabled(TraceKind::Amp))
      trace_line(TraceKind::Amp, "fp8 matmul: batched " + x.describe() + " @ " + w.describe() +
                                     " is not an FP8 GEMM; BF16 autocast runs it");
    return std::nullopt;
  }
  if (linear) check_linear("linear", x, w, bias, false);
  else MT_CHECK(x.size(1) == w.size(0), "matmul: inner dimensions must match, got ", x.describe(), " @ ", w.describe());
  ExcludeLayerGuard no_autocast(DispatchLayer::Autocast);
  return run_fp8(linear, x, w, bias, *region);
}

}  // namespace detail

}  // namespace mixtape::amp
