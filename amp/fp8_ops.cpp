// amp/fp8_ops.cpp — linear, 2-D matmul and conv2d inside Fp8Autocast: the three GEMMs of a
// layer on FP8 operands (amp/fp8_gemm.h), recorded as one tape node, Fp8GemmBackward.
//
// Operands in their stored layouts: P (M, K) is the input (linear's x with its leading dims
// flattened, matmul's a, conv2d's im2col matrix: one row per output pixel, one column per
// (channel, kernel row, kernel column)); Q is linear's weight w (N, K) and conv2d's w viewed as
// (O, C kH kW), both used transposed, or matmul's b (K, N).
//   forward   C  = P @ op(Q)                  reduction over K
//   dgrad     dP = G @ op(Q)^T                reduction over N   (G: the output gradient, (M, N))
//   wgrad     dQ = G^T @ P (linear, conv2d) or P^T @ G (matmul)  reduction over M
// conv2d's dP goes back to the image by col2im (the sum over the windows each pixel is in).
// Per-tensor recipes cast P, Q once in forward (P saved in FP8 for backward: the transposes are
// layout flags) and G once in backward; conv2d casts its input image, not the im2col matrix
// (the same values: im2col copies and pads with zeros), and saves that, one byte per pixel.
// MXFP8 blocks run along each GEMM's reduction dim, so each tensor is cast twice, once per dim,
// as TE's MXFP8 keeps a rowwise and a columnwise copy: P along K (forward) and M (wgrad), Q along
// K (forward) and N (dgrad), G along N and M. MX operands are widened with their block scales
// applied (mx_widen), so the BF16 GEMM/conv kernels run them with alpha 1. conv2d orders K
// channels-last: the image is blocked along the 32 channels of each pixel (shared by every window
// that reads it), the weight along C; its dgrad blocks G and the weight along O; both on BF16
// autocast's conv kernels (mx_conv_forward / mx_conv_backward). Its wgrad (reduction over
// N OH OW, whose blocks differ per kernel tap) stays on im2col + GEMM, from the kept input.
// conv2d's kernel route (BF16 output; GemmSetup::kernel_route), per-tensor recipes: no im2col:
// the image, weight and G are cast with their BF16 widening and run on BF16 autocast's own conv
// kernels (ops/conv_scaled.h), the dequantising factor applied once to each FP32 sum. Per-tensor
// linear/matmul operands are cast the same way, from their own dtype.
// The weight for the dgrad: a parameter being trained (a leaf that requires grad, which its
// module keeps alive anyway; detail::dgrad_recasts_weight) is not saved in FP8. The node keeps a
// reference to it, its version and the scale of its forward cast, and the backward casts it
// again: the same bytes, since a cast depends only on the values and the scale (no amax is
// recorded twice). This is what PyTorch's linear does with its weight, and it spares one byte per
// parameter (two for MX's widened copy) between forward and backward. An in-place change to the
// weight in between is refused, as for any saved tensor. Any other Q (matmul's b, a computed
// weight, a tensor without grad) keeps its FP8 copy, which is smaller than the tensor.
// Bias: added to the f32 result before the one rounding to the output dtype; its gradient is
// G summed over rows, from the unquantized G (as TE's bgrad). The casts are straight-through:
// backward treats quantize as the identity, so dP and dQ are the exact gradients of the
// quantized product, with G quantized too.
#include <algorithm>
#include <bit>
#include <sstream>
#include <vector>

#include "amp/fp8_autocast.h"
#include "amp/fp8_cuda_route.h"
#include "amp/fp8_gemm.h"
#include "amp/fp8_im2col.h"
#include "amp/mx_block.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/saved_tensor.h"
#include "core/convert.h"
#include "core/error.h"
#include "core/numerics_check.h"
#include "core/trace.h"
#include "ops/cast.h"
#include "ops/conv_args.h"
#include "ops/conv_scaled.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/loops.h"
#include "ops/creation.h"
#include "ops/linear_args.h"
#include "ops/shape_ops.h"

