// tests/cuda_emulator/cudnn.cpp — the part of cuDNN that mixtape uses, on the host, for
// MIXTAPE_CUDA=EMULATOR builds: handles, tensor / filter / convolution descriptors, the 2-D
// convolution forward, backward-data and backward-filter, their _v7 algorithm heuristics and
// workspace queries, and cudnnAddTensor. Each function is the extern "C" definition <cudnn.h>
// declares, written from NVIDIA's cuDNN API reference, so a wrong call in mixtape's glue gets a
// wrong result or an error status here, as on a GPU.
//
// What is emulated, and how:
//   - 4-D tensors in any non-negative strides (NCHW, NHWC, or cudnnSetTensor4dDescriptorEx);
//     4-D filters K x C/groups x R x S, laid out KCRS (NCHW) or KRSC (NHWC).
//   - The data-type configurations of the convolution reference: FLOAT_CONFIG (float data,
//     float compute), PSEUDO_HALF_CONFIG and PSEUDO_BFLOAT16_CONFIG (16-bit data, float compute:
//     products accumulate in FP32 and the blended result is rounded once, to nearest even),
//     DOUBLE_CONFIG. alpha and beta are host pointers to double for double data and to float
//     otherwise (the reference's "scaling parameters"); out = alpha * op(...) + beta * out is
//     evaluated in the compute type, and out is not read when beta == 0 (it may hold NaN).
//   - Math types: FLOAT data under CUDNN_DEFAULT_MATH / CUDNN_TENSOR_OP_MATH(_ALLOW_CONVERSION)
//     is computed as the TF32 tensor cores of an A100-or-newer GPU do (the reference permits
//     Tensor Core TF32 there): each input rounded to 10 mantissa bits (nearest, ties away, as
//     cvt.rna.tf32.f32), products accumulated in FP32. CUDNN_FMA_MATH is exact FP32.
//   - Algorithms: per direction one "GEMM-like" algorithm with a non-zero workspace (an im2col
//     buffer's size), listed first, and one without workspace; every other algorithm is listed
//     after them with CUDNN_STATUS_NOT_SUPPORTED and rejected by the convolution calls. The
//     workspace is checked (size and device memory) and scribbled over, so a workspace shared
//     with an operand shows up as corrupted data.
//   - Not supported (CUDNN_STATUS_NOT_SUPPORTED): TRUE_HALF_CONFIG (half compute), INT8 and the
//     other data types, N-d descriptors and the _Nd_, non-Ex Find and fused entry points (not
//     defined at all), negative strides, overlapping output tensors, CUDNN_TENSOR_NCHW_VECT_C.
//   - Find*AlgorithmEx (benchmark mode) ranks without timing (find_ex below says how).
// Arguments are checked at the call, the work runs in the handle's stream order (emulator.h);
// every tensor must be device memory of the
// extent its descriptor implies, on the handle's device, or the call faults (see emulator.h).
#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <vector>

#include "core/bfloat16.h"
#include "core/half.h"
#include "tests/cuda_emulator/emulator.h"

namespace emu = mixtape::cuda_emulator;
using mixtape::BFloat16;
using mixtape::Half;

namespace {
// A 4-D view: logical sizes and element strides, (N, C, H, W) for tensors, (K, C, R, S) for filters.
struct Layout {
  int64_t d[4] = {0, 0, 0, 0};
  int64_t s[4] = {0, 0, 0, 0};
  int64_t count() const { return d[0] * d[1] * d[2] * d[3]; }
  int64_t off(int64_t a, int64_t b, int64_t c, int64_t e) const { return a * s[0] + b * s[1] + c * s[2] + e * s[3]; }
  int64_t index(int64_t a, int64_t b, int64_t c, int64_t e) const { return ((a * d[1] + b) * d[2] + c) * d[3] + e; }
};
}  // namespace

// The opaque types <cudnn.h>'s handles and descriptors point to.

struct cudnnContext {
  int device;           // current at cudnnCreate: the handle works on that device only
  cudaStream_t stream;  // cudnnSetStream's; nullptr is the default stream
};
struct cudnnTensorStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  Layout l;
};
struct cudnnFilterStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  Layout l;  // strides follow the format: KCRS for NCHW, KRSC for NHWC
};
struct cudnnConvolutionStruct {
  bool set = false;  // by cudnnSetConvolution2dDescriptor; group count and math type are separate
  int pad[2] = {0, 0}, stride[2] = {1, 1}, dilation[2] = {1, 1};
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  int groups = 1;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

namespace {

constexpr int64_t kMaxElements = int64_t(1) << 31;  // "2 Giga-elements", the descriptor limit

bool valid_type(cudnnDataType_t t) { return t >= CUDNN_DATA_FLOAT && t <= CUDNN_DATA_COMPLEX_FP64; }

// The types this emulator computes on; 0 for the rest (their operations are NOT_SUPPORTED).
size_t elem_size(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_FLOAT: return 4;
    case CUDNN_DATA_DOUBLE: return 8;
    case CUDNN_DATA_HALF:
    case CUDNN_DATA_BFLOAT16: return 2;
    default: return 0;
  }
}

// Bytes from the first to one past the last element (0 for an empty tensor); strides >= 0.
size_t extent_bytes(const Layout& l, cudnnDataType_t t) {
  if (l.count() == 0) return 0;
  int64_t last = 0;
  for (int i = 0; i < 4; ++i) last += (l.d[i] - 1) * l.s[i];
  return size_t(last + 1) * elem_size(t);
}

bool negative_strides(const Layout& l) {
  for (int i = 0; i < 4; ++i)
    if (l.s[i] < 0) return true;
  return false;
}

// Whether two logical elements share memory. The API reference (Tensor Descriptor) allows that
// for inputs but not for outputs.
bool overlaps(const Layout& l) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of the dimensions that move
  for (int i = 0; i < 4; ++i)
    if (l.d[i] > 1) dims.push_back({l.s[i], l.d[i]});
  std::sort(dims.begin(), dims.end());
  int64_t span = 1;  // elements covered by the dimensions so far
  for (auto [stride, size] : dims) {
    if (stride < span) return true;
    span = stride * size;
  }
  return false;
}

