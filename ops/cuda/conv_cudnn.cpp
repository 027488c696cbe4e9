// ops/cuda/conv_cudnn.cpp — conv2d, conv2d_input_grad and conv2d_weight_grad on CUDA through cuDNN's
// convolution API (cudnnConvolutionForward / BackwardData / BackwardFilter), the one file of the
// conv family that knows cuDNN (swap it for the graph API here alone).
// Semantics as ops/conv.cpp: a cross-correlation with zero padding, stride, dilation and groups,
// NCHW tensors and (O, C/G, kH, kW) weights; f16/bf16 compute in FP32 on tensor cores
// (CUDNN_TENSOR_OP_MATH), f32 is exact FP32 (CUDNN_FMA_MATH: no TF32) unless
// cuda::set_allow_tf32(true), f64 in double. One difference from the CPU, stated: a 16-bit conv with
// a bias rounds twice (the conv result, then + bias, as PyTorch's CUDA conv does), the CPU once.
// Algorithms: cuDNN's heuristics (Get*_v7), the first that succeeds within a workspace cap and is
// deterministic (unless cuda::set_cudnn_deterministic(false)), run with the math type cuDNN ranked
// it under; cached per (op, dtype, shapes, arguments, device, flags) so a training loop asks once
// per layer shape.
// Workspaces come from the caching allocator (core/cuda/scratch.h).
#include <cudnn.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <mutex>
#include <sstream>
#include <string>

#include "core/cuda/handles.h"
#include "core/cuda/scratch.h"
#include "core/cuda_api.h"
#include "core/profiler.h"
#include "ops/conv_args.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/tensor_iter.h"

namespace mixtape::cuda {
namespace {

constexpr size_t kWorkspaceCap = size_t(1) << 30;  // 1 GiB: larger suggestions are skipped

cudnnDataType_t cudnn_type(DType dt, const char* op) {
  switch (dt) {
    case DType::Float16: return CUDNN_DATA_HALF;
    case DType::BFloat16: return CUDNN_DATA_BFLOAT16;
    case DType::Float32: return CUDNN_DATA_FLOAT;
    case DType::Float64: return CUDNN_DATA_DOUBLE;
    default: MT_ERROR(op, ": cuDNN convolutions take f16, bf16, f32 or f64, got ", dtype_name(dt));
  }
}

// RAII descriptors: destroyed on every path, exceptions included.
struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc(DType dt, const IntList& s, const char* op) {
    MT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d), op);
    MT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, cudnn_type(dt, op), int(s[0]), int(s[1]), int(s[2]),
                                              int(s[3])),
                   op);
  }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};
struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc(DType dt, const IntList& s, const char* op) {
    MT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d), op);
    MT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(d, cudnn_type(dt, op), CUDNN_TENSOR_NCHW, int(s[0]), int(s[1]), int(s[2]),
                                              int(s[3])),
                   op);
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc(const ConvArgs& a, DType dt, const char* op) {
    MT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d), op);
    const cudnnDataType_t compute = dt == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    MT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d, int(a.padding[0]), int(a.padding[1]), int(a.stride[0]),
                                                   int(a.stride[1]), int(a.dilation[0]), int(a.dilation[1]),
                                                   CUDNN_CROSS_CORRELATION, compute),
                   op);
    MT_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d, int(a.groups)), op);
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    if (is_reduced_float(dt)) math = CUDNN_TENSOR_OP_MATH;
    if (dt == DType::Float32) math = allow_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    MT_CUDNN_CHECK(cudnnSetConvolutionMathType(d, math), op);
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// ops/conv_args.h's checks and geometry (shared with the CPU), then cuDNN's int range; returns
// the output shape (N, O, OH, OW).
IntList conv_out_shape(const char* op, const Shown& x, const Shown& w, const ConvArgs& a) {
  const ConvGeom g = check_conv_geometry(op, x, w, a.stride, a.padding, a.dilation, a.groups);
  for (int64_t v : {g.N, g.C, g.H, g.W, g.O})
    MT_CHECK(v <= INT_MAX, op, ": cuDNN takes int dimensions, got input ", x.str(), " and weight ", w.str());
  // The 4-D descriptors' strides are ints too (the batch stride is C H W), and cuDNN indexes each
  // operand's elements with them: every operand's element count must fit (each dimension
  // fitting is not enough: 65536 images of 64 x 32 x 32 do not).
  const IntList ys = g.out_sizes();
  auto count = [](std::initializer_list<int64_t> dims) {  // saturating: dims are <= INT_MAX, four of them may not be
    int64_t n = 1;
    for (int64_t d : dims) n = d != 0 && n > INT64_MAX / d ? INT64_MAX : n * d;
    return n;
  };
  const int64_t counts[3] = {count({g.N, g.C, g.H, g.W}), count({g.O, g.C / g.G, g.kH, g.kW}),
                             count({ys[0], ys[1], ys[2], ys[3]})};
  for (int64_t n : counts)
    MT_CHECK(n <= INT_MAX, op, ": cuDNN indexes a tensor with int strides, and an operand has ", n,
             " elements (more than 2^31 - 1): input ", x.str(), ", weight ", w.str(), ", output ", shape_str(ys),
             ". Split the batch into smaller ones");
  return ys;
}