namespace mixtape::amp {

namespace {

using autograd::Edge;
using autograd::Node;

// A layer's delayed-scaling state as a cast uses it: its meta and, in a checkpoint's recompute,
// the scales its forward cast with (3, by role); then no amax is recorded (the forward did).
struct MetaUse {
  Fp8Meta* meta = nullptr;
  const float* forward_scales = nullptr;
};

// Casts one role's tensor (f32; MX: any CPU float dtype) as the recipe says. `axis`: the dim the
// GEMM reduces over (MX blocks run along it; the tensor is then 2-D). use.meta: the layer's
// delayed-scaling state, or nullptr (then a delayed recipe scales from the tensor's own amax, as
// current scaling does: a matmul of two activations belongs to no module whose state could carry
// scales from step to step).
// A per-tensor recipe's cast of t by quantize(t, dtype, scale, amax_out): the scale by the rules above.
template <typename Quantize>
Fp8Operand per_tensor_cast(const Tensor& t, Fp8Role role, const Fp8Recipe& recipe, MetaUse use, Quantize&& quantize) {
  const DType dt = fp8_dtype_for(recipe_format(recipe), role);
  if (use.forward_scales != nullptr) return quantize(t, dt, use.forward_scales[static_cast<int>(role)], nullptr);
  if (use.meta != nullptr) {
    float amax = 0.0f;
    Fp8Operand q = quantize(t, dt, use.meta->scale_of(role), &amax);
    use.meta->record_amax(role, amax);  // read while casting, used from the next update on
    return q;
  }
  const float amax = amax_of(t);
  const bool pow2 = std::visit(
      [](const auto& r) {
        if constexpr (std::is_same_v<std::decay_t<decltype(r)>, MXFP8BlockScaling>) return false;
        else return r.power_of_2_scales;
      },
      recipe);
  return quantize(t, dt, scale_from_amax(amax, fp8_max(dt), 0.0f, pow2, 1.0f), nullptr);
}

Fp8Operand cast_role(const Tensor& t32, Fp8Role role, int64_t axis, const Fp8Recipe& recipe, MetaUse use,
                     const char* who) {
  if (const auto* mx = std::get_if<MXFP8BlockScaling>(&recipe))
    return mx_quantize(t32, axis, fp8_dtype_for(recipe_format(recipe), role), *mx, who);
  return per_tensor_cast(t32, role, recipe, use, [](const Tensor& t, DType dt, float scale, float* amax) {
    return quantize_per_tensor(t, dt, scale, amax);
  });
}

// conv2d's kernel route: a per-tensor recipe's cast of t (f32, bf16 or f16, any shape), with its
// BF16 widening written in the same pass (the operand of the BF16 conv kernels).
// keep_data false: the FP8 tensor itself is not written (an operand backward does not save).
Fp8Operand cast_role_widened(const Tensor& t, Fp8Role role, const Fp8Recipe& recipe, MetaUse use,
                             bool keep_data = true) {
  return per_tensor_cast(t, role, recipe, use, [keep_data](const Tensor& x, DType dt, float scale, float* amax) {
    return quantize_per_tensor_widened(x, dt, scale, amax, keep_data);
  });
}

Tensor as_f32(const Tensor& t) { return contiguous(cpu::cast_to(t.detach(), DType::Float32)); }
Tensor as_f32_2d(const Tensor& t, int64_t rows, int64_t cols) { return as_f32(t).reshape({rows, cols}); }

Fp8Operand without_widening(Fp8Operand op) {
  op.widened = Tensor();
  return op;
}

bool is_mx(const Fp8Recipe& r) { return std::holds_alternative<MXFP8BlockScaling>(r); }

enum class GemmKind { Linear, Matmul, Conv2d };  // in detail::Fp8GemmOp's order
const char* kind_name(GemmKind k) { return k == GemmKind::Linear ? "linear" : k == GemmKind::Matmul ? "matmul" : "conv2d"; }

// The per-tensor operand P of a conv2d whose FP8 input image is `image`: the im2col matrix
// written straight in BF16 (exact), scaled by the image's scale_inv: transposed by the AVX-512
// im2col where it applies (the same values; fp8_gemm takes either layout), else row by row.
Fp8Operand im2col_operand(const Fp8Operand& image, const ConvGeom& g) {
  Fp8Operand p = image;
  p.widened = im2col_fp8_to_bf16_transposed(image.data, g);
  p.widened_transposed = p.widened.defined();
  if (!p.widened_transposed) p.widened = im2col_fp8_to_bf16(image.data, g);
  return p;
}

struct GemmSetup {
  GemmKind kind;
  Fp8Recipe recipe;
  std::optional<Fp8Meta> meta;  // handles sharing the layer's state tensors
  int64_t m = 0, k = 0, n = 0;
  ConvGeom geom{};  // conv2d only
  // conv2d on BF16 autocast's conv kernels (ops/conv_scaled.h) rather than im2col + GEMM: a BF16
  // output and, where the input needs a gradient, a BF16 input (the kernels write BF16). Per-tensor
  // saved: the FP8 input image (p_) and weight (q_), 4-D; MXFP8: see mx_conv_forward.
  bool kernel_route = false;
  bool q_transposed() const { return kind != GemmKind::Matmul; }  // Q stored (N, K)
};

class Fp8GemmNode final : public Node {
 public:
  // p_bwd: P cast for the wgrad (conv2d, per-tensor: the FP8 input image); q_bwd: Q cast for
  // the dgrad, or w_ref: Q itself, cast again in backward with w_scale (per-tensor recipes: its
  // forward cast's scale); x_keep: conv2d under MXFP8, the input, whose im2col the wgrad casts
  // along M.
  Fp8GemmNode(GemmSetup s, const TensorList& inputs, Fp8Operand p_bwd, Fp8Operand q_bwd, Tensor x_keep,
              Tensor w_ref = Tensor(), float w_scale = 1.0f)
      : Node(next_seq_nr()),
        s_(std::move(s)),
        p_(std::move(p_bwd)),
        q_(std::move(q_bwd)),
        x_keep_(std::move(x_keep)),
        x_keep_version_(x_keep_.defined() ? x_keep_.version() : 0),
        w_ref_(std::move(w_ref)),
        w_ref_version_(w_ref_.defined() ? w_ref_.version() : 0),
        w_scale_(w_scale) {
    detail::fp8_node_edges(inputs, next_edges_, meta_);
  }

  // The backward's GEMMs run no kernel through run_kernel: the NaN locator checks the node here,
  // as one op whose inputs are the output gradient and what the node kept (detail::fp8_backward_checked).
  TensorList apply(TensorList grads) override {
    const Tensor g = grads.empty() ? Tensor() : grads[0];
    return detail::fp8_backward_checked(static_cast<detail::Fp8GemmOp>(s_.kind),
                                        {g, p_.data, q_.data.defined() ? q_.data : w_ref_, x_keep_},
                                        [&] { return compute(grads); });
  }

  std::string name() const override { return detail::fp8_node_name(static_cast<detail::Fp8GemmOp>(s_.kind)); }