cudnnStatus_t set_tensor(cudnnTensorStruct* t, cudnnDataType_t type, const int d[4], const int64_t s[4]) {
  if (!t || !valid_type(type)) return CUDNN_STATUS_BAD_PARAM;
  Layout l;
  for (int i = 0; i < 4; ++i) {
    if (d[i] < 0) return CUDNN_STATUS_BAD_PARAM;  // the reference: "negative" dims are BAD_PARAM
    l.d[i] = d[i];
    l.s[i] = s[i];
  }
  if (l.count() >= kMaxElements) return CUDNN_STATUS_NOT_SUPPORTED;
  t->type = type;
  t->l = l;
  t->set = true;
  return CUDNN_STATUS_SUCCESS;
}

// The documented data-type configurations this emulator implements (see the file comment).
bool supported_config(cudnnDataType_t data, cudnnDataType_t compute) {
  switch (data) {
    case CUDNN_DATA_FLOAT:
    case CUDNN_DATA_HALF:
    case CUDNN_DATA_BFLOAT16: return compute == CUDNN_DATA_FLOAT;
    case CUDNN_DATA_DOUBLE: return compute == CUDNN_DATA_DOUBLE;
    default: return false;
  }
}

// ---- the convolution problem ----

enum class Op { Forward, BackwardData, BackwardFilter };

struct Conv {
  Op op;
  cudnnDataType_t type;
  Layout x, w, y;  // y is dy for the backward directions
  int groups, pad[2], stride[2], dilation[2];
  bool flip;  // CUDNN_CONVOLUTION: the filter is applied rotated by 180 degrees
  bool tf32;
  const Layout& out() const { return op == Op::Forward ? y : op == Op::BackwardData ? x : w; }
};

// Output size of one spatial dimension (the cudnnGetConvolution2dForwardOutputDim rule), or -1
// when the dilated filter is larger than the padded input.
int64_t out_dim(int64_t in, int64_t filter, int pad, int stride, int dilation) {
  const int64_t span = (filter - 1) * dilation + 1;
  if (filter < 1 || span > in + 2 * int64_t(pad)) return -1;
  return (in + 2 * int64_t(pad) - span) / stride + 1;
}

cudnnStatus_t check_conv_descs(const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                               const cudnnConvolutionStruct* c) {
  if (!x || !w || !c || !x->set || !w->set || !c->set) return CUDNN_STATUS_BAD_PARAM;
  if (x->l.d[1] != w->l.d[1] * c->groups) return CUDNN_STATUS_BAD_PARAM;  // channels per group
  if (out_dim(x->l.d[2], w->l.d[2], c->pad[0], c->stride[0], c->dilation[0]) < 0 ||
      out_dim(x->l.d[3], w->l.d[3], c->pad[1], c->stride[1], c->dilation[1]) < 0)
    return CUDNN_STATUS_BAD_PARAM;
  return CUDNN_STATUS_SUCCESS;
}

// Validates the descriptors of one direction. The statuses follow the reference's lists for
// cudnnConvolutionForward / BackwardData / BackwardFilter: mismatched data types, channels or
// group counts are BAD_PARAM, except that BackwardData lists "output channel count not a
// multiple of the group count" as NOT_SUPPORTED; a y (dy) of the wrong spatial size is
// NOT_SUPPORTED for Forward and BAD_PARAM for BackwardData (and, undocumented, BackwardFilter).
cudnnStatus_t make_conv(Op op, const cudnnTensorStruct* x, const cudnnFilterStruct* w, const cudnnConvolutionStruct* c,
                        const cudnnTensorStruct* y, Conv* p) {
  if (!y || !y->set) return CUDNN_STATUS_BAD_PARAM;
  if (cudnnStatus_t st = check_conv_descs(x, w, c); st != CUDNN_STATUS_SUCCESS) return st;
  if (x->type != w->type || y->type != x->type) return CUDNN_STATUS_BAD_PARAM;
  const int64_t K = w->l.d[0];
  if (K % c->groups != 0) return op == Op::BackwardData ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_BAD_PARAM;
  if (y->l.d[0] != x->l.d[0] || y->l.d[1] != K) return CUDNN_STATUS_BAD_PARAM;
  const int64_t oh = out_dim(x->l.d[2], w->l.d[2], c->pad[0], c->stride[0], c->dilation[0]);
  const int64_t ow = out_dim(x->l.d[3], w->l.d[3], c->pad[1], c->stride[1], c->dilation[1]);
  if (y->l.d[2] != oh || y->l.d[3] != ow) return op == Op::Forward ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_BAD_PARAM;
  if (!supported_config(x->type, c->compute)) return CUDNN_STATUS_NOT_SUPPORTED;
  if (negative_strides(x->l) || negative_strides(y->l)) return CUDNN_STATUS_NOT_SUPPORTED;
  if ((op == Op::Forward && overlaps(y->l)) || (op == Op::BackwardData && overlaps(x->l)))
    return CUDNN_STATUS_NOT_SUPPORTED;
  p->op = op;
  p->type = x->type;
  p->x = x->l;
  p->w = w->l;
  p->y = y->l;
  p->groups = c->groups;
  for (int i = 0; i < 2; ++i) {
    p->pad[i] = c->pad[i];
    p->stride[i] = c->stride[i];
    p->dilation[i] = c->dilation[i];
  }
  p->flip = c->mode == CUDNN_CONVOLUTION;
  p->tf32 = x->type == CUDNN_DATA_FLOAT && c->math != CUDNN_FMA_MATH;
  return CUDNN_STATUS_SUCCESS;
}

// ---- algorithms ----

int algo_count(Op op) {
  switch (op) {
    case Op::Forward: return CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    case Op::BackwardData: return CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
    default: return CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  }
}

