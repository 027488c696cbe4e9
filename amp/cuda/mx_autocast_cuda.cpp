// amp/cuda/mx_autocast_cuda.cpp — linear, 2-D matmul and conv2d inside Fp8Autocast(CUDA) under
// MXFP8BlockScaling, emulated through BF16 on any GPU: each operand is cast in MX blocks on the
// device (amp/cuda/mx_block_cuda.h) and widened to BF16 with its block scales applied (exact:
// power-of-two scales), and cuBLAS's BF16 GEMM sums the products in FP32 (ops/cuda/fp8_gemm.h's
// bf16_gemm_f32). cuBLASLt's block-scaled FP8 matmul (Blackwell) is not used.
// The blocks, operands and gradients are the CPU's (amp/fp8_ops.cpp's header and mx paths):
//   linear  x (M, K), W (N, K): forward P, W along K; dgrad G along N, W along N; wgrad G, P along M.
//   matmul  A (M, K), B (K, N): forward A, B along K; dgrad G, B along N; wgrad A, G along M.
//   conv2d  forward: the image along the channels of each pixel, W along C (the BF16 image's
//           im2col + GEMM); dgrad: G along O at each output pixel, W along O (GEMM + col2im);
//           wgrad: G and the input's im2col matrix along N OH OW (the node keeps the input, and
//           refuses it changed in place since the forward, as the CPU does).
// So the FP8 values and scales are the CPU's bits and only the FP32 summation order differs. The
// backward's saved operands are FP8 bytes and E8M0 codes (widened again in backward), or, for
// conv2d's wgrad, the input itself; a parameter being trained is kept by reference and cast again
// for the dgrad (amp/fp8_ops.cpp's rule, detail::dgrad_recasts_weight), any other weight as its bytes. Nothing is read on the host: no scale leaves the device.
#include "amp/cuda/mx_autocast_cuda.h"

#include <sstream>

#include "amp/cuda/fp8_im2col_kernels.h"
#include "amp/cuda/mx_block_cuda.h"
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
#include "ops/cuda/fp8_gemm.h"
#include "ops/cuda/tensor_iter.h"
#include "ops/pointwise.h"
#include "ops/reduce.h"

namespace mixtape::amp::cuda {
namespace {

using detail::Fp8GemmOp;
using ::mixtape::cuda::bf16_gemm_f32;

struct MxSetup {
  Fp8GemmOp op;
  MXFP8BlockScaling recipe;
  int64_t m = 0, k = 0, n = 0;
  ConvGeom geom{};
  DType elem(Fp8Role role) const { return fp8_dtype_for(recipe.fp8_format, role); }
};

Im2colGeom im2col_geom(const ConvGeom& g) {
  return {g.N, g.C, g.H, g.W, g.kH, g.kW, g.sH, g.sW, g.pH, g.pW, g.dH, g.dW, g.OH, g.OW};
}

// The im2col matrix (N OH OW, C kH kW) of an image (N, C, H, W) of any 1/2/4-byte dtype, in its dtype.
Tensor im2col(const Tensor& image, const ConvGeom& g, const char* who) {
  const Tensor x = ::mixtape::cuda::dense(image, who);
  const int64_t M = g.N * g.L(), K = g.K();
  Tensor out = ::mixtape::cuda::empty_on({M, K}, x.dtype(), x.device());
  MT_CUDA_CHECK(launch_im2col(int(x.element_size()), x.data_ptr(), out.data_ptr(), im2col_geom(g), false, K,
                              ::mixtape::cuda::current_stream()),
                who);
  return out;
}

// f32 (M, N) result, plus the bias in f32, rounded once to `out` (the CPU's order).
Tensor with_bias(const Tensor& acc, const Tensor& bias, DType out) {
  return to_dtype(bias.defined() ? add(acc, to_dtype(bias.detach(), DType::Float32)) : acc, out);
}

class MxCudaGemmNode final : public autograd::Node {
 public:
  // p: linear's / matmul's P cast along M (FP8 + codes); q: Q cast along the dgrad's reduction dim
  // (linear, conv2d: N = O; matmul: N), or w_ref: a leaf weight by reference, cast so again in
  // backward; x_keep: conv2d's input, whose im2col the wgrad casts.
  MxCudaGemmNode(MxSetup s, const TensorList& inputs, Fp8Operand p, Fp8Operand q, Tensor x_keep, Tensor w_ref)
      : Node(next_seq_nr()),
        s_(std::move(s)),
        p_(std::move(p)),
        q_(std::move(q)),
        x_keep_(std::move(x_keep)),
        x_keep_version_(x_keep_.defined() ? x_keep_.version() : 0),
        w_ref_(std::move(w_ref)),
        w_ref_version_(w_ref_.defined() ? w_ref_.version() : 0) {
    detail::fp8_node_edges(inputs, next_edges_, meta_);
  }