// ---- the algorithm cache ----
enum class Kind { Forward, BackwardData, BackwardFilter };
struct Choice {
  int algo;
  size_t workspace;
  cudnnMathType_t math;  // the suggestion's math type: set on the descriptor before the call
};
std::string cache_key(Kind k, DType dt, const IntList& xs, const IntList& ws, const ConvArgs& a, bool deterministic) {
  std::ostringstream os;
  os << int(k) << ' ' << int(dt) << ' ' << current_device() << ' ' << shape_str(xs) << shape_str(ws)
     << shape_str(a.stride) << shape_str(a.padding) << shape_str(a.dilation) << a.groups << ' ' << allow_tf32()
     << deterministic;
  return os.str();
}
std::mutex g_cache_mu;
std::map<std::string, Choice>& cache() {
  static std::map<std::string, Choice> c;
  return c;
}

// What a suggestion must be to run: it succeeded, its workspace is under the cap, it is
// deterministic unless cudnn_deterministic() is off, and its math type keeps the data type's
// precision: exact FP32 (CUDNN_FMA_MATH only, as PyTorch's Conv_v7.cpp asserts) unless TF32 is
// allowed, and never CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION (FP32 data converted down to FP16/BF16)
// for FP32 or FP64. The math type is the one the call then sets: cuDNN ranked the suggestion,
// and sized its workspace, for it.
struct Requirements {
  bool deterministic;
  bool fp32_exact;   // f32 data, TF32 not allowed
  bool no_downcast;  // f32 or f64 data
};
template <class Perf>
bool usable(const Perf& p, const Requirements& r) {
  if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kWorkspaceCap) return false;
  if (r.deterministic && p.determinism != CUDNN_DETERMINISTIC) return false;
  if (r.fp32_exact && p.mathType != CUDNN_FMA_MATH) return false;
  return !(r.no_downcast && p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
}
template <class Perf>
Choice first_usable(const Perf* perf, int n, const Requirements& r) {
  for (int i = 0; i < n; ++i)
    if (usable(perf[i], r)) return {int(perf[i].algo), perf[i].memory, perf[i].mathType};
  return {-1, 0, CUDNN_DEFAULT_MATH};
}