// The test knobs and records of emulator.h (cudnn_last_run and friends).
std::mutex g_knob_mu;
bool g_nondeterministic_first = false;
int g_report_math = -1;
emu::CudnnRun g_last_run[3];
uint64_t g_find_calls = 0;           // cudnnFind*AlgorithmEx calls
uint64_t g_descriptors_created = 0;  // tensor, filter and convolution descriptors
void count_descriptor() {
  std::lock_guard<std::mutex> lock(g_knob_mu);
  ++g_descriptors_created;
}

// The implemented algorithms of a direction, best first: the first needs a workspace.
struct Algo {
  int id;
  bool workspace;
  cudnnDeterminism_t determinism;
};
std::vector<Algo> ranked_algos(Op op);
std::vector<Algo> algos(Op op) {
  std::vector<Algo> list = ranked_algos(op);
  std::lock_guard<std::mutex> lock(g_knob_mu);
  if (g_nondeterministic_first)
    std::stable_partition(list.begin(), list.end(),
                          [](const Algo& a) { return a.determinism == CUDNN_NON_DETERMINISTIC; });
  return list;
}
std::vector<Algo> ranked_algos(Op op) {
  switch (op) {
    case Op::Forward:
      return {{CUDNN_CONVOLUTION_FWD_ALGO_GEMM, true, CUDNN_DETERMINISTIC},
              {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, false, CUDNN_DETERMINISTIC}};
    case Op::BackwardData:  // ALGO_0 is documented non-deterministic (atomics); reported as such
      return {{CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, true, CUDNN_DETERMINISTIC},
              {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, false, CUDNN_NON_DETERMINISTIC}};
    default:
      return {{CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, true, CUDNN_DETERMINISTIC},
              {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, false, CUDNN_NON_DETERMINISTIC}};
  }
}

// Workspace bytes `algo` needs for `p`: an im2col matrix (C*R*S x OH*OW in the compute type)
// for the workspace algorithm, 0 for the other. Returns false when `algo` is not implemented.
bool workspace_for(const Conv& p, int algo, size_t* bytes) {
  for (const Algo& a : algos(p.op)) {
    if (a.id != algo) continue;
    const size_t compute = p.type == CUDNN_DATA_DOUBLE ? sizeof(double) : sizeof(float);
    *bytes = a.workspace ? size_t(p.x.d[1] * p.w.d[2] * p.w.d[3] * p.y.d[2] * p.y.d[3]) * compute : 0;
    return true;
  }
  return false;
}

// The _v7 heuristics: the implemented algorithms first, then every other with NOT_SUPPORTED.
// Nothing is timed (a heuristic), so time is -1. A configuration this emulator does not
// implement gets SUCCESS with every entry NOT_SUPPORTED, as cuDNN reports per-algorithm status.
template <class Perf, class AlgoEnum>
cudnnStatus_t heuristics(Op op, cudnnHandle_t h, const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                         const cudnnConvolutionStruct* c, const cudnnTensorStruct* y, int requested, int* returned,
                         Perf* perf) {
  if (!h || !returned || !perf || requested <= 0) return CUDNN_STATUS_BAD_PARAM;
  Conv p{};
  const cudnnStatus_t st = make_conv(op, x, w, c, y, &p);
  if (st == CUDNN_STATUS_BAD_PARAM) return st;
  std::vector<Perf> list;
  std::vector<bool> listed(size_t(algo_count(op)), false);
  for (const Algo& a : algos(op)) {
    Perf r{};
    r.algo = static_cast<AlgoEnum>(a.id);
    r.status = st;
    r.time = -1.0f;
    if (st == CUDNN_STATUS_SUCCESS) workspace_for(p, a.id, &r.memory);
    r.determinism = a.determinism;
    {
      std::lock_guard<std::mutex> lock(g_knob_mu);
      r.mathType = g_report_math >= 0 ? static_cast<cudnnMathType_t>(g_report_math) : c->math;
    }
    list.push_back(r);
    listed[size_t(a.id)] = true;
  }
  for (int id = 0; id < algo_count(op); ++id) {
    if (listed[size_t(id)]) continue;
    Perf r{};
    r.algo = static_cast<AlgoEnum>(id);
    r.status = CUDNN_STATUS_NOT_SUPPORTED;
    r.time = -1.0f;
    r.determinism = CUDNN_DETERMINISTIC;
    r.mathType = c->math;
    list.push_back(r);
  }
  const int n = std::min(requested, int(list.size()));
  std::copy(list.begin(), list.begin() + n, perf);
  *returned = n;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t workspace_query(Op op, cudnnHandle_t h, const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                              const cudnnConvolutionStruct* c, const cudnnTensorStruct* y, int algo, size_t* bytes) {
  if (!h || !bytes) return CUDNN_STATUS_BAD_PARAM;
  Conv p{};
  if (cudnnStatus_t st = make_conv(op, x, w, c, y, &p); st != CUDNN_STATUS_SUCCESS) return st;
  if (algo < 0 || algo >= algo_count(op)) return CUDNN_STATUS_BAD_PARAM;
  return workspace_for(p, algo, bytes) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED;
}

// ---- arithmetic ----

template <class T>
constexpr bool is16 = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <class A, class T>
A widen(T v) {  // exact: 16-bit -> float, float -> float, double -> double
  if constexpr (is16<T>)
    return A(float(v));
  else
    return A(v);
}
template <class T, class A>
T narrow(A v) {  // the one rounding of a result, to nearest even
  if constexpr (is16<T>)
    return T(float(v));
  else
    return T(v);
}

float to_tf32(float f) {  // keep 10 mantissa bits, round to nearest with ties away (cvt.rna)
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7F800000u) == 0x7F800000u) return f;  // inf and NaN pass unchanged
  u = (u + 0x1000u) & 0xFFFFE000u;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// out = alpha * acc + beta * out over the logical elements of `l`; out is not read when beta == 0.