  std::string name() const override { return detail::fp8_node_name(s_.op); }
  std::string describe() const override {
    return detail::describe_fp8_node(s_.op, recipe_string(Fp8Recipe(s_.recipe)), true, p_.data, q_.data, x_keep_,
                                     w_ref_);
  }
  void release_saved() override {
    p_ = {};
    q_ = {};
    x_keep_ = {};
    w_ref_ = {};
    released_ = true;
  }

  TensorList apply(TensorList grads) override {
    const Tensor g = grads.empty() ? Tensor() : grads[0];
    return detail::fp8_backward_checked(s_.op, {g, p_.data, q_.data.defined() ? q_.data : w_ref_, x_keep_},
                                        [&] { return compute(grads); });
  }

 private:
  TensorList compute(const TensorList& grads) {
    const char* kind = s_.op == Fp8GemmOp::Linear ? "linear" : s_.op == Fp8GemmOp::Matmul ? "matmul" : "conv2d";
    const std::string who_s = std::string(kind) + " (Fp8Autocast backward, cuda)";
    const char* who = who_s.c_str();
    detail::check_fp8_backward(who, released_);
    TensorList out(next_edges_.size());
    if (grads.empty() || !grads[0].defined()) return out;
    ExcludeLayerGuard no_autocast(DispatchLayer::Autocast);  // the backward's own ops run as written
    ::mixtape::cuda::DeviceGuard guard(grads[0].device().index());
    const bool need_p = next_edges_[0].valid(), need_q = next_edges_[1].valid();
    const bool need_b = next_edges_.size() > 2 && next_edges_[2].valid();
    const bool conv = s_.op == Fp8GemmOp::Conv2d;
    const DType eg = s_.elem(Fp8Role::GradOutput);
    // G as (M, N) in its own dtype: conv2d's (N, O, OH, OW) gradient with the channels last.
    const Tensor g = contiguous(conv ? grads[0].detach().permute({0, 2, 3, 1}) : grads[0].detach())
                         .reshape({s_.m, s_.n});
    if (need_p) {
      const Tensor gn = mx_quantize_cuda(g, 1, eg, s_.recipe, who, false).widened;  // along N
      const Tensor qw = dgrad_weight(who);
      Tensor dp;
      if (s_.op == Fp8GemmOp::Matmul) {
        dp = bf16_gemm_f32(gn, false, qw, true);  // dA (M, K) = G @ B^T, B (K, N) blocked along N
      } else {
        dp = bf16_gemm_f32(gn, false, qw.reshape({s_.n, s_.k}), false);  // dP (M, K) = G @ W
      }
      if (conv) {
        const ConvGeom& gm = s_.geom;
        Tensor image = ::mixtape::cuda::empty_on({gm.N, gm.C, gm.H, gm.W}, DType::Float32, dp.device());
        MT_CUDA_CHECK(launch_col2im_f32(dp.data_ptr<float>(), image.data_ptr<float>(), im2col_geom(gm),
                                        ::mixtape::cuda::current_stream()),
                      who);
        dp = image;
      }
      out[0] = to_dtype(dp.reshape(meta_[0].sizes), meta_[0].dtype);
    }
    if (need_q) {
      const Tensor gm = mx_quantize_cuda(g, 0, eg, s_.recipe, who, false).widened;  // along M
      Tensor dq;
      if (s_.op == Fp8GemmOp::Matmul) {
        dq = bf16_gemm_f32(mx_widen_cuda(p_), true, gm, false);  // dB (K, N) = A^T @ G
      } else {
        Tensor pw;
        if (conv) {
          // x_keep_ shares the caller's input (no copy): an in-place change since the forward
          // would silently change this gradient, so it is refused, as autograd's saved tensors are.
          detail::check_kept_unchanged(x_keep_, x_keep_version_, "input 0", who);
          pw = mx_quantize_cuda(im2col(x_keep_, s_.geom, who), 0, s_.elem(Fp8Role::Input), s_.recipe, who, false)
                   .widened;
        } else {
          pw = mx_widen_cuda(p_);
        }
        dq = bf16_gemm_f32(gm, true, pw, false);  // dW (N, K) = G^T @ P
      }
      out[1] = to_dtype(dq.reshape(meta_[1].sizes), meta_[1].dtype);
    }
    if (need_b) out[2] = to_dtype(sum(to_dtype(g, DType::Float32), {0}), meta_[2].dtype);
    return out;
  }

  // Q blocked along the dgrad's reduction dim, widened: from the saved bytes, or the leaf weight
  // cast again (the same function on the same values: the same bits).
  Tensor dgrad_weight(const char* who) const {
    if (!w_ref_.defined()) return mx_widen_cuda(q_);
    detail::check_kept_unchanged(w_ref_, w_ref_version_, "input 1 (the weight)", who);
    return mx_quantize_cuda(contiguous(w_ref_), s_.op == Fp8GemmOp::Matmul ? 1 : 0, s_.elem(Fp8Role::Weight),
                            s_.recipe, who, false)
        .widened;
  }

