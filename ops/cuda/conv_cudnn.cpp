// ops/cuda/conv_cudnn.cpp — conv2d, conv2d_input_grad and conv2d_weight_grad on CUDA through cuDNN's
// convolution API (cudnnConvolutionForward / BackwardData / BackwardFilter), the one file of the
// conv family that knows cuDNN (swap it for the graph API here alone).
// Semantics as ops/conv.cpp: a cross-correlation with zero padding, stride, dilation and groups,
// NCHW tensors and (O, C/G, kH, kW) weights; f16/bf16 compute in FP32 on tensor cores
// (CUDNN_TENSOR_OP_MATH), f32 is exact FP32 (CUDNN_FMA_MATH: no TF32) unless
// cuda::set_allow_tf32(true), f64 in double. One difference from the CPU, stated: a 16-bit conv with
// a bias rounds twice (the conv result, then + bias, as PyTorch's CUDA conv does), the CPU once.
// Algorithms: cuDNN's heuristics (Get*_v7), or with cuda::set_cudnn_benchmark(true) its timing of
// them on the call's operands (Find*Ex), the first that succeeds within a workspace cap and is
// deterministic (unless cuda::set_cudnn_deterministic(false)), run with the math type cuDNN ranked
// it under. A "plan" (descriptors + choice) is built once per (direction, dtype, shapes, geometry,
// device, settings) and then looked up by a hash of plain values under a shared lock: a training
// loop's call creates no descriptor and formats no string.
// Workspaces come from the caching allocator (core/cuda/scratch.h).
#include <cudnn.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/cuda/graph.h"
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
  // tf32: the plan's setting (read once per call, so the descriptor, the key and the choice agree).
  ConvDesc(const ConvArgs& a, DType dt, bool tf32, const char* op) {
    MT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d), op);
    const cudnnDataType_t compute = dt == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    MT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d, int(a.padding[0]), int(a.padding[1]), int(a.stride[0]),
                                                   int(a.stride[1]), int(a.dilation[0]), int(a.dilation[1]),
                                                   CUDNN_CROSS_CORRELATION, compute),
                   op);
    MT_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d, int(a.groups)), op);
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    if (is_reduced_float(dt)) math = CUDNN_TENSOR_OP_MATH;
    if (dt == DType::Float32) math = tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
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

// ---- plans: a configuration's descriptors and chosen algorithm, built once ----
enum class Kind : uint8_t { Forward, BackwardData, BackwardFilter };
const char* kind_name(Kind k) {
  return k == Kind::Forward ? "forward" : k == Kind::BackwardData ? "backward data" : "backward filter";
}

// Everything a plan depends on, as plain values: hashed and compared on every call, formatted
// only for an error message.
struct PlanKey {
  int64_t x[4], w[4], stride[2], padding[2], dilation[2], groups;
  int device;
  Kind kind;
  DType dtype;
  bool tf32, deterministic, benchmark;  // the process-wide settings, read once per call
  bool operator==(const PlanKey&) const = default;
};
struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields' values
    auto mix = [&h](int64_t v) {
      for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ uint64_t(v & 0xff)) * 1099511628211ull;
    };
    for (int i = 0; i < 4; ++i) mix(k.x[i]), mix(k.w[i]);
    for (int i = 0; i < 2; ++i) mix(k.stride[i]), mix(k.padding[i]), mix(k.dilation[i]);
    mix(k.groups);
    mix(k.device);
    mix(int64_t(k.kind) | int64_t(k.dtype) << 8 | int64_t(k.tf32) << 16 | int64_t(k.deterministic) << 17 |
        int64_t(k.benchmark) << 18);
    return size_t(h);
  }
};
PlanKey make_key(Kind kind, DType dt, const IntList& xs, const IntList& ws, const ConvArgs& a) {
  PlanKey k{};
  for (int i = 0; i < 4; ++i) k.x[i] = xs[size_t(i)], k.w[i] = ws[size_t(i)];
  for (int i = 0; i < 2; ++i)
    k.stride[i] = a.stride[size_t(i)], k.padding[i] = a.padding[size_t(i)], k.dilation[i] = a.dilation[size_t(i)];
  k.groups = a.groups;
  k.device = current_device();
  k.kind = kind;
  k.dtype = dt;
  k.tf32 = allow_tf32();
  k.deterministic = cudnn_deterministic();
  k.benchmark = cudnn_benchmark();
  return k;
}
std::string describe(const PlanKey& k) {
  std::ostringstream os;
  os << kind_name(k.kind) << " " << dtype_name(k.dtype) << " convolution of input "
     << shape_str({k.x[0], k.x[1], k.x[2], k.x[3]}) << " and weight " << shape_str({k.w[0], k.w[1], k.w[2], k.w[3]})
     << ", stride " << shape_str({k.stride[0], k.stride[1]}) << ", padding "
     << shape_str({k.padding[0], k.padding[1]}) << ", dilation " << shape_str({k.dilation[0], k.dilation[1]})
     << ", groups " << k.groups << " on cuda:" << k.device;
  return os.str();
}