template <class T, class A>
void blend(const Layout& l, const std::vector<A>& acc, A alpha, A beta, T* out) {
  for (int64_t a = 0; a < l.d[0]; ++a)
    for (int64_t b = 0; b < l.d[1]; ++b)
      for (int64_t c = 0; c < l.d[2]; ++c)
        for (int64_t e = 0; e < l.d[3]; ++e) {
          T& o = out[l.off(a, b, c, e)];
          A r = alpha * acc[size_t(l.index(a, b, c, e))];
          if (beta != A(0)) r += beta * widen<A>(o);
          o = narrow<T>(r);
        }
}

// The naive direct convolution: every (output pixel, filter tap) pair once, accumulated in the
// compute type A into the direction's output, then blended and rounded once.
template <class T, class A>
void run_conv(const Conv& p, const T* x, const T* w, const T* y, T* out, A alpha, A beta) {
  auto in = [&](const T* base, const Layout& l, int64_t a, int64_t b, int64_t c, int64_t e) {
    const A v = widen<A>(base[l.off(a, b, c, e)]);
    if constexpr (std::is_same_v<A, float>) return p.tf32 ? to_tf32(v) : v;
    return v;
  };
  const Layout& o = p.out();
  std::vector<A> acc(size_t(o.count()), A(0));
  const int64_t K = p.w.d[0], Cg = p.w.d[1], R = p.w.d[2], S = p.w.d[3];
  const int64_t Kg = K / p.groups;
  for (int64_t n = 0; n < p.y.d[0]; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const int64_t c0 = (k / Kg) * Cg;  // the group's first input channel
      for (int64_t oh = 0; oh < p.y.d[2]; ++oh)
        for (int64_t ow = 0; ow < p.y.d[3]; ++ow)
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t r = 0; r < R; ++r) {
              const int64_t ih = oh * p.stride[0] - p.pad[0] + r * p.dilation[0];
              if (ih < 0 || ih >= p.x.d[2]) continue;  // zero padding
              for (int64_t s = 0; s < S; ++s) {
                const int64_t iw = ow * p.stride[1] - p.pad[1] + s * p.dilation[1];
                if (iw < 0 || iw >= p.x.d[3]) continue;
                const int64_t fr = p.flip ? R - 1 - r : r, fs = p.flip ? S - 1 - s : s;
                switch (p.op) {
                  case Op::Forward:
                    acc[size_t(o.index(n, k, oh, ow))] += in(x, p.x, n, c0 + c, ih, iw) * in(w, p.w, k, c, fr, fs);
                    break;
                  case Op::BackwardData:
                    acc[size_t(o.index(n, c0 + c, ih, iw))] += in(w, p.w, k, c, fr, fs) * in(y, p.y, n, k, oh, ow);
                    break;
                  case Op::BackwardFilter:
                    acc[size_t(o.index(k, c, fr, fs))] += in(x, p.x, n, c0 + c, ih, iw) * in(y, p.y, n, k, oh, ow);
                    break;
                }
              }
            }
    }
  blend(o, acc, alpha, beta, out);
}

// The scaling parameters: host doubles for double data, host floats for every other type.
void read_scaling(const char* call, cudnnDataType_t t, const void* alpha, const void* beta, double* a, double* b) {
  const size_t bytes = t == CUDNN_DATA_DOUBLE ? sizeof(double) : sizeof(float);
  if (emu::is_device_range(alpha, bytes) || emu::is_device_range(beta, bytes))
    emu::fault("%s: alpha and beta must point to host memory (cuDNN's scaling parameters), got device memory", call);
  if (t == CUDNN_DATA_DOUBLE) {
    *a = *static_cast<const double*>(alpha);
    *b = *static_cast<const double*>(beta);
  } else {
    *a = *static_cast<const float*>(alpha);
    *b = *static_cast<const float*>(beta);
  }
}

// fault() unless [p, p + bytes) is device memory on the handle's device.
void require_on(cudnnHandle_t h, const void* p, size_t bytes, const char* call, const char* operand) {
  char what[160];
  std::snprintf(what, sizeof what, "%s: %s", call, operand);
  emu::require_device_range(p, bytes, what);
  int device = -1;
  if (bytes > 0 && emu::is_device_range(p, bytes, &device) && device != h->device)
    emu::fault("%s is memory of device %d, but the cuDNN handle belongs to device %d", what, device, h->device);
}

// The three convolution entry points. `operands` names x, w and y in this direction's words.
cudnnStatus_t convolve(Op op, const char* call, const char* const operands[3], cudnnHandle_t h, const void* alpha,
                       const cudnnTensorStruct* xd, const void* x, const cudnnFilterStruct* wd, const void* w,
                       const cudnnConvolutionStruct* cd, int algo, void* workspace, size_t workspace_bytes,
                       const void* beta, const cudnnTensorStruct* yd, const void* y) {
  if (!h || !alpha || !beta || !x || !w || !y) return CUDNN_STATUS_BAD_PARAM;
  Conv p{};
  if (cudnnStatus_t st = make_conv(op, xd, wd, cd, yd, &p); st != CUDNN_STATUS_SUCCESS) return st;
  if (algo < 0 || algo >= algo_count(op)) return CUDNN_STATUS_BAD_PARAM;
  size_t need = 0;
  if (!workspace_for(p, algo, &need)) return CUDNN_STATUS_NOT_SUPPORTED;  // "the chosen algo does not support..."
  if (workspace_bytes < need) return CUDNN_STATUS_BAD_PARAM;  // what cuDNN answers a short workspace
  require_on(h, x, extent_bytes(p.x, p.type), call, operands[0]);
  require_on(h, w, extent_bytes(p.w, p.type), call, operands[1]);
  require_on(h, y, extent_bytes(p.y, p.type), call, operands[2]);
  require_on(h, workspace, workspace_bytes, call, "workSpace");
  double a = 0, b = 0;
  read_scaling(call, p.type, alpha, beta, &a, &b);
  {
    std::lock_guard<std::mutex> lock(g_knob_mu);
    g_last_run[int(op)] = {algo, int(cd->math)};
  }

  // The convolution runs in the handle's stream order; descriptors and scalars are captured now
  // (the caller may destroy them as soon as this returns).
  void* out = const_cast<void*>(op == Op::Forward ? y : op == Op::BackwardData ? x : w);
  emu::enqueue(h->stream, [=] {
    emu::DeviceAccess access;
    if (need > 0) std::memset(workspace, 0xA5, need);  // the algorithm's scratch: overwritten as on a GPU
    auto go = [&](auto* type_tag, auto compute_tag) {
      using T = std::remove_pointer_t<decltype(type_tag)>;
      using A = decltype(compute_tag);
      run_conv<T, A>(p, static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(y),
                     static_cast<T*>(out), A(a), A(b));
    };
    switch (p.type) {
      case CUDNN_DATA_FLOAT: go(static_cast<float*>(nullptr), 0.0f); break;
      case CUDNN_DATA_HALF: go(static_cast<Half*>(nullptr), 0.0f); break;
      case CUDNN_DATA_BFLOAT16: go(static_cast<BFloat16*>(nullptr), 0.0f); break;
      default: go(static_cast<double*>(nullptr), 0.0); break;  // make_conv admitted only these four
    }
  }, call);
  return CUDNN_STATUS_SUCCESS;
}

