// amp/cuda/fp8_autocast_cuda.cpp — linear, 2-D matmul and conv2d inside Fp8Autocast(CUDA): the
// three GEMMs of a layer on cuBLASLt's FP8 matmul (cuda::fp8_gemm_nt: TN, scale pointers, FP32
// compute; BF16-widened below sm_89), recorded as one tape node. The operands, roles and
// straight-through gradients are amp/fp8_ops.cpp's (its header derives them); what differs is
// where the numbers live and the layout:
// - Scales stay on the device. Delayed scaling casts with the meta's scale tensor (read by the
//   cast kernel) and folds each cast's amax into row 0 of the meta's history (atomicMax), current
//   scaling computes its amax and scale with two small kernels before the cast; the GEMM reads the
//   dequantising factors through its scale pointers. Nothing is read back on the host.
// - Every GEMM is out = a @ b^T with both operands K-major (the one layout FP8 tensor cores take
//   on Ada and Hopper) and K zero-padded to a multiple of 16 (cuBLASLt's FP8 rows). A per-tensor
//   cast does not depend on the layout, so each tensor is cast once and the transposed operands
//   are byte transposes of that cast (Transformer Engine fuses the two as cast_transpose).
// - A parameter being trained (detail::dgrad_recasts_weight) is not saved in FP8: the node keeps
//   it by reference with device copies of its forward cast's scale and scale_inv, and the dgrad
//   casts it again (the same bytes; no amax recorded twice; an in-place change in between
//   refused), as amp/fp8_ops.cpp does. Any other weight keeps its FP8 copy.
// - conv2d casts its image, saves it (one byte per pixel) and builds the im2col matrix from the
//   FP8 bytes on the device, K-major for the forward and transposed for the wgrad
//   (amp/cuda/fp8_im2col.cu); the dgrad's columns go back to the image by col2im.
// MXFP8 goes to amp/cuda/mx_autocast_cuda.cpp (block casts widened to BF16 on any GPU; cuBLASLt's
// block-scaled FP8 matmul exists on Blackwell only and is not used).
#include <sstream>

#include "amp/cuda/fp8_delayed_scaling.h"
#include "amp/cuda/fp8_delayed_scaling_kernels.h"
#include "amp/cuda/fp8_im2col_kernels.h"
#include "amp/cuda/mx_autocast_cuda.h"
#include "amp/fp8_cuda_route.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/saved_tensor.h"
#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/dispatcher.h"
#include "core/error.h"
#include "core/trace.h"
#include "ops/cast.h"
#include "ops/creation.h"
#include "ops/cuda/fp8_cast.h"
#include "ops/cuda/fp8_gemm.h"
#include "ops/pointwise.h"
#include "ops/reduce.h"