// Asks cuDNN's heuristics for the ranked algorithms of `kind`, keeps the first usable one; cached.
Choice choose(Kind kind, cudnnHandle_t h, const TensorDesc& x, const FilterDesc& w, const ConvDesc& conv,
              const TensorDesc& y, const std::string& key, DType dt, bool deterministic, const char* op) {
  {
    std::lock_guard<std::mutex> lock(g_cache_mu);
    auto it = cache().find(key);
    if (it != cache().end()) return it->second;
  }
  Choice chosen{-1, 0, CUDNN_DEFAULT_MATH};
  const Requirements req{deterministic, dt == DType::Float32 && !allow_tf32(),
                         dt == DType::Float32 || dt == DType::Float64};
  int n = 0;
  if (kind == Kind::Forward) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    MT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, x.d, w.d, conv.d, y.d, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n,
                                                          perf),
                   op);
    chosen = first_usable(perf, n, req);
  } else if (kind == Kind::BackwardData) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    MT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w.d, y.d, conv.d, x.d,
                                                               CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf),
                   op);
    chosen = first_usable(perf, n, req);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    MT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x.d, y.d, conv.d, w.d,
                                                                 CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf),
                   op);
    chosen = first_usable(perf, n, req);
  }
  MT_CHECK(chosen.algo >= 0, op, ": cuDNN offered no algorithm that succeeds within a ", kWorkspaceCap >> 20,
           " MiB workspace", req.deterministic ? ", is deterministic (cuda::set_cudnn_deterministic(false) lifts this)" : "",
           req.fp32_exact ? ", and computes in exact FP32 (cuda::set_allow_tf32(true) admits TF32)" : "",
           " for ", key);
  std::lock_guard<std::mutex> lock(g_cache_mu);
  cache()[key] = chosen;
  return chosen;
}

// Scaling factors: float for every data type except double (cuDNN's rule).
struct Scaling {
  float f1 = 1.0f, f0 = 0.0f;
  double d1 = 1.0, d0 = 0.0;
  bool dbl;
  explicit Scaling(DType dt) : dbl(dt == DType::Float64) {}
  const void* one() const { return dbl ? static_cast<const void*>(&d1) : static_cast<const void*>(&f1); }
  const void* zero() const { return dbl ? static_cast<const void*>(&d0) : static_cast<const void*>(&f0); }
};

TensorList conv2d_cuda(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& w = call.inputs[1];
  const Tensor b = call.inputs.size() > 2 ? call.inputs[2] : Tensor();
  const ConvArgs a = ConvArgs::from(call.attrs);
  const IntList ys = conv_out_shape(call.name(), Shown::of(x), Shown::of(w), a);
  if (b.defined())
    MT_CHECK(b.dim() == 1 && b.size(0) == ys[1], call.name(), ": bias must be 1-D with ", ys[1], " elements (weight ",
             w.describe(), "), got ", b.describe());
  check_conv_dtypes(call.name(), "input", x, "weight", w);
  if (b.defined()) check_conv_dtypes(call.name(), "input", x, "bias", b);
  const DType dt = x.dtype();
  DeviceGuard guard(x.device().index());
  Tensor out = empty_on(ys, dt, x.device());
  if (out.numel() == 0) return {out};
  const Tensor xc = dense(x, call.name()), wc = dense(w, call.name());
  TensorDesc xd(dt, x.sizes(), call.name()), yd(dt, ys, call.name());
  FilterDesc wd(dt, w.sizes(), call.name());
  ConvDesc cd(a, dt, call.name());
  cudnnHandle_t h = cudnn_handle();
  const bool det = cudnn_deterministic();  // read once: the key and the choice agree
  const Choice c = choose(Kind::Forward, h, xd, wd, cd, yd, cache_key(Kind::Forward, dt, x.sizes(), w.sizes(), a, det),
                          dt, det, call.name());
  MT_CUDNN_CHECK(cudnnSetConvolutionMathType(cd.d, c.math), call.name());
  Scratch ws(c.workspace);
  const Scaling s(dt);
  profiler::count_library_call();
  MT_CUDNN_CHECK(cudnnConvolutionForward(h, s.one(), xd.d, xc.data_ptr(), wd.d, wc.data_ptr(), cd.d,
                                         static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), ws.data(), c.workspace,
                                         s.zero(), yd.d, out.data_ptr()),
                 call.name());
  if (b.defined()) {  // y += b[o] broadcast over (N, ., OH, OW)
    const Tensor bc = dense(b, call.name());
    TensorDesc bd(dt, {1, ys[1], 1, 1}, call.name());
    profiler::count_library_call();
    MT_CUDNN_CHECK(cudnnAddTensor(h, s.one(), bd.d, bc.data_ptr(), s.one(), yd.d, out.data_ptr()), call.name());
  }
  return {out};
}