// The Find*AlgorithmEx entry points: cuDNN runs every algorithm on the caller's operands and
// returns them fastest first. The emulator times nothing: it ranks the workspace-free algorithm
// first (time 1 ms, the workspace one 2 ms: the reverse of its heuristics, so a test tells the two
// rankings apart), reports an algorithm whose workspace exceeds the given one as ALLOC_FAILED,
// and, as the real runs do, overwrites the output operand (scribbled, in stream order): a caller
// that passed an input there sees it corrupted.
template <class Perf, class AlgoEnum>
cudnnStatus_t find_ex(Op op, const char* call, const char* const operands[3], cudnnHandle_t h,
                      const cudnnTensorStruct* xd, const void* x, const cudnnFilterStruct* wd, const void* w,
                      const cudnnConvolutionStruct* cd, const cudnnTensorStruct* yd, const void* y, int requested,
                      int* returned, Perf* perf, void* workspace, size_t workspace_bytes) {
  if (!h || !x || !w || !y || !returned || !perf || requested <= 0) return CUDNN_STATUS_BAD_PARAM;
  Conv p{};
  if (cudnnStatus_t st = make_conv(op, xd, wd, cd, yd, &p); st != CUDNN_STATUS_SUCCESS) return st;
  require_on(h, x, extent_bytes(p.x, p.type), call, operands[0]);
  require_on(h, w, extent_bytes(p.w, p.type), call, operands[1]);
  require_on(h, y, extent_bytes(p.y, p.type), call, operands[2]);
  require_on(h, workspace, workspace_bytes, call, "workSpace");
  std::vector<Algo> list = ranked_algos(op);
  std::stable_partition(list.begin(), list.end(), [](const Algo& a) { return !a.workspace; });
  int n = 0;
  for (const Algo& a : list) {
    if (n == requested) break;
    Perf r{};
    r.algo = static_cast<AlgoEnum>(a.id);
    workspace_for(p, a.id, &r.memory);
    r.status = r.memory <= workspace_bytes ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
    r.time = a.workspace ? 2.0f : 1.0f;
    r.determinism = a.determinism;
    r.mathType = cd->math;
    perf[n++] = r;
  }
  *returned = n;
  {
    std::lock_guard<std::mutex> lock(g_knob_mu);
    ++g_find_calls;
  }
  void* out = const_cast<void*>(op == Op::Forward ? y : op == Op::BackwardData ? x : w);
  const size_t out_bytes = extent_bytes(op == Op::Forward ? p.y : op == Op::BackwardData ? p.x : p.w, p.type);
  emu::enqueue(h->stream, [=] {
    emu::DeviceAccess access;
    std::memset(out, 0xA5, out_bytes);
  }, call);
  return CUDNN_STATUS_SUCCESS;
}

// C = alpha * A + beta * C, A broadcast along its size-1 dimensions.
template <class T, class S>
void run_add(const Layout& la, const T* A, const Layout& lc, T* C, S alpha, S beta) {
  auto at = [&](int i, int64_t v) { return la.d[i] == 1 ? 0 : v; };
  for (int64_t n = 0; n < lc.d[0]; ++n)
    for (int64_t c = 0; c < lc.d[1]; ++c)
      for (int64_t h = 0; h < lc.d[2]; ++h)
        for (int64_t w = 0; w < lc.d[3]; ++w) {
          T& o = C[lc.off(n, c, h, w)];
          S r = alpha * widen<S>(A[la.off(at(0, n), at(1, c), at(2, h), at(3, w))]);
          if (beta != S(0)) r += beta * widen<S>(o);
          o = narrow<T>(r);
        }
}

}  // namespace

// ---- handles ----

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM;
  *handle = new cudnnContext{emu::current_device(), nullptr};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM;
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}