namespace mixtape::amp::cuda {
namespace {

using detail::Fp8GemmOp;

const char* op_name(Fp8GemmOp k) { return k == Fp8GemmOp::Linear ? "linear" : k == Fp8GemmOp::Matmul ? "matmul" : "conv2d"; }

// cuBLASLt's FP8 operands: rows of 16-byte multiples.
int64_t padded(int64_t k) { return (k + 15) / 16 * 16; }

Tensor scalar_f32(Device d) { return zeros({1}, TensorOptions(DType::Float32).with_device(d)); }

// A tensor cast to FP8: (rows, cols) contiguous, its dequantising factor and the scale the cast
// multiplied by (f32, one element each, on the device; scale_inv = 1 / scale).
struct DevOperand {
  Tensor data;
  Tensor scale_inv;
  Tensor scale;
};

// Where a layer's casts take their scales (delayed scaling) — the meta's tensors, or in a
// checkpoint's recompute the forward's copies — and whether they record their amaxes.
struct MetaUse {
  Tensor scale, scale_inv;  // f32 (3) on the device; undefined: scale each cast by its own amax
  Tensor amax_row;          // row 0 of the history, f32 (3); undefined: record nothing
};

// Casts t (f32/f16/bf16, any layout; read as its logical (rows, cols)) for `role`.
DevOperand cast_role(const Tensor& t, Fp8Role role, const Fp8Recipe& recipe, const MetaUse& use) {
  const DType dt = fp8_dtype_for(recipe_format(recipe), role);
  const int64_t r = static_cast<int64_t>(role);
  const Float8Cast unit{1.0f, Fp8Saturation::Finite};  // the scale comes from the device tensor
  if (use.scale.defined()) {
    const Tensor amax = use.amax_row.defined() ? use.amax_row.narrow(0, r, 1) : Tensor();
    const Tensor scale = use.scale.narrow(0, r, 1);
    return {::mixtape::cuda::to_float8(t, dt, unit, scale, amax), use.scale_inv.narrow(0, r, 1), scale};
  }
  // Current scaling (and a delayed recipe's matmul, which has no meta): this tensor's amax, its
  // scale with margin 0 and fallback 1, then the cast, all on the device.
  const bool pow2 = std::visit(
      [](const auto& rc) {
        if constexpr (std::is_same_v<std::decay_t<decltype(rc)>, MXFP8BlockScaling>) return false;
        else return rc.power_of_2_scales;
      },
      recipe);
  Tensor amax = scalar_f32(t.device()), scale = scalar_f32(t.device()), scale_inv = scalar_f32(t.device());
  ::mixtape::cuda::fold_amax(t, amax);
  MT_CUDA_CHECK(launch_fp8_current_scale(amax.data_ptr<float>(), fp8_max(dt), pow2, scale.data_ptr<float>(),
                                         scale_inv.data_ptr<float>(), ::mixtape::cuda::current_stream()),
                "Fp8Autocast(cuda): current scale");
  return {::mixtape::cuda::to_float8(t, dt, unit, scale, {}), scale_inv, scale};
}

// An FP8 (rows, cols) matrix as a K-major GEMM operand with K padded to 16: itself (K = cols),
// or its transpose (K = rows), zeros after the K real values of each row.
Tensor kmajor(const Tensor& q, bool transpose) {
  const int64_t rows = transpose ? q.size(1) : q.size(0), k = transpose ? q.size(0) : q.size(1);
  const int64_t ld = padded(k);
  if (!transpose && ld == k) return q;
  Tensor out = empty({rows, ld}, TensorOptions(q.dtype()).with_device(q.device()));
  out.narrow(1, 0, k).copy_(transpose ? q.t() : q);
  if (ld > k) out.narrow(1, k, ld - k).zero_();
  return out;
}

// a @ b^T in f32, (m, n): a (m, k'), b (n, k') K-major operands of two casts.
Tensor gemm(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b, const Tensor& b_scale_inv) {
  if (a.size(1) == 0) return zeros({a.size(0), b.size(0)}, TensorOptions(DType::Float32).with_device(a.device()));
  return ::mixtape::cuda::fp8_gemm_nt(a, b, a_scale_inv, b_scale_inv, DType::Float32);
}

Im2colGeom im2col_geom(const ConvGeom& g) {
  return {g.N, g.C, g.H, g.W, g.kH, g.kW, g.sH, g.sW, g.pH, g.pW, g.dH, g.dW, g.OH, g.OW};
}

// The im2col matrix of an FP8 image: K-major (M, padded K) for the forward, or transposed
// (K, padded M) for the wgrad.
Tensor im2col(const Tensor& image, const ConvGeom& g, bool transposed) {
  const int64_t M = g.N * g.L(), K = g.K();
  const int64_t ld = padded(transposed ? M : K);
  Tensor out = empty({transposed ? K : M, ld}, TensorOptions(image.dtype()).with_device(image.device()));
  MT_CUDA_CHECK(launch_fp8_im2col(static_cast<const uint8_t*>(image.data_ptr()), static_cast<uint8_t*>(out.data_ptr()),
                                  im2col_geom(g), transposed, ld, ::mixtape::cuda::current_stream()),
                "conv2d (Fp8Autocast, cuda): im2col");
  return out;
}

struct Setup {
  Fp8GemmOp op;
  Fp8Recipe recipe;
  int64_t m = 0, k = 0, n = 0;
  ConvGeom geom{};
  MetaUse meta;  // the backward's (the meta's own tensors: the output gradient's scale is read then)
};

class Fp8CudaGemmNode final : public autograd::Node {
 public:
  // q: Q as cast in forward (its FP8 copy), or, for a leaf weight, w_ref: the weight itself with
  // q.scale / q.scale_inv the forward cast's (device copies), cast again for the dgrad.
  Fp8CudaGemmNode(Setup s, const TensorList& inputs, DevOperand p, DevOperand q, Tensor w_ref)
      : Node(next_seq_nr()),
        s_(std::move(s)),
        p_(std::move(p)),
        q_(std::move(q)),
        w_ref_(std::move(w_ref)),
        w_ref_version_(w_ref_.defined() ? w_ref_.version() : 0) {
    detail::fp8_node_edges(inputs, next_edges_, meta_);
  }