 private:
  // Q for the dgrad: the saved FP8 copy, or the weight cast again exactly as the forward cast it
  // (the same function on the same values with the same scale), in the layout the dgrad reads:
  // widened (the BF16 kernels' operand), 4-D on the conv kernel route, else 2-D as stored.
  Fp8Operand dgrad_weight(const char* who) const {
    if (!w_ref_.defined()) return q_;
    detail::check_kept_unchanged(w_ref_, w_ref_version_, "input 1 (the weight)", who);
    const DType dt = fp8_dtype_for(recipe_format(s_.recipe), Fp8Role::Weight);
    const Tensor w = w_ref_.detach();
    const IntList q2 = s_.q_transposed() ? IntList{s_.n, s_.k} : IntList{s_.k, s_.n};
    if (const auto* mx = std::get_if<MXFP8BlockScaling>(&s_.recipe)) {
      if (s_.kind == GemmKind::Conv2d) {  // blocked along O at each (c, kh, kw), as (O, C kH kW)
        Fp8Operand q = mx_quantize_widened(w, 0, dt, *mx, who, false);
        q.widened = q.widened.reshape({s_.n, s_.k});
        return q;
      }
      return cast_role(contiguous(w).reshape(q2), Fp8Role::Weight, s_.q_transposed() ? 0 : 1, s_.recipe, {}, who);
    }
    if (s_.kernel_route) return quantize_per_tensor_widened(w, dt, w_scale_, nullptr, false);
    return quantize_per_tensor_widened(contiguous(w).reshape(q2), dt, w_scale_, nullptr, false);
  }

  // conv2d's backward on the BF16 conv kernels: G (N, O, OH, OW) cast once (per tensor) with its
  // widening, dx = bf16(alpha * sum) on conv2d.dgrad's entry, dW = f32(sums) * alpha on conv2d.wgrad's,
  // the bias gradient from the unquantized G.
  TensorList conv_kernel_backward(const Tensor& grad, bool need_p, bool need_q, bool need_b, TensorList out,
                                  const char* who) {
    const ConvGeom& g = s_.geom;
    const MetaUse meta{s_.meta ? &*s_.meta : nullptr};
    const Tensor gy = contiguous(grad.detach());
    Fp8Operand gq;
    Tensor gb;  // the bias gradient, summed in the cast's pass where both are wanted
    if ((need_p || need_q) && need_b && gy.dtype() != DType::Float16) {
      gq = per_tensor_cast(gy, Fp8Role::GradOutput, s_.recipe, meta, [&gb](const Tensor& x, DType dt, float scale, float* amax) {
        return quantize_per_tensor_widened_channel_sums(x, dt, scale, amax, &gb);
      });
    } else if (need_p || need_q) {
      gq = cast_role_widened(gy, Fp8Role::GradOutput, s_.recipe, meta, false);
    }
    if (need_p) {
      const Fp8Operand q = dgrad_weight(who);
      const Tensor qw = q.widened.defined() ? q.widened : widen_fp8(q.data);
      const Tensor dx = conv2d_input_grad_bf16_scaled(gq.widened, qw, g, gq.scale_inv * q.scale_inv);
      out[0] = cpu::cast_to(dx.reshape(meta_[0].sizes), meta_[0].dtype);
    }
    if (need_q) {
      Tensor dw = conv2d_weight_grad_bf16_sums(widen_fp8(p_.data), gq.widened, g);
      const float post = gq.scale_inv * p_.scale_inv;  // the reference's order: G^T @ P
      if (post != 1.0f) {
        float* d = dw.data_ptr<float>();
        for (int64_t i = 0; i < dw.numel(); ++i) d[i] *= post;
      }
      out[1] = cpu::cast_to(dw.reshape(meta_[1].sizes), meta_[1].dtype);
    }
    if (need_b) out[2] = cpu::cast_to(gb.defined() ? gb : channel_sums(gy, g), meta_[2].dtype);
    return out;
  }

  // conv2d under MXFP8. dgrad: G blocked along its channels O at each pixel (the reduction dim),
  // the weight along O at each (c, kh, kw) (q_, saved widened as (O, C kH kW)); on the BF16
  // input-gradient kernels (alpha 1) where the kernel route holds, else G @ W + col2im. wgrad (the
  // reduction over N OH OW): the im2col route, G and the input's im2col matrix blocked along M.
  TensorList mx_conv_backward(const Tensor& grad, bool need_p, bool need_q, bool need_b, TensorList out,
                              const char* who) {
    const ConvGeom& g = s_.geom;
    const auto& mx = std::get<MXFP8BlockScaling>(s_.recipe);
    const DType eg = fp8_dtype_for(recipe_format(s_.recipe), Fp8Role::GradOutput);
    const Tensor gy = contiguous(grad.detach());
    // The wgrad's input matrix transposed, (K, M), where the AVX-512 im2col takes the geometry and
    // the GEMM's sums do not depend on its operands' layouts: blocks along M are then contiguous
    // runs (the same blocks, values and codes as the row matrix's blocks along dim 0), and so are
    // G's, seen as (O, M); the GEMM reads both transposed, the same bits.
    Tensor xt;
    Tensor xk;
    if (need_q) {
      detail::check_kept_unchanged(x_keep_, x_keep_version_, "input 0", who);  // x_keep_ shares the caller's input
      xk = contiguous(x_keep_);
      if (xk.dtype() != DType::BFloat16) xk = as_f32(xk);
      if (fp8_gemm_layout_free(s_.n, s_.k)) xt = im2col_transposed(xk, g);
    }
    Tensor gm2;  // G as (M, N), the channels last, in its own dtype: the im2col route's layout
    if ((need_p && !s_.kernel_route) || (need_q && !xt.defined()))
      gm2 = contiguous(gy.permute({0, 2, 3, 1})).reshape({s_.m, s_.n});
    if (need_p) {
      const Fp8Operand q = dgrad_weight(who);
      Tensor dx;
      if (s_.kernel_route) {
        const Tensor gw = mx_quantize_widened(gy, 1, eg, mx, who, false).widened;
        dx = conv2d_input_grad_bf16_scaled(gw, q.widened.reshape(meta_[1].sizes), g, 1.0f);
      } else {
        dx = col2im(fp8_gemm(cast_role(gm2, Fp8Role::GradOutput, 1, s_.recipe, {}, who), false, q, false, who), g);
      }
      out[0] = cpu::cast_to(dx.reshape(meta_[0].sizes), meta_[0].dtype);
    }
    if (need_q && xt.defined()) {
      // dW = G^T P as (G^T)(P^T)^T: both operands blocked along their rows' M values, contiguous;
      // their codes are not kept (the GEMM reads the widened values alone).
      const Tensor gt = channels_major(gy);  // (O, N OH OW)
      const Fp8Operand gq = mx_quantize_widened(gt, 1, eg, mx, who, false);
      const Fp8Operand pq = mx_quantize_widened(xt, 1, fp8_dtype_for(recipe_format(s_.recipe), Fp8Role::Input), mx,
                                                who, false);
      out[1] = cpu::cast_to(fp8_gemm(gq, false, pq, true, who).reshape(meta_[1].sizes), meta_[1].dtype);
    } else if (need_q) {
      const Fp8Operand gm = cast_role(gm2, Fp8Role::GradOutput, 0, s_.recipe, {}, who);
      const Fp8Operand p = cast_role(xk.dtype() == DType::BFloat16 ? im2col_bf16(xk, g) : im2col_f32(xk, g),
                                     Fp8Role::Input, 0, s_.recipe, {}, who);
      out[1] = cpu::cast_to(fp8_gemm(gm, true, p, false, who).reshape(meta_[1].sizes), meta_[1].dtype);
    }
    if (need_b) out[2] = cpu::cast_to(channel_sums(gy, g), meta_[2].dtype);
    return out;
  }