// The reference: BAD_PARAM for a NULL handle, CUDNN_STATUS_MAPPING_ERROR when the stream does
// not belong to the handle's device (MAPPING_ERROR is spelled INTERNAL_ERROR_TEXTURE_CREATION_FAILED
// in cuDNN 9's enum; the old name is a deprecated alias of it).
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM;
  const bool special = stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
  if (!special && emu::stream_device(stream) != handle->device)
    return CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED;
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* stream) {
  if (!handle || !stream) return CUDNN_STATUS_BAD_PARAM;
  *stream = handle->stream;
  return CUDNN_STATUS_SUCCESS;
}

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
#define MT_STATUS(name) \
  case name: return #name;
    MT_STATUS(CUDNN_STATUS_SUCCESS)
    MT_STATUS(CUDNN_STATUS_NOT_INITIALIZED)
    MT_STATUS(CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH)
    MT_STATUS(CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH)
    MT_STATUS(CUDNN_STATUS_DEPRECATED)
    MT_STATUS(CUDNN_STATUS_LICENSE_ERROR)
    MT_STATUS(CUDNN_STATUS_RUNTIME_IN_PROGRESS)
    MT_STATUS(CUDNN_STATUS_RUNTIME_FP_OVERFLOW)
    MT_STATUS(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED)
    MT_STATUS(CUDNN_STATUS_BAD_PARAM)
    MT_STATUS(CUDNN_STATUS_BAD_PARAM_NULL_POINTER)
    MT_STATUS(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER)
    MT_STATUS(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED)
    MT_STATUS(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND)
    MT_STATUS(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT)
    MT_STATUS(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH)
    MT_STATUS(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH)
    MT_STATUS(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES)
    MT_STATUS(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE)
    MT_STATUS(CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH)
    MT_STATUS(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE)
    MT_STATUS(CUDNN_STATUS_NOT_SUPPORTED)
    MT_STATUS(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN)
    MT_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SHAPE)
    MT_STATUS(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE)
    MT_STATUS(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT)
    MT_STATUS(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER)
    MT_STATUS(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART)
    MT_STATUS(CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH)
    MT_STATUS(CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING)
    MT_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE)
    MT_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT)
    MT_STATUS(CUDNN_STATUS_NOT_SUPPORTED_PADDING)
    MT_STATUS(CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM)
    MT_STATUS(CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API)
    MT_STATUS(CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE)
    MT_STATUS(CUDNN_STATUS_INTERNAL_ERROR)
    MT_STATUS(CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED)
    MT_STATUS(CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE)
    MT_STATUS(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED)
    MT_STATUS(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
    MT_STATUS(CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM)
    MT_STATUS(CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED)
    MT_STATUS(CUDNN_STATUS_EXECUTION_FAILED)
    MT_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER)
    MT_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CUBLAS)
    MT_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CUDART)
    MT_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CURAND)
#undef MT_STATUS
    case 2001: return "CUDNN_STATUS_INVALID_VALUE";  // a deprecated code outside the v9 names
  }
  return "CUDNN_UNKNOWN_STATUS";
}

// ---- descriptors ----

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* desc) {
  if (!desc) return CUDNN_STATUS_BAD_PARAM;
  *desc = new cudnnTensorStruct;
  count_descriptor();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t desc) {
  delete desc;  // destroying NULL is a no-op that succeeds
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t desc, cudnnTensorFormat_t format,
                                         cudnnDataType_t dataType, int n, int c, int h, int w) {
  const int d[4] = {n, c, h, w};
  const int64_t C = c, H = h, W = w;
  switch (format) {
    case CUDNN_TENSOR_NCHW: {
      const int64_t s[4] = {C * H * W, H * W, W, 1};
      return set_tensor(desc, dataType, d, s);
    }
    case CUDNN_TENSOR_NHWC: {
      const int64_t s[4] = {H * W * C, 1, W * C, C};
      return set_tensor(desc, dataType, d, s);
    }
    case CUDNN_TENSOR_NCHW_VECT_C: return desc ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_BAD_PARAM;
    default: return CUDNN_STATUS_BAD_PARAM;
  }
}

cudnnStatus_t cudnnSetTensor4dDescriptorEx(cudnnTensorDescriptor_t desc, cudnnDataType_t dataType, int n, int c,
                                           int h, int w, int nStride, int cStride, int hStride, int wStride) {
  const int d[4] = {n, c, h, w};
  const int64_t s[4] = {nStride, cStride, hStride, wStride};  // negative ones are refused by the operations
  return set_tensor(desc, dataType, d, s);
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* desc) {
  if (!desc) return CUDNN_STATUS_BAD_PARAM;
  *desc = new cudnnFilterStruct;
  count_descriptor();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t desc) {
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t desc, cudnnDataType_t dataType,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w) {
  if (!desc || !valid_type(dataType) || k < 0 || c < 0 || h < 0 || w < 0) return CUDNN_STATUS_BAD_PARAM;
  const int64_t K = k, C = c, R = h, S = w;
  Layout l;
  l.d[0] = K, l.d[1] = C, l.d[2] = R, l.d[3] = S;
  if (format == CUDNN_TENSOR_NCHW) {  // KCRS
    l.s[0] = C * R * S, l.s[1] = R * S, l.s[2] = S, l.s[3] = 1;
  } else if (format == CUDNN_TENSOR_NHWC) {  // KRSC
    l.s[0] = R * S * C, l.s[1] = 1, l.s[2] = S * C, l.s[3] = C;
  } else {
    return format == CUDNN_TENSOR_NCHW_VECT_C ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_BAD_PARAM;
  }
  if (l.count() >= kMaxElements) return CUDNN_STATUS_NOT_SUPPORTED;
  desc->type = dataType;
  desc->l = l;
  desc->set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* desc) {
  if (!desc) return CUDNN_STATUS_BAD_PARAM;
  *desc = new cudnnConvolutionStruct;
  count_descriptor();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t desc) {
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}

// The reference: BAD_PARAM for a NULL descriptor, a negative pad, a stride or dilation <= 0, or
// an invalid mode; computeType must be a data type (whether it is a supported configuration is
// decided by the operations).
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t desc, int pad_h, int pad_w, int u, int v,
                                              int dilation_h, int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t computeType) {
  if (!desc || pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dilation_h <= 0 || dilation_w <= 0 ||
      (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION) || !valid_type(computeType))
    return CUDNN_STATUS_BAD_PARAM;
  desc->pad[0] = pad_h, desc->pad[1] = pad_w;
  desc->stride[0] = u, desc->stride[1] = v;
  desc->dilation[0] = dilation_h, desc->dilation[1] = dilation_w;
  desc->mode = mode;
  desc->compute = computeType;
  desc->set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t desc, int groupCount) {
  if (!desc || groupCount < 1) return CUDNN_STATUS_BAD_PARAM;
  desc->groups = groupCount;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t desc, cudnnMathType_t mathType) {
  if (!desc || mathType < CUDNN_DEFAULT_MATH || mathType > CUDNN_FMA_MATH) return CUDNN_STATUS_BAD_PARAM;
  desc->math = mathType;
  return CUDNN_STATUS_SUCCESS;
}