struct Choice {
  int algo;
  size_t workspace;
  cudnnMathType_t math;  // the suggestion's math type: set on the plan's descriptor
};
// One configuration's descriptors (the convolution descriptor carries the chosen math type) and
// algorithm. Built once, then only read, by any thread: cuDNN reads descriptors, never writes them.
struct Plan {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  TensorDesc bias;  // (1, O, 1, 1): forward's cudnnAddTensor
  Choice choice{-1, 0, CUDNN_DEFAULT_MATH};
  Plan(const PlanKey& k, const IntList& ys, const ConvArgs& a, const char* op)
      : x(k.dtype, {k.x[0], k.x[1], k.x[2], k.x[3]}, op),
        y(k.dtype, ys, op),
        w(k.dtype, {k.w[0], k.w[1], k.w[2], k.w[3]}, op),
        conv(a, k.dtype, k.tf32, op),
        bias(k.dtype, {1, ys[1], 1, 1}, op) {}
};

// One suggestion, whichever direction and source (heuristics or timing) it came from.
struct Candidate {
  int algo;
  cudnnStatus_t status;
  size_t memory;
  cudnnDeterminism_t determinism;
  cudnnMathType_t math;
};
template <class Perf>
std::vector<Candidate> candidates(const Perf* perf, int n) {
  std::vector<Candidate> out;
  for (int i = 0; i < n; ++i)
    out.push_back({int(perf[i].algo), perf[i].status, perf[i].memory, perf[i].determinism, perf[i].mathType});
  return out;
}

// What a suggestion must be to run: it succeeded, its workspace is under the cap, it is
// deterministic unless cudnn_deterministic() is off, and its math type keeps the data type's
// precision: exact FP32 (CUDNN_FMA_MATH only, as PyTorch's Conv_v7.cpp asserts) unless TF32 is
// allowed, and never CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION (FP32 data converted down to FP16/BF16)
// for FP32 or FP64. The math type is the one the call then sets: cuDNN ranked the suggestion,
// and sized its workspace, for it.
bool usable(const Candidate& c, const PlanKey& k) {
  if (c.status != CUDNN_STATUS_SUCCESS || c.memory > kWorkspaceCap) return false;
  if (k.deterministic && c.determinism != CUDNN_DETERMINISTIC) return false;
  if (k.dtype == DType::Float32 && !k.tf32 && c.math != CUDNN_FMA_MATH) return false;
  const bool no_downcast = k.dtype == DType::Float32 || k.dtype == DType::Float64;
  return !(no_downcast && c.math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
}

// cuDNN's heuristics: its ranking of the algorithms for the plan's configuration.
std::vector<Candidate> heuristics(const PlanKey& k, cudnnHandle_t h, const Plan& p, const char* op) {
  int n = 0;
  if (k.kind == Kind::Forward) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    MT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, p.x.d, p.w.d, p.conv.d, p.y.d,
                                                          CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf),
                   op);
    return candidates(perf, n);
  }
  if (k.kind == Kind::BackwardData) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    MT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w.d, p.y.d, p.conv.d, p.x.d,
                                                               CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf),
                   op);
    return candidates(perf, n);
  }
  cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  MT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p.x.d, p.y.d, p.conv.d, p.w.d,
                                                               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf),
                 op);
  return candidates(perf, n);
}

// The call's operands, by role: Find*Ex runs every algorithm on them, writing the output one
// (forward: y; backward data: x; backward filter: w), which the real call overwrites next.
struct Operands {
  void* x;
  void* w;
  void* y;
};

// Benchmark mode: cuDNN times the algorithms on the operands (cudnnFind*AlgorithmEx), fastest
// first, with a workspace as large as the largest usable heuristic suggestion needs.
std::vector<Candidate> measured(const PlanKey& k, cudnnHandle_t h, const Plan& p, const Operands& o,
                                const std::vector<Candidate>& suggested, const char* op) {
  // Timing runs the algorithms and waits for them: a first call of a shape belongs in the warm-up.
  check_not_capturing(op, "times cuDNN's convolution algorithms (benchmark mode; run the step once before "
                      "capture_begin() so the choice is cached)");
  size_t bytes = 0;
  for (const Candidate& c : suggested)
    if (c.status == CUDNN_STATUS_SUCCESS && c.memory <= kWorkspaceCap) bytes = std::max(bytes, c.memory);
  Scratch ws(bytes);
  int n = 0;
  profiler::count_library_call();
  if (k.kind == Kind::Forward) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    MT_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, p.x.d, o.x, p.w.d, o.w, p.conv.d, p.y.d, o.y,
                                                          CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf, ws.data(), bytes),
                   op);
    return candidates(perf, n);
  }
  if (k.kind == Kind::BackwardData) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    MT_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(h, p.w.d, o.w, p.y.d, o.y, p.conv.d, p.x.d, o.x,
                                                               CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf,
                                                               ws.data(), bytes),
                   op);
    return candidates(perf, n);
  }
  cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  MT_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, p.x.d, o.x, p.y.d, o.y, p.conv.d, p.w.d, o.w,
                                                               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf,
                                                               ws.data(), bytes),
                 op);
  return candidates(perf, n);
}