  // sum over n, h, w of G (N, O, OH, OW) per channel, in FP32: each channel on one thread, 16
  // partial sums over the pixels (l mod 16) added in order at the end: the same bits at every
  // thread count, and those of quantize_per_tensor_widened_channel_sums, which sums G in its cast's
  // pass where the kernel route casts it (every case but a bias-only backward and f16's).
  static Tensor channel_sums(const Tensor& gy, const ConvGeom& g) {
    Tensor gb = Tensor::empty({g.O}, TensorOptions(DType::Float32));
    float* o = gb.data_ptr<float>();
    const int64_t L = g.L(), O = g.O, N = g.N;
    const Tensor f = gy.dtype() == DType::BFloat16 ? gy : contiguous(cpu::cast_to(gy, DType::Float32));
    const bool bf16 = f.dtype() == DType::BFloat16;
#pragma omp parallel for if (N * O * L >= cpu::kParallelGrain) schedule(static)
    for (int64_t c = 0; c < O; ++c) {
      float lanes[16] = {};
      for (int64_t n = 0; n < N; ++n) {
        const int64_t base = (n * O + c) * L;
        int64_t l = 0;
        if (bf16) {
          const uint16_t* p = reinterpret_cast<const uint16_t*>(f.data_ptr()) + base;
          for (; l + 16 <= L; l += 16)
            for (int j = 0; j < 16; ++j) lanes[j] += std::bit_cast<float>(static_cast<uint32_t>(p[l + j]) << 16);
          for (; l < L; ++l) lanes[l % 16] += std::bit_cast<float>(static_cast<uint32_t>(p[l]) << 16);
        } else {
          const float* p = f.data_ptr<float>() + base;
          for (; l + 16 <= L; l += 16)
            for (int j = 0; j < 16; ++j) lanes[j] += p[l + j];
          for (; l < L; ++l) lanes[l % 16] += p[l];
        }
      }
      float t = 0.0f;
      for (float v : lanes) t += v;
      o[c] = t;
    }
    return gb;
  }

  TensorList compute(const TensorList& grads) {
    const std::string who_s = std::string(kind_name(s_.kind)) + " (Fp8Autocast backward)";
    const char* who = who_s.c_str();
    detail::check_fp8_backward(who, released_);
    TensorList out(next_edges_.size());
    if (grads.empty() || !grads[0].defined()) return out;
    const bool need_p = next_edges_[0].valid(), need_q = next_edges_[1].valid();
    const bool need_b = next_edges_.size() > 2 && next_edges_[2].valid();
    if (s_.kind == GemmKind::Conv2d && is_mx(s_.recipe))
      return mx_conv_backward(grads[0], need_p, need_q, need_b, std::move(out), who);
    if (s_.kernel_route) return conv_kernel_backward(grads[0], need_p, need_q, need_b, std::move(out), who);
    // G as (M, N): conv2d's (N, O, OH, OW) gradient with the channels last.
    const Tensor g32 = s_.kind == GemmKind::Conv2d ? as_f32_2d(grads[0].detach().permute({0, 2, 3, 1}), s_.m, s_.n)
                                                   : as_f32_2d(grads[0], s_.m, s_.n);
    const MetaUse meta{s_.meta ? &*s_.meta : nullptr};
    const bool mx = is_mx(s_.recipe);
    Fp8Operand g_n, g_m;  // G cast for the dgrad (reduction over N) and the wgrad (over M)
    if (!mx) {
      if (need_p || need_q) g_n = g_m = cast_role(g32, Fp8Role::GradOutput, -1, s_.recipe, meta, who);
    } else {
      if (need_p) g_n = cast_role(g32, Fp8Role::GradOutput, 1, s_.recipe, meta, who);
      if (need_q) g_m = cast_role(g32, Fp8Role::GradOutput, 0, s_.recipe, meta, who);
    }
    if (need_p) {
      // dP (M, K) = G (M, N) @ op(Q)^T: a transposed Q is stored (N, K) already.
      Tensor dp = fp8_gemm(g_n, false, dgrad_weight(who), !s_.q_transposed(), who);
      if (s_.kind == GemmKind::Conv2d) dp = col2im(dp, s_.geom);
      out[0] = cpu::cast_to(dp.reshape(meta_[0].sizes), meta_[0].dtype);
    }
    if (need_q) {
      Tensor dq;
      if (s_.kind == GemmKind::Matmul) {
        dq = fp8_gemm(p_, true, g_m, false, who);  // dB (K, N) = A^T @ G
      } else {
        const Fp8Operand p = s_.kind == GemmKind::Conv2d ? im2col_operand(p_, s_.geom) : p_;
        dq = fp8_gemm(g_m, true, p, false, who);  // dW (N, K) = G^T @ P
      }
      out[1] = cpu::cast_to(dq.reshape(meta_[1].sizes), meta_[1].dtype);
    }
    if (need_b) {
      Tensor gb = zeros({s_.n});
      float* o = gb.data_ptr<float>();
      const float* g = g32.data_ptr<float>();
      const int64_t m = s_.m, n = s_.n;
      // Each column is summed in row order (the same bits at every thread count); threads take
      // blocks of 64 columns and walk the rows, so the reads stay sequential.
      const int64_t blocks = (n + 63) / 64;
#pragma omp parallel for if (m * n >= cpu::kParallelGrain && blocks > 1) schedule(static)
      for (int64_t jb = 0; jb < blocks; ++jb) {
        const int64_t j0 = jb * 64, j1 = std::min(n, j0 + 64);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = j0; j < j1; ++j) o[j] += g[i * n + j];
      }
      out[2] = cpu::cast_to(gb, meta_[2].dtype);
    }
    return out;
  }