TensorList conv2d_input_grad_cuda(const OpCall& call) {
  const Tensor& gy = call.inputs[0];
  const Tensor& w = call.inputs[1];
  const ConvArgs a = ConvArgs::from(call.attrs);
  const IntList& in_size = call.attrs.get<IntList>("input_size");
  const IntList ys = conv_out_shape(call.name(), Shown::shape(in_size), Shown::of(w), a);
  MT_CHECK(gy.sizes() == ys, call.name(), ": expected grad of shape ", shape_str(ys),
           " (the conv2d output for this input, weight and geometry), got ", gy.describe());
  check_conv_dtypes(call.name(), "grad", gy, "weight", w);
  const DType dt = gy.dtype();
  DeviceGuard guard(gy.device().index());
  Tensor out = empty_on(in_size, dt, gy.device());
  if (out.numel() == 0) return {out};
  const Tensor gc = dense(gy, call.name()), wc = dense(w, call.name());
  TensorDesc xd(dt, in_size, call.name()), yd(dt, ys, call.name());
  FilterDesc wd(dt, w.sizes(), call.name());
  ConvDesc cd(a, dt, call.name());
  cudnnHandle_t h = cudnn_handle();
  const bool det = cudnn_deterministic();
  const Choice c = choose(Kind::BackwardData, h, xd, wd, cd, yd,
                          cache_key(Kind::BackwardData, dt, in_size, w.sizes(), a, det), dt, det, call.name());
  MT_CUDNN_CHECK(cudnnSetConvolutionMathType(cd.d, c.math), call.name());
  Scratch ws(c.workspace);
  const Scaling s(dt);
  profiler::count_library_call();
  MT_CUDNN_CHECK(cudnnConvolutionBackwardData(h, s.one(), wd.d, wc.data_ptr(), yd.d, gc.data_ptr(), cd.d,
                                              static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), ws.data(),
                                              c.workspace, s.zero(), xd.d, out.data_ptr()),
                 call.name());
  return {out};
}

TensorList conv2d_weight_grad_cuda(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& gy = call.inputs[1];
  const ConvArgs a = ConvArgs::from(call.attrs);
  const IntList& w_size = call.attrs.get<IntList>("weight_size");
  const IntList ys = conv_out_shape(call.name(), Shown::of(x), Shown::shape(w_size), a);
  MT_CHECK(gy.sizes() == ys, call.name(), ": expected grad of shape ", shape_str(ys),
           " (the conv2d output for this input, weight and geometry), got ", gy.describe());
  check_conv_dtypes(call.name(), "input", x, "grad", gy);
  const DType dt = x.dtype();
  DeviceGuard guard(x.device().index());
  Tensor out = empty_on(w_size, dt, x.device());
  if (out.numel() == 0) return {out};
  const Tensor xc = dense(x, call.name()), gc = dense(gy, call.name());
  TensorDesc xd(dt, x.sizes(), call.name()), yd(dt, ys, call.name());
  FilterDesc wd(dt, w_size, call.name());
  ConvDesc cd(a, dt, call.name());
  cudnnHandle_t h = cudnn_handle();
  const bool det = cudnn_deterministic();
  const Choice c = choose(Kind::BackwardFilter, h, xd, wd, cd, yd,
                          cache_key(Kind::BackwardFilter, dt, x.sizes(), w_size, a, det), dt, det, call.name());
  MT_CUDNN_CHECK(cudnnSetConvolutionMathType(cd.d, c.math), call.name());
  Scratch ws(c.workspace);
  const Scaling s(dt);
  profiler::count_library_call();
  MT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, s.one(), xd.d, xc.data_ptr(), yd.d, gc.data_ptr(), cd.d,
                                                static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), ws.data(),
                                                c.workspace, s.zero(), wd.d, out.data_ptr()),
                 call.name());
  return {out};
}

const bool kRegistered = [] {
  register_kernel("conv2d", DeviceType::CUDA, conv2d_cuda);
  register_kernel("conv2d_input_grad", DeviceType::CUDA, conv2d_input_grad_cuda);
  register_kernel("conv2d_weight_grad", DeviceType::CUDA, conv2d_weight_grad_cuda);
  return true;
}();

}  // namespace
}  // namespace mixtape::cuda