// Builds the plan: descriptors, then the first usable algorithm of the heuristics' ranking (or of
// the timing's, in benchmark mode), whose math type goes on the convolution descriptor.
std::unique_ptr<Plan> build_plan(const PlanKey& k, const IntList& ys, const ConvArgs& a, const Operands& o,
                                 cudnnHandle_t h, const char* op) {
  auto p = std::make_unique<Plan>(k, ys, a, op);
  std::vector<Candidate> list = heuristics(k, h, *p, op);
  if (k.benchmark) list = measured(k, h, *p, o, list, op);
  for (const Candidate& c : list)
    if (usable(c, k)) {
      p->choice = {c.algo, c.memory, c.math};
      break;
    }
  MT_CHECK(p->choice.algo >= 0, op, ": cuDNN offered no algorithm that succeeds within a ", kWorkspaceCap >> 20,
           " MiB workspace",
           k.deterministic ? ", is deterministic (cuda::set_cudnn_deterministic(false) lifts this)" : "",
           k.dtype == DType::Float32 && !k.tf32
               ? ", and computes in exact FP32 (cuda::set_allow_tf32(true) admits TF32)"
               : "",
           " for the ", describe(k));
  MT_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv.d, p->choice.math), op);
  return p;
}

// The plan cache: a shared lock and a hash lookup per call. Plans live as long as the process
// (never destroyed: no cuDNN call at exit, after the library may be gone).
std::shared_mutex g_plans_mu;
std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash>& plans() {
  static auto* m = new std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash>();
  return *m;
}
const Plan& plan_for(const PlanKey& k, const IntList& ys, const ConvArgs& a, const Operands& o, cudnnHandle_t h,
                     const char* op) {
  {
    std::shared_lock<std::shared_mutex> lock(g_plans_mu);
    auto it = plans().find(k);
    if (it != plans().end()) return *it->second;
  }
  std::unique_ptr<Plan> p = build_plan(k, ys, a, o, h, op);  // outside the lock: may take milliseconds
  std::unique_lock<std::shared_mutex> lock(g_plans_mu);
  return *plans().try_emplace(k, std::move(p)).first->second;  // another thread's, if it came first
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
  cudnnHandle_t h = cudnn_handle();
  const Plan& p = plan_for(make_key(Kind::Forward, dt, x.sizes(), w.sizes(), a), ys, a,
                           {xc.data_ptr(), wc.data_ptr(), out.data_ptr()}, h, call.name());
  Scratch ws(p.choice.workspace);
  const Scaling s(dt);
  profiler::count_library_call();
  MT_CUDNN_CHECK(cudnnConvolutionForward(h, s.one(), p.x.d, xc.data_ptr(), p.w.d, wc.data_ptr(), p.conv.d,
                                         static_cast<cudnnConvolutionFwdAlgo_t>(p.choice.algo), ws.data(),
                                         p.choice.workspace, s.zero(), p.y.d, out.data_ptr()),
                 call.name());
  if (b.defined()) {  // y += b[o] broadcast over (N, ., OH, OW)
    const Tensor bc = dense(b, call.name());
    profiler::count_library_call();
    MT_CUDNN_CHECK(cudnnAddTensor(h, s.one(), p.bias.d, bc.data_ptr(), s.one(), p.y.d, out.data_ptr()), call.name());
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
  cudnnHandle_t h = cudnn_handle();
  const Plan& p = plan_for(make_key(Kind::BackwardData, dt, in_size, w.sizes(), a), ys, a,
                           {out.data_ptr(), wc.data_ptr(), gc.data_ptr()}, h, call.name());
  Scratch ws(p.choice.workspace);
  const Scaling s(dt);
  profiler::count_library_call();
  MT_CUDNN_CHECK(cudnnConvolutionBackwardData(h, s.one(), p.w.d, wc.data_ptr(), p.y.d, gc.data_ptr(), p.conv.d,
                                              static_cast<cudnnConvolutionBwdDataAlgo_t>(p.choice.algo), ws.data(),
                                              p.choice.workspace, s.zero(), p.x.d, out.data_ptr()),
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
  cudnnHandle_t h = cudnn_handle();
  const Plan& p = plan_for(make_key(Kind::BackwardFilter, dt, x.sizes(), w_size, a), ys, a,
                           {xc.data_ptr(), out.data_ptr(), gc.data_ptr()}, h, call.name());
  Scratch ws(p.choice.workspace);
  const Scaling s(dt);
  profiler::count_library_call();
  MT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, s.one(), p.x.d, xc.data_ptr(), p.y.d, gc.data_ptr(), p.conv.d,
                                                static_cast<cudnnConvolutionBwdFilterAlgo_t>(p.choice.algo), ws.data(),
                                                p.choice.workspace, s.zero(), p.w.d, out.data_ptr()),
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