 public:
  std::string describe() const override {
    return detail::describe_fp8_node(static_cast<detail::Fp8GemmOp>(s_.kind), recipe_string(s_.recipe), false, p_.data,
                                     q_.data, x_keep_, w_ref_);
  }
  void release_saved() override {
    p_ = {};
    q_ = {};
    x_keep_ = {};
    w_ref_ = {};
    released_ = true;
  }

 private:
  GemmSetup s_;
  Fp8Operand p_, q_;
  Tensor x_keep_;
  uint32_t x_keep_version_ = 0;  // x_keep_'s version when saved
  Tensor w_ref_;                  // Q by reference, cast again for the dgrad (dgrad_weight)
  uint32_t w_ref_version_ = 0;
  float w_scale_ = 1.0f;          // per-tensor: the scale the forward cast Q with
  std::vector<autograd::TensorMeta> meta_;
  bool released_ = false;
};

bool floating_on(const Tensor& t, DeviceType device_type) {
  return t.defined() && t.device().type() == device_type &&
         (t.dtype() == DType::Float32 || t.dtype() == DType::BFloat16 || t.dtype() == DType::Float16);
}

void trace_fp8(const GemmSetup& s, const Fp8Operand& p, const Fp8Operand& q) {
  if (!trace_enabled(TraceKind::Amp)) return;
  std::ostringstream os;
  os << "fp8 " << kind_name(s.kind) << ' ' << recipe_string(s.recipe) << ": M=" << s.m << " K=" << s.k
     << " N=" << s.n << ", " << fp8_role_name(Fp8Role::Input) << "->"
     << dtype_short(fp8_dtype_for(recipe_format(s.recipe), Fp8Role::Input));
  if (p.axis < 0) os << " (scale_inv " << p.scale_inv << ')';
  os << ", " << fp8_role_name(Fp8Role::Weight) << "->"
     << dtype_short(fp8_dtype_for(recipe_format(s.recipe), Fp8Role::Weight));
  if (s.kind == GemmKind::Conv2d && p.axis >= 0) os << " (blocks along the channels)";
  if (q.axis < 0) os << " (scale_inv " << q.scale_inv << ')';
  trace_line(TraceKind::Amp, os.str());
}

// linear's and matmul's output: C (M, N) = P @ op(Q), scaled, plus the bias, in the output
// dtype, shaped as x with its last dim N.
Tensor linear_output(const Fp8Operand& p, const Fp8Operand& q, const GemmSetup& s, const Tensor& bias,
                     const Tensor& x, DType out_dtype, const char* who) {
  Tensor c = fp8_gemm(p, false, q, s.q_transposed(), who, nullptr,
                      s.kind == GemmKind::Linear ? "linear.fwd" : "matmul.fwd");  // (M, N)
  if (bias.defined()) {
    const Tensor b32 = as_f32(bias);
    float* cp = c.data_ptr<float>();
    const float* bp = b32.data_ptr<float>();
    const int64_t m = s.m, n = s.n;
#pragma omp parallel for if (m * n >= cpu::kParallelGrain) schedule(static)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) cp[i * n + j] += bp[j];
  }
  IntList out_shape = x.sizes();
  out_shape.back() = s.n;
  return cpu::cast_to(c, out_dtype).reshape(out_shape);
}

// conv2d's output (N, O, OH, OW) from C (N OH OW, O) = P @ W^T in one pass: each value scaled by
// the GEMM's factor, plus its channel's bias, moved to NCHW and rounded once to the output dtype
// (the same operations in the same order as scaling C, adding the bias and casting, each apart).
Tensor conv_output(const Fp8Operand& p, const Fp8Operand& q, const Tensor& bias, const ConvGeom& g, DType out_dtype,
                   const char* who) {
  float post = 1.0f;
  const Tensor c = fp8_gemm(p, false, q, true, who, &post);
  Tensor b32;
  if (bias.defined()) b32 = as_f32(bias);
  const float* cp = c.data_ptr<float>();
  const float* bp = bias.defined() ? b32.data_ptr<float>() : nullptr;
  Tensor out = Tensor::empty({g.N, g.O, g.OH, g.OW}, TensorOptions(out_dtype));
  const int64_t L = g.L(), O = g.O;
  const bool bf16 = out_dtype == DType::BFloat16;
  MT_CHECK(bf16 || out_dtype == DType::Float32, who, ": the FP8 GEMM's output is BFloat16 or Float32, got ",
           dtype_name(out_dtype));
#pragma omp parallel if (g.N * O * L >= cpu::kParallelGrain)
  {
    std::vector<float> row(static_cast<size_t>(L));
#pragma omp for collapse(2) schedule(static)
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t o = 0; o < O; ++o) {
        const float* src = cp + n * L * O + o;
        float* dst = bf16 ? row.data() : out.data_ptr<float>() + (n * O + o) * L;
        for (int64_t l = 0; l < L; ++l) {
          float v = src[l * O];
          if (post != 1.0f) v *= post;
          if (bp != nullptr) v += bp[o];
          dst[l] = v;
        }
        if (bf16) convert_float_to_bfloat16(row.data(), out.data_ptr<BFloat16>() + (n * O + o) * L, static_cast<size_t>(L));
      }
  }
  return out;
}