// outputDim = 1 + (inputDim + 2 * pad - ((filterDim - 1) * dilation + 1)) / stride, per spatial
// dimension; n is the input's, c the filter's K. BAD_PARAM for a descriptor that is not set, an
// input/filter feature-map mismatch, or a filter larger than the padded input.
cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t convDesc,
                                                    const cudnnTensorDescriptor_t inputTensorDesc,
                                                    const cudnnFilterDescriptor_t filterDesc, int* n, int* c, int* h,
                                                    int* w) {
  if (!n || !c || !h || !w) return CUDNN_STATUS_BAD_PARAM;
  if (cudnnStatus_t st = check_conv_descs(inputTensorDesc, filterDesc, convDesc); st != CUDNN_STATUS_SUCCESS) return st;
  const cudnnConvolutionStruct& cd = *convDesc;
  const Layout &x = inputTensorDesc->l, &f = filterDesc->l;
  *n = int(x.d[0]);
  *c = int(f.d[0]);
  *h = int(out_dim(x.d[2], f.d[2], cd.pad[0], cd.stride[0], cd.dilation[0]));
  *w = int(out_dim(x.d[3], f.d[3], cd.pad[1], cd.stride[1], cd.dilation[1]));
  return CUDNN_STATUS_SUCCESS;
}

// ---- algorithm heuristics and workspaces ----

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
                                                     const cudnnFilterDescriptor_t filterDesc,
                                                     const cudnnConvolutionDescriptor_t convDesc,
                                                     const cudnnTensorDescriptor_t destDesc,
                                                     const int requestedAlgoCount, int* returnedAlgoCount,
                                                     cudnnConvolutionFwdAlgoPerf_t* perfResults) {
  return heuristics<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
      Op::Forward, handle, srcDesc, filterDesc, convDesc, destDesc, requestedAlgoCount, returnedAlgoCount, perfResults);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t handle,
                                                          const cudnnFilterDescriptor_t filterDesc,
                                                          const cudnnTensorDescriptor_t diffDesc,
                                                          const cudnnConvolutionDescriptor_t convDesc,
                                                          const cudnnTensorDescriptor_t gradDesc,
                                                          const int requestedAlgoCount, int* returnedAlgoCount,
                                                          cudnnConvolutionBwdDataAlgoPerf_t* perfResults) {
  return heuristics<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      Op::BackwardData, handle, gradDesc, filterDesc, convDesc, diffDesc, requestedAlgoCount, returnedAlgoCount,
      perfResults);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t handle,
                                                            const cudnnTensorDescriptor_t srcDesc,
                                                            const cudnnTensorDescriptor_t diffDesc,
                                                            const cudnnConvolutionDescriptor_t convDesc,
                                                            const cudnnFilterDescriptor_t gradDesc,
                                                            const int requestedAlgoCount, int* returnedAlgoCount,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t* perfResults) {
  return heuristics<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      Op::BackwardFilter, handle, srcDesc, gradDesc, convDesc, diffDesc, requestedAlgoCount, returnedAlgoCount,
      perfResults);
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
                                                      const cudnnFilterDescriptor_t wDesc,
                                                      const cudnnConvolutionDescriptor_t convDesc,
                                                      const cudnnTensorDescriptor_t yDesc,
                                                      cudnnConvolutionFwdAlgo_t algo, size_t* sizeInBytes) {
  return workspace_query(Op::Forward, handle, xDesc, wDesc, convDesc, yDesc, algo, sizeInBytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc,
                                                           const cudnnTensorDescriptor_t dyDesc,
                                                           const cudnnConvolutionDescriptor_t convDesc,
                                                           const cudnnTensorDescriptor_t dxDesc,
                                                           cudnnConvolutionBwdDataAlgo_t algo, size_t* sizeInBytes) {
  return workspace_query(Op::BackwardData, handle, dxDesc, wDesc, convDesc, dyDesc, algo, sizeInBytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
                                                             const cudnnTensorDescriptor_t dyDesc,
                                                             const cudnnConvolutionDescriptor_t convDesc,
                                                             const cudnnFilterDescriptor_t gradDesc,
                                                             cudnnConvolutionBwdFilterAlgo_t algo,
                                                             size_t* sizeInBytes) {
  return workspace_query(Op::BackwardFilter, handle, xDesc, gradDesc, convDesc, dyDesc, algo, sizeInBytes);
}

// ---- the operations ----

cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
                                                     const void* x, const cudnnFilterDescriptor_t wDesc, const void* w,
                                                     const cudnnConvolutionDescriptor_t convDesc,
                                                     const cudnnTensorDescriptor_t yDesc, void* y,
                                                     const int requestedAlgoCount, int* returnedAlgoCount,
                                                     cudnnConvolutionFwdAlgoPerf_t* perfResults, void* workSpace,
                                                     size_t workSpaceSizeInBytes) {
  static const char* const names[3] = {"x", "w", "y"};
  return find_ex<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
      Op::Forward, "cudnnFindConvolutionForwardAlgorithmEx", names, handle, xDesc, x, wDesc, w, convDesc, yDesc, y,
      requestedAlgoCount, returnedAlgoCount, perfResults, workSpace, workSpaceSizeInBytes);
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc,
                                                          const void* w, const cudnnTensorDescriptor_t dyDesc,
                                                          const void* dy, const cudnnConvolutionDescriptor_t convDesc,
                                                          const cudnnTensorDescriptor_t dxDesc, void* dx,
                                                          const int requestedAlgoCount, int* returnedAlgoCount,
                                                          cudnnConvolutionBwdDataAlgoPerf_t* perfResults,
                                                          void* workSpace, size_t workSpaceSizeInBytes) {
  static const char* const names[3] = {"dx", "w", "dy"};
  return find_ex<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      Op::BackwardData, "cudnnFindConvolutionBackwardDataAlgorithmEx", names, handle, dxDesc, dx, wDesc, w, convDesc,
      dyDesc, dy, requestedAlgoCount, returnedAlgoCount, perfResults, workSpace, workSpaceSizeInBytes);
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
                                                            const void* x, const cudnnTensorDescriptor_t dyDesc,
                                                            const void* y, const cudnnConvolutionDescriptor_t convDesc,
                                                            const cudnnFilterDescriptor_t dwDesc, void* dw,
                                                            const int requestedAlgoCount, int* returnedAlgoCount,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t* perfResults,
                                                            void* workSpace, size_t workSpaceSizeInBytes) {
  static const char* const names[3] = {"x", "dw", "dy"};
  return find_ex<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      Op::BackwardFilter, "cudnnFindConvolutionBackwardFilterAlgorithmEx", names, handle, xDesc, x, dwDesc, dw,
      convDesc, dyDesc, y, requestedAlgoCount, returnedAlgoCount, perfResults, workSpace, workSpaceSizeInBytes);
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t xDesc,
                                      const void* x, const cudnnFilterDescriptor_t wDesc, const void* w,
                                      const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo,
                                      void* workSpace, size_t workSpaceSizeInBytes, const void* beta,
                                      const cudnnTensorDescriptor_t yDesc, void* y) {
  static const char* const names[3] = {"x", "w", "y"};
  return convolve(Op::Forward, "cudnnConvolutionForward", names, handle, alpha, xDesc, x, wDesc, w, convDesc, algo,
                  workSpace, workSpaceSizeInBytes, beta, yDesc, y);
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha, const cudnnFilterDescriptor_t wDesc,
                                           const void* w, const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                           const cudnnConvolutionDescriptor_t convDesc,
                                           cudnnConvolutionBwdDataAlgo_t algo, void* workSpace,
                                           size_t workSpaceSizeInBytes, const void* beta,
                                           const cudnnTensorDescriptor_t dxDesc, void* dx) {
  static const char* const names[3] = {"dx", "w", "dy"};
  return convolve(Op::BackwardData, "cudnnConvolutionBackwardData", names, handle, alpha, dxDesc, dx, wDesc, w,
                  convDesc, algo, workSpace, workSpaceSizeInBytes, beta, dyDesc, dy);
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha,
                                             const cudnnTensorDescriptor_t xDesc, const void* x,
                                             const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                             const cudnnConvolutionDescriptor_t convDesc,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workSpace,
                                             size_t workSpaceSizeInBytes, const void* beta,
                                             const cudnnFilterDescriptor_t dwDesc, void* dw) {
  static const char* const names[3] = {"x", "dw", "dy"};
  return convolve(Op::BackwardFilter, "cudnnConvolutionBackwardFilter", names, handle, alpha, xDesc, x, dwDesc, dw,
                  convDesc, algo, workSpace, workSpaceSizeInBytes, beta, dyDesc, dy);
}