  std::string name() const override { return detail::fp8_node_name(s_.op); }
  std::string describe() const override {
    return detail::describe_fp8_node(s_.op, recipe_string(s_.recipe), true, p_.data, q_.data, Tensor(), w_ref_);
  }
  void release_saved() override {
    p_ = {};
    q_ = {};
    w_ref_ = {};
    released_ = true;
  }

  TensorList apply(TensorList grads) override {
    const Tensor g = grads.empty() ? Tensor() : grads[0];
    return detail::fp8_backward_checked(s_.op, {g, p_.data, q_.data.defined() ? q_.data : w_ref_, Tensor()},
                                        [&] { return compute(grads); });
  }

 private:
  TensorList compute(const TensorList& grads) {
    const std::string who_s = std::string(op_name(s_.op)) + " (Fp8Autocast backward, cuda)";
    const char* who = who_s.c_str();
    detail::check_fp8_backward(who, released_);
    TensorList out(next_edges_.size());
    if (grads.empty() || !grads[0].defined()) return out;
    ExcludeLayerGuard no_autocast(DispatchLayer::Autocast);  // the backward's own ops run as written
    ::mixtape::cuda::DeviceGuard guard(grads[0].device().index());  // p_ is kept only when the weight needs a gradient
    const bool need_p = next_edges_[0].valid(), need_q = next_edges_[1].valid();
    const bool need_b = next_edges_.size() > 2 && next_edges_[2].valid();
    const bool conv = s_.op == Fp8GemmOp::Conv2d;
    // G as (M, N): conv2d's (N, O, OH, OW) gradient with the channels last.
    const Tensor g = conv ? grads[0].detach().permute({0, 2, 3, 1}) : grads[0].detach();
    DevOperand gq;
    if (need_p || need_q) {
      gq = cast_role(g, Fp8Role::GradOutput, s_.recipe, s_.meta);
      gq.data = gq.data.reshape({s_.m, s_.n});
    }
    if (need_p) {
      // dP (M, K) = G (M, N) @ op(Q)^T: b is op(Q)^T K-major over N, i.e. (K, N): linear's and
      // conv2d's W (N, K) transposed, matmul's B (K, N) as it is.
      const Tensor b = kmajor(dgrad_weight(who), s_.op != Fp8GemmOp::Matmul);
      Tensor dp = gemm(kmajor(gq.data, false), gq.scale_inv, b, q_.scale_inv);
      if (conv) {
        const ConvGeom& gm = s_.geom;
        Tensor image = empty({gm.N, gm.C, gm.H, gm.W}, TensorOptions(DType::Float32).with_device(dp.device()));
        MT_CUDA_CHECK(launch_col2im_f32(dp.data_ptr<float>(), image.data_ptr<float>(), im2col_geom(gm),
                                        ::mixtape::cuda::current_stream()),
                      "conv2d (Fp8Autocast backward, cuda): col2im");
        dp = image;
      }
      out[0] = to_dtype(dp.reshape(meta_[0].sizes), meta_[0].dtype);
    }
    if (need_q) {
      Tensor dq;
      const Tensor gt = kmajor(gq.data, true);  // G^T (N, padded M)
      if (s_.op == Fp8GemmOp::Matmul) {
        dq = gemm(kmajor(p_.data, true), p_.scale_inv, gt, gq.scale_inv);  // dB (K, N) = A^T G
      } else {
        const Tensor pt = conv ? im2col(p_.data, s_.geom, true) : kmajor(p_.data, true);  // P^T (K, padded M)
        dq = gemm(gt, gq.scale_inv, pt, p_.scale_inv);  // dW (N, K) = G^T P
      }
      out[1] = to_dtype(dq.reshape(meta_[1].sizes), meta_[1].dtype);
    }
    if (need_b) {
      const Tensor g32 = to_dtype(g, DType::Float32);
      out[2] = to_dtype(conv ? sum(g32, {0, 1, 2}) : sum(g32.reshape({s_.m, s_.n}), {0}), meta_[2].dtype);
    }
    return out;
  }