// What a per-tensor node keeps of Q for the dgrad (see the file header): a parameter by reference with
// its forward cast's scale, anything else as its FP8 copy `q` (undefined when x needs no gradient).
struct WeightForDgrad {
  Fp8Operand copy;
  Tensor ref;
  float scale = 1.0f;
};
WeightForDgrad weight_for_dgrad(const Tensor& x, const Tensor& w, Fp8Operand q) {
  if (!x.requires_grad()) return {};
  if (!detail::dgrad_recasts_weight(w)) return {std::move(q), Tensor(), 1.0f};
  return {Fp8Operand{}, w.detach(), q.scale};
}

// conv2d under MXFP8, forward: the image blocked along its channels at each pixel (32
// consecutive channels of one input pixel, which every window reading that pixel shares: the
// image is quantized and widened once), the weight along C at each (o, kh, kw); both widened
// with their block scales applied, on BF16 autocast's conv kernels with alpha 1 (a BF16 output),
// or im2col of the widened image + the BF16 GEMM (a Float32 output: the same products, summed
// in FP32). Saved: the weight blocked along O (the dgrad's reduction dim), widened, and the
// input itself, whose im2col the wgrad blocks along M.
TensorList mx_conv_forward(GemmSetup s, const Tensor& x, const Tensor& w, const Tensor& bias, bool grad,
                           const detail::Fp8RegionSettings& region, const char* who) {
  const auto& mx = std::get<MXFP8BlockScaling>(s.recipe);
  const Fp8Format fmt = recipe_format(s.recipe);
  const ConvGeom& g = s.geom;
  const Fp8Operand image = mx_quantize_widened(x, 1, fp8_dtype_for(fmt, Fp8Role::Input), mx, who, false);
  const Fp8Operand wq = mx_quantize_widened(w, 1, fp8_dtype_for(fmt, Fp8Role::Weight), mx, who, false);
  trace_fp8(s, image, wq);
  Tensor out;
  if (region.output_dtype == DType::BFloat16) {
    out = conv2d_bf16_scaled(image.widened, wq.widened, bias.defined() ? as_f32(bias) : Tensor(), g, 1.0f);
  } else {
    Fp8Operand p, q;  // alpha-1 operands: the widened values are the MX values
    p.widened = cpu::cast_to(im2col_f32(as_f32(image.widened), g), DType::BFloat16);  // exact
    q.widened = wq.widened.reshape({s.n, s.k});
    out = conv_output(p, q, bias, g, region.output_dtype, who);
  }
  if (!grad) return {out};
  Fp8Operand q_bwd;
  if (x.requires_grad() && !detail::dgrad_recasts_weight(w)) {  // else cast again in backward (Fp8GemmNode::dgrad_weight)
    q_bwd = mx_quantize_widened(w, 0, fp8_dtype_for(fmt, Fp8Role::Weight), mx, who, true);
    q_bwd.widened = q_bwd.widened.reshape({s.n, s.k});
  }
  const Tensor x_keep = w.requires_grad() ? x.detach() : Tensor();
  const Tensor w_ref = x.requires_grad() && detail::dgrad_recasts_weight(w) ? w.detach() : Tensor();
  auto node = std::make_shared<Fp8GemmNode>(std::move(s), TensorList{x, w, bias}, Fp8Operand{}, std::move(q_bwd),
                                            x_keep, w_ref);
  out = out.detach();
  out.set_history(node, 0);
  return {out};
}