  MxSetup s_;
  Fp8Operand p_, q_;
  Tensor x_keep_;
  uint32_t x_keep_version_ = 0;  // x_keep_'s version when saved
  Tensor w_ref_;                  // a leaf weight, cast again for the dgrad (q_ undefined then)
  uint32_t w_ref_version_ = 0;
  std::vector<autograd::TensorMeta> meta_;
  bool released_ = false;
};

}  // namespace

TensorList run_mx(const detail::Fp8CudaCall& c, const char* who) {
  const detail::Fp8RegionSettings& region = *c.region;
  MxSetup s{c.op, std::get<MXFP8BlockScaling>(region.recipe)};
  check_recipe(s.recipe, who);
  ::mixtape::cuda::DeviceGuard guard(c.x.device().index());
  const bool conv = c.op == Fp8GemmOp::Conv2d;
  if (conv) s.geom = c.geom;
  const detail::Fp8GemmDims dims = detail::fp8_gemm_dims(c.op, c.x, c.w, c.geom);
  s.m = dims.m;
  s.k = dims.k;
  s.n = dims.n;
  if (trace_enabled(TraceKind::Amp)) {
    std::ostringstream os;
    os << "fp8 " << (c.op == Fp8GemmOp::Linear ? "linear" : c.op == Fp8GemmOp::Matmul ? "matmul" : "conv2d")
       << " (cuda) " << recipe_string(region.recipe) << ": M=" << s.m << " K=" << s.k << " N=" << s.n
       << ", MX blocks widened to BF16" << (conv ? " (blocks along the channels)" : "");
    trace_line(TraceKind::Amp, os.str());
  }
  const DType ein = s.elem(Fp8Role::Input), ew = s.elem(Fp8Role::Weight);
  const Tensor x = contiguous(c.x.detach()), w = contiguous(c.w.detach());
  const bool grad = autograd::GradMode::is_enabled() &&
                    (c.x.requires_grad() || c.w.requires_grad() || (c.bias.defined() && c.bias.requires_grad()));
  Tensor y;
  Fp8Operand p_keep, q_keep;
  Tensor x_keep;
  if (conv) {
    const Tensor image = mx_quantize_cuda(x, 1, ein, s.recipe, who, false).widened;  // each pixel's channels
    const Tensor wq = mx_quantize_cuda(w, 1, ew, s.recipe, who, false).widened;      // W along C
    const Tensor acc = bf16_gemm_f32(im2col(image, s.geom, who), false, wq.reshape({s.n, s.k}), true);  // (M, O)
    y = contiguous(with_bias(acc, c.bias, region.output_dtype)
                       .reshape({s.geom.N, s.geom.OH, s.geom.OW, s.n})
                       .permute({0, 3, 1, 2}));
    if (grad && c.x.requires_grad() && !detail::dgrad_recasts_weight(c.w))
      q_keep = mx_quantize_cuda(w, 0, ew, s.recipe, who, true, false);  // along O
    if (grad && c.w.requires_grad()) x_keep = c.x.detach();
  } else {
    const bool linear = c.op == Fp8GemmOp::Linear;
    const Tensor p2 = x.reshape({s.m, s.k});
    const Tensor pw = mx_quantize_cuda(p2, 1, ein, s.recipe, who, false).widened;            // along K
    const Tensor qw = mx_quantize_cuda(w, linear ? 1 : 0, ew, s.recipe, who, false).widened;  // along K
    IntList shape = c.x.sizes();
    shape.back() = s.n;
    y = with_bias(bf16_gemm_f32(pw, false, qw, linear), c.bias, region.output_dtype).reshape(shape);
    if (grad && c.w.requires_grad()) p_keep = mx_quantize_cuda(p2, 0, ein, s.recipe, who, true, false);  // along M
    if (grad && c.x.requires_grad() && !detail::dgrad_recasts_weight(c.w))
      q_keep = mx_quantize_cuda(w, linear ? 0 : 1, ew, s.recipe, who, true, false);  // along N
  }
  if (!grad) return {y};
  TensorList inputs{c.x, c.w};
  if (c.op != Fp8GemmOp::Matmul) inputs.push_back(c.bias);
  // A leaf weight (a parameter, kept alive by its module) is not saved: the dgrad casts it again.
  const Tensor w_ref = grad && c.x.requires_grad() && detail::dgrad_recasts_weight(c.w) ? c.w.detach() : Tensor();
  auto node = std::make_shared<MxCudaGemmNode>(std::move(s), inputs, std::move(p_keep), std::move(q_keep), x_keep,
                                               w_ref);
  y = y.detach();
  y.set_history(node, 0);
  return {y};
}

}  // namespace mixtape::amp::cuda
