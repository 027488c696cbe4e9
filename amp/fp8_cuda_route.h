// amp/fp8_cuda_route.h — how Fp8Autocast and Fp8Metas reach the CUDA backend (amp/cuda/
// fp8_autocast_cuda.cpp) without the amp layer's CPU files depending on CUDA: the backend
// registers its functions when libmixtape_amp loads in a CUDA build; a CPU-only build has none,
// and every entry point here then refuses with the caller's name. Also what the three FP8 GEMM
// nodes (the CPU's in amp/fp8_ops.cpp, CUDA's per-tensor and MX ones) share: their edges, names
// and descriptions, the check of what they keep by reference, the refusals at backward and the
// NaN locator's check.
// Invariant: the hooks are set once, at load time, before any region can open.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "amp/fp8_autocast.h"
#include "autograd/node.h"
#include "core/dispatcher.h"
#include "core/numerics_check.h"
#include "ops/conv_args.h"

namespace mixtape::amp::detail {

enum class Fp8GemmOp { Linear, Matmul, Conv2d };

// One linear / 2-D matmul / conv2d call inside a CUDA Fp8Autocast region, its shapes checked by
// fp8_dispatch (amp/fp8_ops.cpp): linear x (*, K), w (N, K), bias (N) or undefined; matmul x
// (M, K), w (K, N); conv2d x (N, C, H, W), w (O, C, kH, kW), bias (O) or undefined, groups 1.
struct Fp8CudaCall {
  Fp8GemmOp op;
  Tensor x, w, bias;
  ConvGeom geom{};  // conv2d only
  const Fp8RegionSettings* region = nullptr;
};

struct Fp8CudaBackend {
  TensorList (*gemm)(const Fp8CudaCall& call) = nullptr;
  // Fp8Metas::update_scales for one meta on a CUDA device (amp/cuda/fp8_delayed_scaling.h).
  void (*update)(Fp8Meta& meta, const DelayedScaling& recipe) = nullptr;
};
bool register_fp8_cuda_backend(Fp8CudaBackend backend);
// What both devices' FP8 GEMM nodes refuse at backward, naming `who`: a second backward through a
// released node, and a differentiable (create_graph) backward.
// The GEMM's M, K, N (amp/fp8_ops.cpp's header): linear's rows of x, K, out features; matmul's
// (M, K) @ (K, N); conv2d's N·OH·OW pixels, C·kH·kW, O.
struct Fp8GemmDims {
  int64_t m = 0, k = 0, n = 0;
};
Fp8GemmDims fp8_gemm_dims(Fp8GemmOp op, const Tensor& x, const Tensor& w, const ConvGeom& geom);
// An FP8 node's edges and input metas, one per input (none for an undefined input or one that
// needs no gradient).
void fp8_node_edges(const TensorList& inputs, std::vector<autograd::Edge>& edges,
                    std::vector<autograd::TensorMeta>& metas);
// Its tape name (Fp8LinearBackward, ...) and describe(): the name, the recipe, the device and what
// it kept (undefined tensors: none; w_ref: the weight it casts again).
const char* fp8_node_name(Fp8GemmOp op);
std::string describe_fp8_node(Fp8GemmOp op, const std::string& recipe, bool cuda, const Tensor& p, const Tensor& q,
                              const Tensor& x_keep, const Tensor& w_ref);
// A tensor a node keeps by reference (its input, or its weight) shares the caller's storage: an
// in-place change since the forward would silently change a gradient, so it is refused, as
// autograd's saved tensors are, naming `which` of `who`.
void check_kept_unchanged(const Tensor& t, uint32_t saved_version, const char* which, const char* who);
// Whether an FP8 node keeps its weight w by reference and casts it again for the dgrad, rather
// than keeping an FP8 copy: a leaf that requires grad, i.e. a parameter being trained, which its
// module keeps alive anyway and which only the optimizer changes, after backward. Anything else
// (matmul's b, a computed weight, a tensor without grad the caller may drop or reuse) keeps the
// copy, one byte a value. The same rule on every device.
inline bool dgrad_recasts_weight(const Tensor& w) { return w.is_leaf() && w.requires_grad(); }
void check_fp8_backward(const char* who, bool released);
// The NaN locator (core/numerics_check.h) around an FP8 GEMM node's backward, whose GEMMs and
// casts launch outside run_kernel: `compute()` is checked as one op, linear_fp8_backward /
// matmul_fp8_backward / conv2d_fp8_backward, whose inputs are the output gradient and what the
// node kept (the FP8 input, the weight's FP8 copy or the leaf weight itself, a high-precision
// input; undefined where it kept none). So an inf or NaN it makes from finite inputs is reported
// at the node, with its tape entry (the engine's scope), the inputs' dtypes and shapes; ops it
// runs through the dispatcher are checked as well, inside it. Switched off: one flag load.
inline const OpSchema& fp8_backward_schema(Fp8GemmOp op) {
  static const auto make = [](const char* name) {
    auto* s = new OpSchema;  // leaked on purpose: lives as long as the process, like registered schemas
    s->name = name;
    s->arg_names = {"grad_output", "saved input (FP8)", "weight (its saved FP8 copy, or itself)", "saved input"};
    return s;
  };
  static const OpSchema* linear = make("linear_fp8_backward");
  static const OpSchema* matmul = make("matmul_fp8_backward");
  static const OpSchema* conv = make("conv2d_fp8_backward");
  return op == Fp8GemmOp::Linear ? *linear : op == Fp8GemmOp::Matmul ? *matmul : *conv;
}
template <class Compute>
TensorList fp8_backward_checked(Fp8GemmOp op, const TensorList& kept, Compute&& compute) {
  if (!numerics::enabled()) return compute();
  const OpSchema& schema = fp8_backward_schema(op);
  OpCall call;
  call.op = &schema;
  call.inputs = kept;
  const numerics::PreKernel pre = numerics::before_kernel(schema, call);
  TensorList out = compute();
  if (pre.active) numerics::after_kernel(schema, call, out, pre);
  return out;
}
// The registered backend; throws, naming `who`, in a build without CUDA.
const Fp8CudaBackend& fp8_cuda_backend(const char* who);

}  // namespace mixtape::amp::detail