// linear: x (*, K), w (N, K), b (N) or undefined; matmul: x (M, K), w (K, N); conv2d: x (N, C,
// H, W), w (O, C, kH, kW), b (O) or undefined, groups 1, geometry `geom`.
TensorList run_fp8(GemmKind kind, const Tensor& x, const Tensor& w, const Tensor& bias, const ConvGeom& geom,
                   const detail::Fp8RegionSettings& region) {
  const std::string who_s = std::string(kind_name(kind)) + " (Fp8Autocast)";
  const char* who = who_s.c_str();
  GemmSetup s{kind, region.recipe, std::nullopt};
  const bool mx = is_mx(s.recipe);
  if (kind == GemmKind::Conv2d) s.geom = geom;
  const detail::Fp8GemmDims dims = detail::fp8_gemm_dims(static_cast<detail::Fp8GemmOp>(kind), x, w, geom);
  s.m = dims.m;
  s.k = dims.k;
  s.n = dims.n;
  size_t meta_index = 0;  // in region.metas
  if (std::holds_alternative<DelayedScaling>(region.recipe) && kind != GemmKind::Matmul) {
    Fp8Meta* meta = region.metas->find(w);
    MT_CHECK(meta != nullptr, who, ": under ", recipe_string(region.recipe), " the weight ", w.describe(),
             " has no FP8 metadata; make the Fp8Metas from the model that owns it (model.named_parameters())");
    s.meta = *meta;
    meta_index = static_cast<size_t>(meta - region.metas->metas().data());
  }
  MetaUse meta{s.meta ? &*s.meta : nullptr};
  if (meta.meta != nullptr && region.forward_scales) {
    MT_CHECK(region.forward_scales->size() == 3 * region.metas->size(), who, ": the Fp8Metas have ",
             region.metas->size(), " metas in this checkpoint's recompute, ", region.forward_scales->size() / 3,
             " in its forward");
    meta.forward_scales = region.forward_scales->data() + 3 * meta_index;
  }
  // A region opened inside a recompute: its forward updated the scales already, records nothing now.
  if (meta.meta != nullptr && !region.record_amaxes && meta.forward_scales == nullptr)
    meta.forward_scales = meta.meta->scale.data_ptr<float>();
  const bool grad = autograd::GradMode::is_enabled() &&
                    (x.requires_grad() || w.requires_grad() || (bias.defined() && bias.requires_grad()));
  // P for the forward GEMM, and what the wgrad will need of it.
  Fp8Operand p_fwd, p_bwd;
  s.kernel_route = kind == GemmKind::Conv2d && region.output_dtype == DType::BFloat16 &&
                   (!(grad && x.requires_grad()) || x.dtype() == DType::BFloat16);
  if (kind == GemmKind::Conv2d && mx) return mx_conv_forward(std::move(s), x, w, bias, grad, region, who);
  if (s.kernel_route) {
    Fp8Operand image = cast_role_widened(x, Fp8Role::Input, s.recipe, meta);
    Fp8Operand wq = cast_role_widened(w, Fp8Role::Weight, s.recipe, meta);
    trace_fp8(s, image, wq);
    const Tensor b32 = bias.defined() ? as_f32(bias) : Tensor();
    Tensor out = conv2d_bf16_scaled(image.widened, wq.widened, b32, geom, image.scale_inv * wq.scale_inv);
    if (!grad) return {out};
    image.widened = wq.widened = Tensor();  // saved in FP8, widened again in backward
    if (!w.requires_grad()) image = {};
    const WeightForDgrad wd = weight_for_dgrad(x, w, std::move(wq));
    auto node = std::make_shared<Fp8GemmNode>(std::move(s), TensorList{x, w, bias}, std::move(image), wd.copy,
                                              Tensor(), wd.ref, wd.scale);
    out = out.detach();
    out.set_history(node, 0);
    return {out};
  }
  if (kind == GemmKind::Conv2d) {
    const Fp8Operand image = cast_role(as_f32(x), Fp8Role::Input, -1, s.recipe, meta, who);
    p_fwd = im2col_operand(image, geom);
    if (grad && w.requires_grad()) p_bwd = image;  // one byte per pixel; im2col again in backward
  } else if (!mx) {
    // Per tensor: cast from the operand's own dtype with the BF16 widening the GEMM reads, in one
    // pass (no f32 copy); what backward saves is the FP8 tensor alone.
    p_fwd = cast_role_widened(contiguous(x.detach()).reshape({s.m, s.k}), Fp8Role::Input, s.recipe, meta);
    if (grad && w.requires_grad()) p_bwd = without_widening(p_fwd);
  } else {
    // MX: cast from the operand's own dtype with the block-scaled BF16 widening the GEMM reads
    // (mx_quantize); what backward saves is the FP8 tensor and its codes alone.
    const Tensor p2 = contiguous(x.detach()).reshape({s.m, s.k});
    p_fwd = cast_role(p2, Fp8Role::Input, 1, s.recipe, meta, who);
    if (grad && w.requires_grad()) p_bwd = without_widening(cast_role(p2, Fp8Role::Input, 0, s.recipe, {}, who));
  }
  Fp8Operand q_fwd, q_bwd;
  if (!mx) {
    q_fwd = cast_role_widened(contiguous(w.detach()).reshape(s.q_transposed() ? IntList{s.n, s.k} : IntList{s.k, s.n}),
                              Fp8Role::Weight, s.recipe, meta);
    if (grad && x.requires_grad()) q_bwd = without_widening(q_fwd);
  } else {
    const Tensor q2 = contiguous(w.detach()).reshape(s.q_transposed() ? IntList{s.n, s.k} : IntList{s.k, s.n});
    q_fwd = cast_role(q2, Fp8Role::Weight, s.q_transposed() ? 1 : 0, s.recipe, meta, who);
    if (grad && x.requires_grad() && !detail::dgrad_recasts_weight(w))  // else cast again in backward
      q_bwd = without_widening(cast_role(q2, Fp8Role::Weight, s.q_transposed() ? 0 : 1, s.recipe, {}, who));
  }
  trace_fp8(s, p_fwd, q_fwd);
  Tensor out;
  if (kind == GemmKind::Conv2d) {
    out = conv_output(p_fwd, q_fwd, bias, geom, region.output_dtype, who);
  } else {
    out = linear_output(p_fwd, q_fwd, s, bias, x, region.output_dtype, who);
  }
  if (!grad) return {out};
  TensorList inputs{x, w};
  if (kind != GemmKind::Matmul) inputs.push_back(bias);
  const WeightForDgrad wd = weight_for_dgrad(x, w, std::move(q_bwd));
  auto node = std::make_shared<Fp8GemmNode>(std::move(s), inputs, std::move(p_bwd), wd.copy, Tensor(), wd.ref, wd.scale);
  out = out.detach();
  out.set_history(node, 0);
  return {out};
}

}  // namespace