  // Q's FP8 bytes for the dgrad: the saved copy, or the leaf weight cast again with the forward's
  // scale (the same function on the same values and scale: the same bytes; no amax recorded), its
  // in-place changes since the forward refused as a saved tensor's are.
  Tensor dgrad_weight(const char* who) const {
    if (!w_ref_.defined()) return q_.data;
    detail::check_kept_unchanged(w_ref_, w_ref_version_, "input 1 (the weight)", who);
    const DType dt = fp8_dtype_for(recipe_format(s_.recipe), Fp8Role::Weight);
    const Tensor w = s_.op != Fp8GemmOp::Matmul ? w_ref_.reshape({s_.n, s_.k}) : w_ref_;
    return ::mixtape::cuda::to_float8(w, dt, {1.0f, Fp8Saturation::Finite}, q_.scale, {});
  }

  Setup s_;
  DevOperand p_, q_;  // P (conv2d: the FP8 image) and Q as cast in forward (q_.data undefined: w_ref_)
  Tensor w_ref_;      // a leaf weight, kept by reference and cast again for the dgrad
  uint32_t w_ref_version_ = 0;
  std::vector<autograd::TensorMeta> meta_;
  bool released_ = false;
};

// The layer's delayed-scaling state (nullptr: none, or not delayed scaling).
Fp8Meta* find_meta(const detail::Fp8CudaCall& c, const char* who) {
  const detail::Fp8RegionSettings& region = *c.region;
  if (!std::holds_alternative<DelayedScaling>(region.recipe) || c.op == Fp8GemmOp::Matmul) return nullptr;
  Fp8Meta* meta = region.metas->find(c.w);
  MT_CHECK(meta != nullptr, who, ": under ", recipe_string(region.recipe), " the weight ", c.w.describe(),
           " has no FP8 metadata; make the Fp8Metas from the model that owns it (model.named_parameters())");
  MT_CHECK(meta->scale.device() == c.w.device(), who, ": the FP8 metadata '", meta->name, "' is on ",
           meta->scale.device(), ", its weight on ", c.w.device());
  return meta;
}

// The forward's casts, as amp/fp8_ops.cpp's run_fp8 chooses their scales.
MetaUse forward_use(const detail::Fp8CudaCall& c, Fp8Meta* meta, const char* who) {
  const detail::Fp8RegionSettings& region = *c.region;
  if (meta == nullptr) return {};
  if (region.forward_scales_device.defined()) {
    // A checkpoint's recompute: the forward's scales, nothing recorded.
    MT_CHECK(region.forward_scales_device.numel() == kFp8Roles * static_cast<int64_t>(region.metas->size()), who,
             ": the Fp8Metas have ", region.metas->size(), " metas in this checkpoint's recompute, ",
             region.forward_scales_device.numel() / kFp8Roles, " in its forward");
    const int64_t i = static_cast<int64_t>(meta - region.metas->metas().data()) * kFp8Roles;
    return {region.forward_scales_device.narrow(0, i, kFp8Roles),
            region.forward_scale_invs_device.narrow(0, i, kFp8Roles), {}};
  }
  // A region opened inside a recompute records nothing (its forward did).
  return {meta->scale, meta->scale_inv, region.record_amaxes ? meta->amax_history.select(0, 0) : Tensor()};
}

TensorList run(const detail::Fp8CudaCall& c) {
  const std::string who_s = std::string(op_name(c.op)) + " (Fp8Autocast, cuda)";
  const char* who = who_s.c_str();
  const detail::Fp8RegionSettings& region = *c.region;
  const Device dev = c.x.device();
  MT_CHECK(c.w.device() == dev && (!c.bias.defined() || c.bias.device() == dev), who,
           ": every operand must be on one device, got ", c.x.describe(), " on ", dev, ", ", c.w.describe(), " on ",
           c.w.device(), c.bias.defined() ? ", bias on " : "", c.bias.defined() ? c.bias.device() : dev);
  // MXFP8: the device block casts, widened to BF16 (amp/cuda/mx_autocast_cuda.cpp).
  if (std::holds_alternative<MXFP8BlockScaling>(region.recipe)) return run_mx(c, who);
  ::mixtape::cuda::DeviceGuard guard(dev.index());
  Setup s{c.op, region.recipe};
  const bool conv = c.op == Fp8GemmOp::Conv2d;
  if (conv) s.geom = c.geom;
  const detail::Fp8GemmDims dims = detail::fp8_gemm_dims(c.op, c.x, c.w, c.geom);
  s.m = dims.m;
  s.k = dims.k;
  s.n = dims.n;
  Fp8Meta* meta = find_meta(c, who);
  const MetaUse use = forward_use(c, meta, who);
  if (trace_enabled(TraceKind::Amp)) {
    std::ostringstream os;
    os << "fp8 " << op_name(c.op) << " (cuda) " << recipe_string(region.recipe) << ": M=" << s.m << " K=" << s.k
       << " N=" << s.n << ", scales on the device";
    trace_line(TraceKind::Amp, os.str());
  }
  const Tensor x = c.x.detach(), w = c.w.detach();
  const bool q_transposed = c.op != Fp8GemmOp::Matmul;  // W stored (N, K)
  DevOperand p = cast_role(conv ? x : x.reshape({s.m, s.k}), Fp8Role::Input, region.recipe, use);
  DevOperand q = cast_role(q_transposed ? w.reshape({s.n, s.k}) : w, Fp8Role::Weight, region.recipe, use);
  const Tensor a = conv ? im2col(p.data, s.geom, false) : kmajor(p.data, false);
  const Tensor out32 = gemm(a, p.scale_inv, kmajor(q.data, !q_transposed), q.scale_inv);  // (M, N)
  // The CPU's order: the scaled f32 product, plus the bias, rounded once to the output dtype.
  Tensor y = c.bias.defined() ? add(out32, to_dtype(c.bias.detach(), DType::Float32)) : out32;
  y = to_dtype(y, region.output_dtype);
  if (conv) {
    y = contiguous(y.reshape({s.geom.N, s.geom.OH, s.geom.OW, s.n}).permute({0, 3, 1, 2}));
  } else {
    IntList shape = c.x.sizes();
    shape.back() = s.n;
    y = y.reshape(shape);
  }
  const bool grad = autograd::GradMode::is_enabled() &&
                    (c.x.requires_grad() || c.w.requires_grad() || (c.bias.defined() && c.bias.requires_grad()));
  if (!grad) return {y};
  // The backward keeps what it needs, each with a copy of the factor it was cast with (the
  // meta's scale_inv may be updated before the backward runs).
  DevOperand p_keep, q_keep;
  Tensor w_ref;
  if (c.w.requires_grad()) p_keep = {p.data, clone(p.scale_inv), Tensor()};
  if (c.x.requires_grad()) {
    // A parameter being trained (which its module keeps alive anyway) is not saved in FP8: the
    // dgrad casts it again with a copy of this cast's scale (amp/fp8_ops.cpp's rule). Any other Q
    // (matmul's b, a computed weight, a tensor without grad) keeps its FP8 copy.
    if (detail::dgrad_recasts_weight(c.w)) {
      q_keep = {Tensor(), clone(q.scale_inv), clone(q.scale)};
      w_ref = c.w.detach();
    } else {
      q_keep = {q.data, clone(q.scale_inv), Tensor()};
    }
  }
  // The output gradient is cast in backward with the meta's scale then, recording its amax (in
  // a recompute's backward too: the one backward through this GEMM), as on the CPU.
  if (meta != nullptr) s.meta = {meta->scale, meta->scale_inv, meta->amax_history.select(0, 0)};
  TensorList inputs{c.x, c.w};
  if (c.op != Fp8GemmOp::Matmul) inputs.push_back(c.bias);
  auto node = std::make_shared<Fp8CudaGemmNode>(std::move(s), inputs, std::move(p_keep), std::move(q_keep), w_ref);
  y = y.detach();
  y.set_history(node, 0);
  return {y};
}

void update(Fp8Meta& m, const DelayedScaling& recipe) { update_delayed_scaling(m, recipe); }

// Loaded with libmixtape_amp (a shared library: the initializer always runs).
const bool kRegistered = detail::register_fp8_cuda_backend({run, update});

}  // namespace
}  // namespace mixtape::amp::cuda