// The reference: each dimension of A equals C's or is 1 (broadcast); BAD_PARAM when they are
// incompatible or the data types differ. The scaling type is double for double data, float
// otherwise, and 16-bit results are rounded once.
cudnnStatus_t cudnnAddTensor(cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t aDesc,
                             const void* A, const void* beta, const cudnnTensorDescriptor_t cDesc, void* C) {
  if (!handle || !alpha || !beta || !A || !C || !aDesc || !cDesc || !aDesc->set || !cDesc->set)
    return CUDNN_STATUS_BAD_PARAM;
  if (aDesc->type != cDesc->type) return CUDNN_STATUS_BAD_PARAM;
  const Layout &la = aDesc->l, &lc = cDesc->l;
  for (int i = 0; i < 4; ++i)
    if (la.d[i] != lc.d[i] && la.d[i] != 1) return CUDNN_STATUS_BAD_PARAM;
  const cudnnDataType_t t = cDesc->type;
  if (elem_size(t) == 0 || negative_strides(la) || negative_strides(lc) || overlaps(lc))
    return CUDNN_STATUS_NOT_SUPPORTED;
  require_on(handle, A, extent_bytes(la, t), "cudnnAddTensor", "A");
  require_on(handle, C, extent_bytes(lc, t), "cudnnAddTensor", "C");
  double a = 0, b = 0;
  read_scaling("cudnnAddTensor", t, alpha, beta, &a, &b);

  emu::enqueue(handle->stream, [la = la, lc = lc, t, A, C, a, b] {
    emu::DeviceAccess access;
    switch (t) {
      case CUDNN_DATA_FLOAT:
        run_add(la, static_cast<const float*>(A), lc, static_cast<float*>(C), float(a), float(b));
        break;
      case CUDNN_DATA_HALF:
        run_add(la, static_cast<const Half*>(A), lc, static_cast<Half*>(C), float(a), float(b));
        break;
      case CUDNN_DATA_BFLOAT16:
        run_add(la, static_cast<const BFloat16*>(A), lc, static_cast<BFloat16*>(C), float(a), float(b));
        break;
      default: run_add(la, static_cast<const double*>(A), lc, static_cast<double*>(C), a, b); break;
    }
  }, "cudnnAddTensor");
  return CUDNN_STATUS_SUCCESS;
}

namespace mixtape::cuda_emulator {
CudnnRun cudnn_last_run(int direction) {
  std::lock_guard<std::mutex> lock(g_knob_mu);
  return direction >= 0 && direction < 3 ? g_last_run[direction] : CudnnRun{};
}
void cudnn_rank_nondeterministic_first(bool on) {
  std::lock_guard<std::mutex> lock(g_knob_mu);
  g_nondeterministic_first = on;
}
void cudnn_report_math(int math) {
  std::lock_guard<std::mutex> lock(g_knob_mu);
  g_report_math = math;
}
uint64_t cudnn_find_calls() {
  std::lock_guard<std::mutex> lock(g_knob_mu);
  return g_find_calls;
}
uint64_t cudnn_descriptors_created() {
  std::lock_guard<std::mutex> lock(g_knob_mu);
  return g_descriptors_created;
}
}  // namespace mixtape::cuda_emulator