namespace detail {

Fp8GemmDims fp8_gemm_dims(Fp8GemmOp op, const Tensor& x, const Tensor& w, const ConvGeom& geom) {
  if (op == Fp8GemmOp::Conv2d) return {geom.N * geom.L(), geom.K(), geom.O};
  Fp8GemmDims d{1, x.size(-1), op == Fp8GemmOp::Linear ? w.size(0) : w.size(1)};
  for (int64_t i = 0; i + 1 < x.dim(); ++i) d.m *= x.size(i);
  return d;
}

void fp8_node_edges(const TensorList& inputs, std::vector<autograd::Edge>& edges,
                    std::vector<autograd::TensorMeta>& metas) {
  for (const Tensor& t : inputs) {
    edges.push_back(t.defined() && t.requires_grad() ? autograd::gradient_edge(t) : autograd::Edge{});
    metas.push_back(t.defined() ? autograd::TensorMeta::of(t) : autograd::TensorMeta{});
  }
}

const char* fp8_node_name(Fp8GemmOp op) {
  return op == Fp8GemmOp::Linear ? "Fp8LinearBackward" : op == Fp8GemmOp::Matmul ? "Fp8MatmulBackward"
                                                                                  : "Fp8Conv2dBackward";
}

std::string describe_fp8_node(Fp8GemmOp op, const std::string& recipe, bool cuda, const Tensor& p, const Tensor& q,
                              const Tensor& x_keep, const Tensor& w_ref) {
  std::ostringstream os;
  os << fp8_node_name(op) << "  (" << recipe << (cuda ? ", cuda" : "") << "; saved: "
     << (p.defined() ? p.describe() : "-") << ", " << (q.defined() ? q.describe() : "-");
  if (x_keep.defined()) os << ", " << x_keep.describe();
  if (w_ref.defined()) os << "; the weight cast again from " << w_ref.describe();
  os << ')';
  return os.str();
}

void check_kept_unchanged(const Tensor& t, uint32_t saved_version, const char* which, const char* who) {
  if (t.version() == saved_version) return;
  MT_ERROR(autograd::modified_in_place_message(std::string(which) + " of " + who, t.describe(), t.version(),
                                               saved_version));
}

void check_fp8_backward(const char* who, bool released) {
  MT_CHECK(!released, who, ": trying to backward through the FP8 GEMM a second time; pass retain_graph=true "
           "to the first backward");
  MT_CHECK(!autograd::GradMode::is_enabled(), who, ": the FP8 GEMM's backward is not differentiable "
           "(create_graph / double backward); run that part outside Fp8Autocast");
}

std::optional<TensorList> fp8_dispatch(const OpSchema& op, OpCall& call) {
  const Fp8RegionSettings* region = fp8_region();
  if (region == nullptr) return std::nullopt;
  GemmKind kind;
  if (op.name == "linear") kind = GemmKind::Linear;
  else if (op.name == "matmul") kind = GemmKind::Matmul;
  else if (op.name == "conv2d") kind = GemmKind::Conv2d;
  else return std::nullopt;
  const Tensor& x = call.inputs[0];
  const Tensor& w = call.inputs[1];
  const Tensor bias = kind != GemmKind::Matmul && call.inputs.size() > 2 ? call.inputs[2] : Tensor();
  // Only floating operands (f64 is never autocast) on the region's device type, of the shapes the
  // FP8 GEMM takes; the others follow BF16 autocast (traced).
  const DeviceType dt = region->device_type;
  if (!floating_on(x, dt) || !floating_on(w, dt) || (bias.defined() && !floating_on(bias, dt))) return std::nullopt;
  auto bf16_instead = [&](const std::string& why) -> std::optional<TensorList> {
    if (trace_enabled(TraceKind::Amp))
      trace_line(TraceKind::Amp, std::string("fp8 ") + op.name + ": " + why + "; BF16 autocast runs it");
    return std::nullopt;
  };
  ConvGeom geom{};
  switch (kind) {
    case GemmKind::Linear: check_linear("linear", x, w, bias, false); break;
    case GemmKind::Matmul:
      if (x.dim() != 2 || w.dim() != 2) return bf16_instead("batched " + x.describe() + " @ " + w.describe() + " is not an FP8 GEMM");
      MT_CHECK(x.size(1) == w.size(0), "matmul: inner dimensions must match, got ", x.describe(), " @ ", w.describe());
      break;
    case GemmKind::Conv2d: {
      const ConvArgs a = ConvArgs::from(call.attrs);
      if (a.groups != 1) return bf16_instead("groups=" + std::to_string(a.groups) + " is not an FP8 GEMM");
      geom = check_conv_geometry("conv2d", Shown::of(x), Shown::of(w), a.stride, a.padding, a.dilation, a.groups);
      if (bias.defined())
        MT_CHECK(bias.dim() == 1 && bias.size(0) == geom.O, "conv2d: bias must be 1-D with ", geom.O,
                 " elements (weight ", w.describe(), "), got ", bias.describe());
      break;
    }
  }
  ExcludeLayerGuard no_autocast(DispatchLayer::Autocast);
  // The FP8 GEMM runs no kernel through run_kernel: the NaN locator checks it here, as one op,
  // reporting the FP8 dtype its input and weight were cast to.
  const numerics::AutocastScope decided(&op, autocast_state()[dt].dtype, true,
                                        fp8_dtype_for(recipe_format(region->recipe), Fp8Role::Input));
  const numerics::PreKernel pre = numerics::enabled() ? numerics::before_kernel(op, call) : numerics::PreKernel{};
  // CUDA tensors: amp/cuda/fp8_autocast_cuda.cpp (the same operands, K-major, on cuBLASLt).
  TensorList out = dt == DeviceType::CUDA
                       ? fp8_cuda_backend("Fp8Autocast(cuda)")
                             .gemm({static_cast<Fp8GemmOp>(kind), x, w, bias, geom, region})
                       : run_fp8(kind, x, w, bias, geom, *region);
  if (pre.active) numerics::after_kernel(op, call, out, pre);
  return out;
}

}  // namespace detail

}  // namespace mixtape::amp
