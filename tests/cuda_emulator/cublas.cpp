// tests/cuda_emulator/cublas.cpp — the cuBLAS and cuBLASLt calls mixtape makes, on the host, for
// MIXTAPE_CUDA=EMULATOR builds: handles (device, stream, math mode), status strings, and
// cublasGemmEx / cublasGemmStridedBatchedEx, defined as the extern "C" functions the toolkit
// headers declare (cublas_v2.h renames cublasCreate -> cublasCreate_v2 etc., so these definitions
// are the _v2 symbols callers link to).
//
// Semantics are NVIDIA's cuBLAS API reference, not mixtape's usage:
//   - column-major C = alpha * op(A) * op(B) + beta * C, op(A) m x k, op(B) k x n, C m x n;
//   - argument checks in the documented order of statuses: a null handle is
//     CUBLAS_STATUS_NOT_INITIALIZED; bad trans / negative dims / short leading dimensions /
//     null alpha or beta / negative batchCount are CUBLAS_STATUS_INVALID_VALUE; a
//     (computeType, Atype, Btype, Ctype) row missing from cublasGemmEx's table, or an unknown
//     algo, is CUBLAS_STATUS_NOT_SUPPORTED;
//   - cuBLASLt: handles, and the FP8 matmul (cublasLtMatmul and its descriptors; its own section
//     below says what is emulated);
//   - alpha and beta are host pointers (the default CUBLAS_POINTER_MODE_HOST; this emulator has no
//     cublasSetPointerMode) of the scale type: __half for COMPUTE_16F, float for the 32F compute
//     types, double for 64F;
//   - the dot products accumulate in the compute type; alpha * acc + beta * C is formed in the
//     scale type and rounded once, to nearest even, to Ctype; C is not read when beta == 0 ("C
//     does not have to be a valid input"), so NaNs there do not propagate.
// Where the reference lets cuBLAS choose ("allows ... down-conversion"), the emulator takes the
// least precise documented choice, so a caller's tolerance that only holds for the exact path
// fails here: FAST_TF32 / FAST_16F / FAST_16BF (and COMPUTE_32F on fp32 data under the handle's
// CUBLAS_TF32_TENSOR_OP_MATH, or the deprecated CUBLAS_TENSOR_OP_MATH = FAST_16F) always round
// the fp32 inputs, to nearest even, before multiplying; COMPUTE_16F ("at least" half precision)
// rounds its running sum to fp16 at every step.
//
// Workspaces (cublasSetWorkspace): a user workspace must be 256-byte aligned
// (CUBLAS_STATUS_INVALID_VALUE) device memory of the handle's device (else a fault), and
// cublasSetStream "unconditionally resets the cuBLAS library workspace back to the default
// workspace pool". A user workspace is scratch memory of the kernels that use it, so two streams
// whose work may overlap must not share one: a GEMM issued with a workspace whose previous GEMM
// went to another stream that still holds queued work faults (stricter than a GPU, which would
// accept an event ordering the two; mixtape gives every stream its own).
//
// Misuse a GPU answers with a fault or undefined behaviour aborts through fault(): an operand that
// is not device memory or runs past its allocation, alpha / beta in device memory (host pointer
// mode), an operand, stream or current device other than the handle's, a destroyed handle,
// strided batches whose C matrices overlap (the batches run concurrently on a GPU, so such
// writes race).
//
// Not emulated (CUBLAS_STATUS_NOT_SUPPORTED here although cuBLAS takes them, so a new use fails
// loudly): complex and integer types, the emulated compute types (32F_EMULATED_16BFX9,
// 64F_EMULATED_FIXEDPOINT). Arguments are checked at the call; the GEMM runs in the handle's stream order (emulator.h).
#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "core/bfloat16.h"
#include "core/float8.h"
#include "core/half.h"
#include "tests/cuda_emulator/emulator.h"

struct cublasContext {
  int device;              // the current device at cublasCreate: the handle's resources live there
  cudaStream_t stream;     // nullptr (the legacy default stream) until cublasSetStream
  cublasMath_t math_mode;  // CUBLAS_DEFAULT_MATH until cublasSetMathMode
  void* workspace = nullptr;  // cublasSetWorkspace's; nullptr: cuBLAS's default pool
  size_t workspace_bytes = 0;
};
struct cublasLtContext {
  int device;
};

namespace mixtape::cuda_emulator {
namespace {

// ---- handles ----

// Every live cuBLAS and cuBLASLt handle: a pointer that cublasCreate / cublasLtCreate did not
// return, or one already destroyed, is a use-after-free on a GPU, so it faults instead of being
// dereferenced. Leaked, because mixtape returns handles to pools during static destruction.
struct Registry {
  std::mutex mu;
  std::set<const void*> live;
};
Registry& registry() {
  static auto* r = new Registry;
  return *r;
}
void add_handle(const void* h) {
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().live.insert(h);
}
void remove_handle(const void* h) {
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().live.erase(h);
}
// false for nullptr (the caller answers CUBLAS_STATUS_NOT_INITIALIZED, as documented).
bool live(const void* h, const char* call) {
  if (!h) return false;
  std::lock_guard<std::mutex> lock(registry().mu);
  if (!registry().live.count(h)) fault("%s: %p is not a live handle (destroyed, or never created)", call, h);
  return true;
}

// cublasSetMathMode takes one of the modes, optionally or-ed with the two flag bits.
bool valid_math_mode(int mode) {
  const int base = mode & ~(CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION | CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH);
  return base == CUBLAS_DEFAULT_MATH || base == CUBLAS_TENSOR_OP_MATH || base == CUBLAS_PEDANTIC_MATH ||
         base == CUBLAS_TF32_TENSOR_OP_MATH || base == CUBLAS_FP32_EMULATED_BF16X9_MATH;
}

// ---- element types ----

size_t element_size(cudaDataType t) {
  switch (t) {
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    case CUDA_R_32F: return 4;
    default: return 8;  // CUDA_R_64F: the only other type the plan admits
  }
}

// Element i of an array of type t, widened exactly to double.
double load(const char* p, cudaDataType t, int64_t i) {
  switch (t) {
    case CUDA_R_16F: {
      Half h;
      std::memcpy(&h, p + 2 * i, 2);
      return static_cast<float>(h);
    }
    case CUDA_R_16BF: {
      BFloat16 b;
      std::memcpy(&b, p + 2 * i, 2);
      return static_cast<float>(b);
    }
    case CUDA_R_32F: {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
    default: {
      double d;
      std::memcpy(&d, p + 8 * i, 8);
      return d;
    }
  }
}

// Stores v, a value of the scale type (exact in double), as element i: the one rounding to Ctype.
void store(char* p, cudaDataType t, int64_t i, double v) {
  switch (t) {
    case CUDA_R_16F: {
      const Half h(static_cast<float>(v));
      std::memcpy(p + 2 * i, &h, 2);
      break;
    }
    case CUDA_R_16BF: {
      const BFloat16 b(static_cast<float>(v));
      std::memcpy(p + 2 * i, &b, 2);
      break;
    }
    case CUDA_R_32F: {
      const float f = static_cast<float>(v);
      std::memcpy(p + 4 * i, &f, 4);
      break;
    }
    default: std::memcpy(p + 8 * i, &v, 8);
  }
}

// fp32 -> TF32 (fp32's exponent, 10 explicit mantissa bits), round to nearest even; a carry out
// of the mantissa bumps the exponent (to inf above the largest TF32). NaNs pass unchanged.
float round_to_tf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return x;
  u = (u + 0x0FFFu + ((u >> 13) & 1u)) & ~0x1FFFu;
  std::memcpy(&x, &u, 4);
  return x;
}

// ---- the GEMM ----

enum class Acc { F16, F32, F64 };                  // the compute type's arithmetic (and scale type)
enum class Narrow { None, TF32, Half, BFloat16 };  // what fp32 inputs are rounded to first

struct Plan {
  Acc acc;
  Narrow narrow;
};

// cublasGemmEx's table of supported (computeType, scale type, Atype/Btype, Ctype), real types
// only; the scale type follows from the compute type. The handle's math mode matters only for
// plain COMPUTE_32F on fp32 data ("single precision routines"): CUBLAS_TF32_TENSOR_OP_MATH
// allows TF32, the deprecated CUBLAS_TENSOR_OP_MATH means COMPUTE_32F_FAST_16F. The _PEDANTIC
// compute types ignore it.
bool make_plan(cublasComputeType_t ct, cudaDataType at, cudaDataType bt, cudaDataType c, cublasMath_t math,
               Plan* plan) {
  if (at != bt) return false;
  const bool f32_data = at == CUDA_R_32F && c == CUDA_R_32F;
  switch (ct) {
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC: *plan = {Acc::F16, Narrow::None}; return at == CUDA_R_16F && c == CUDA_R_16F;
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC: {
      *plan = {Acc::F32, Narrow::None};
      if (ct == CUBLAS_COMPUTE_32F && f32_data) {
        const int base =
            math & ~(CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION | CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH);
        if (base == CUBLAS_TF32_TENSOR_OP_MATH) plan->narrow = Narrow::TF32;
        if (base == CUBLAS_TENSOR_OP_MATH) plan->narrow = Narrow::Half;
      }
      const bool half_in = at == CUDA_R_16F || at == CUDA_R_16BF;
      return f32_data || (half_in && (c == at || c == CUDA_R_32F));
    }
    case CUBLAS_COMPUTE_32F_FAST_16F: *plan = {Acc::F32, Narrow::Half}; return f32_data;
    case CUBLAS_COMPUTE_32F_FAST_16BF: *plan = {Acc::F32, Narrow::BFloat16}; return f32_data;
    case CUBLAS_COMPUTE_32F_FAST_TF32: *plan = {Acc::F32, Narrow::TF32}; return f32_data;
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC: *plan = {Acc::F64, Narrow::None}; return at == CUDA_R_64F && c == CUDA_R_64F;
    default: return false;
  }
}

bool valid_algo(cublasGemmAlgo_t algo) {
  const int a = algo;
  return a == CUBLAS_GEMM_DEFAULT || (a >= CUBLAS_GEMM_ALGO0 && a <= CUBLAS_GEMM_ALGO23) ||
         (a >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && a <= CUBLAS_GEMM_ALGO15_TENSOR_OP) || a == CUBLAS_GEMM_AUTOTUNE;
}

double narrow(double x, Narrow n) {
  switch (n) {
    case Narrow::None: return x;
    case Narrow::TF32: return round_to_tf32(static_cast<float>(x));
    case Narrow::Half: return static_cast<float>(Half(static_cast<float>(x)));
    case Narrow::BFloat16: return static_cast<float>(BFloat16(static_cast<float>(x)));
  }
  return x;
}

// One k-long dot product in the compute type, in order, one fused multiply-add per term (FP32
// and FP64 FMA units; exact products for the 16-bit and TF32 inputs tensor cores take).
// COMPUTE_16F keeps the running sum in fp16: each step is rounded to half.
double dot(const double* x, const double* y, int64_t k, Acc acc) {
  if (acc == Acc::F64) {
    double s = 0.0;
    for (int64_t l = 0; l < k; ++l) s = std::fma(x[l], y[l], s);
    return s;
  }
  float s = 0.0f;
  for (int64_t l = 0; l < k; ++l) {
    s = std::fma(static_cast<float>(x[l]), static_cast<float>(y[l]), s);
    if (acc == Acc::F16) s = static_cast<float>(Half(s));
  }
  return s;
}

// alpha * acc + beta * c in the scale type (before the rounding to Ctype); c is read only when
// beta != 0, by the caller.
double combine(double alpha, double acc, double beta, double c, Acc a) {
  if (a == Acc::F64) return beta == 0.0 ? alpha * acc : std::fma(alpha, acc, beta * c);
  const float fa = static_cast<float>(alpha), fb = static_cast<float>(beta), facc = static_cast<float>(acc);
  if (fb == 0.0f) return fa * facc;
  float bc = fb * static_cast<float>(c);
  if (a == Acc::F16) bc = static_cast<float>(Half(bc));  // fp16 arithmetic: the product is a half
  return std::fma(fa, facc, bc);
}

struct Gemm {
  bool ta, tb;  // op(A) = A^T, op(B) = B^T (CUBLAS_OP_C is OP_T for real types)
  int64_t m, n, k, lda, ldb, ldc;
  cudaDataType ab_type, c_type;
  Plan plan;
  double alpha, beta;  // in the scale type, widened exactly
};

// One GEMM on device memory (the caller holds a DeviceAccess scope).
void run(const Gemm& g, const char* A, const char* B, char* C) {
  // op(A)'s rows and op(B)'s columns as contiguous k-vectors, narrowed as the compute type says.
  std::vector<double> a(static_cast<size_t>(g.m * g.k)), b(static_cast<size_t>(g.n * g.k));
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t l = 0; l < g.k; ++l)
      a[i * g.k + l] = narrow(load(A, g.ab_type, g.ta ? i * g.lda + l : l * g.lda + i), g.plan.narrow);
  for (int64_t j = 0; j < g.n; ++j)
    for (int64_t l = 0; l < g.k; ++l)
      b[j * g.k + l] = narrow(load(B, g.ab_type, g.tb ? l * g.ldb + j : j * g.ldb + l), g.plan.narrow);
  for (int64_t j = 0; j < g.n; ++j)
    for (int64_t i = 0; i < g.m; ++i) {
      const double acc = dot(a.data() + i * g.k, b.data() + j * g.k, g.k, g.plan.acc);
      const int64_t at = j * g.ldc + i;
      const double c = g.beta == 0.0 ? 0.0 : load(C, g.c_type, at);
      store(C, g.c_type, at, combine(g.alpha, acc, g.beta, c, g.plan.acc));
    }
}

// Bytes from the first element of a column-major rows x cols array to one past its last.
size_t extent(int64_t rows, int64_t cols, int64_t ld, size_t es) {
  return rows == 0 || cols == 0 ? 0 : static_cast<size_t>((cols - 1) * ld + rows) * es;
}

// Faults unless [p, p + bytes) is device memory of the handle's device.
void check_operand(const char* call, const char* name, int64_t batch, const void* p, size_t bytes, int device) {
  char what[128];
  if (batch < 0)
    std::snprintf(what, sizeof what, "%s: %s", call, name);
  else
    std::snprintf(what, sizeof what, "%s: %s (batch %lld)", call, name, static_cast<long long>(batch));
  require_device_range(p, bytes, what);
  int d = device;
  if (bytes > 0 && is_device_range(p, bytes, &d) && d != device)
    fault("%s is memory of device %d, but the handle belongs to device %d", what, d, device);
}

// Strided batches run concurrently on a GPU: two writing one element of C race. Faults if any
// element is in two batches' C.
void check_disjoint_outputs(const char* call, int64_t m, int64_t n, int64_t ldc, long long stride, int batch) {
  const int64_t span = (n - 1) * ldc + m;  // elements from one C's first to one past its last
  const int64_t step = std::llabs(stride);
  if (batch < 2 || step >= span) return;  // consecutive matrices cannot meet
  std::vector<bool> written(static_cast<size_t>((batch - 1) * step + span));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t base = (stride >= 0 ? b : batch - 1 - b) * step;
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) {
        const size_t at = static_cast<size_t>(base + j * ldc + i);
        if (written[at])
          fault(
              "%s: batch %lld writes element (%lld, %lld) of C, which another batch writes too (strideC=%lld, "
              "ldc=%lld)",
              call, static_cast<long long>(b), static_cast<long long>(i), static_cast<long long>(j), stride,
              static_cast<long long>(ldc));
        written[at] = true;
      }
  }
}

// The workspace each user workspace's last GEMM went to, and the last GEMM's workspace.
struct WorkspaceUse {
  std::mutex mu;
  std::map<const void*, cudaStream_t> last_stream;
  const void* last = nullptr;
};
WorkspaceUse& workspace_use() {
  static auto* w = new WorkspaceUse;
  return *w;
}
void use_workspace(const char* call, cublasHandle_t h) {
  WorkspaceUse& w = workspace_use();
  std::lock_guard<std::mutex> lock(w.mu);
  w.last = h->workspace;
  if (!h->workspace) return;
  auto [it, first] = w.last_stream.emplace(h->workspace, h->stream);
  if (!first && it->second != h->stream) {
    if (stream_has_queued_work(it->second))
      fault("%s: workspace %p is used on stream %p while stream %p, whose queued work used it too, has not run "
            "it: two streams that may run at the same time share one cuBLAS workspace",
            call, h->workspace, static_cast<void*>(h->stream), static_cast<void*>(it->second));
    it->second = h->stream;
  }
}

cublasStatus_t gemm(const char* call, cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m,
                    int n, int k, const void* alpha, const void* A, cudaDataType at, int lda, long long stride_a,
                    const void* B, cudaDataType bt, int ldb, long long stride_b, const void* beta, void* C,
                    cudaDataType ct, int ldc, long long stride_c, int batch, cublasComputeType_t compute,
                    cublasGemmAlgo_t algo, bool batched) {
  if (!live(h, call)) return CUBLAS_STATUS_NOT_INITIALIZED;
  auto valid_op = [](cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; };
  if (!valid_op(transa) || !valid_op(transb) || m < 0 || n < 0 || k < 0 || batch < 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  // A is stored m x k (k x m when transposed), B k x n (n x k), C m x n.
  const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
  if (lda < std::max<int64_t>(1, a_rows) || ldb < std::max<int64_t>(1, b_rows) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  Plan plan{};
  if (!valid_algo(algo) || !make_plan(compute, at, bt, ct, h->math_mode, &plan)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;  // nothing to compute or touch

  // cuBLAS launches on the handle's stream from the calling thread: the stream and the current
  // device must be the handle's device, whose workspace the kernels use.
  if (current_device() != h->device)
    fault("%s: the current device is %d, but the handle belongs to device %d", call, current_device(), h->device);
  if (stream_device(h->stream) != h->device)
    fault("%s: the handle's stream belongs to device %d, the handle to device %d", call, stream_device(h->stream),
          h->device);

  // Host scalars of the scale type (CUBLAS_POINTER_MODE_HOST): a device pointer would be
  // dereferenced on the host, a crash on a GPU machine too.
  const size_t scalar_bytes = plan.acc == Acc::F16 ? 2 : plan.acc == Acc::F32 ? 4 : 8;
  if (is_device_range(alpha, scalar_bytes) || is_device_range(beta, scalar_bytes))
    fault("%s: alpha or beta is device memory, but the pointer mode is CUBLAS_POINTER_MODE_HOST", call);
  Gemm g{ta, tb, m, n, k, lda, ldb, ldc, at, ct, plan, 0.0, 0.0};
  switch (plan.acc) {
    case Acc::F16: {
      Half ha, hb;
      std::memcpy(&ha, alpha, 2);
      std::memcpy(&hb, beta, 2);
      g.alpha = static_cast<float>(ha);
      g.beta = static_cast<float>(hb);
      break;
    }
    case Acc::F32:
      g.alpha = *static_cast<const float*>(alpha);
      g.beta = *static_cast<const float*>(beta);
      break;
    case Acc::F64:
      g.alpha = *static_cast<const double*>(alpha);
      g.beta = *static_cast<const double*>(beta);
      break;
  }

  const size_t es_ab = element_size(at), es_c = element_size(ct);
  const size_t bytes_a = extent(a_rows, a_cols, lda, es_ab), bytes_b = extent(b_rows, b_cols, ldb, es_ab),
               bytes_c = extent(m, n, ldc, es_c);
  auto at_batch = [](const void* p, int64_t i, long long stride, size_t es) {
    return static_cast<const char*>(p) + i * stride * static_cast<int64_t>(es);
  };
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t tag = batched ? i : -1;
    check_operand(call, "A", tag, at_batch(A, i, stride_a, es_ab), bytes_a, h->device);
    check_operand(call, "B", tag, at_batch(B, i, stride_b, es_ab), bytes_b, h->device);
    check_operand(call, "C", tag, at_batch(C, i, stride_c, es_c), bytes_c, h->device);
  }
  check_disjoint_outputs(call, m, n, ldc, stride_c, batch);

  use_workspace(call, h);
  // The GEMM itself runs in the handle's stream order (everything it needs is captured now).
  enqueue(h->stream, [=] {
    DeviceAccess access;
    for (int64_t i = 0; i < batch; ++i)
      run(g, at_batch(A, i, stride_a, es_ab), at_batch(B, i, stride_b, es_ab),
          const_cast<char*>(at_batch(C, i, stride_c, es_c)));
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace
}  // namespace mixtape::cuda_emulator

namespace mixtape::cuda_emulator {
const void* cublas_last_workspace() {
  std::lock_guard<std::mutex> lock(workspace_use().mu);
  return workspace_use().last;
}
}  // namespace mixtape::cuda_emulator

using namespace mixtape::cuda_emulator;

extern "C" {

// ---- cuBLAS helper functions ----

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasContext{current_device(), nullptr, CUBLAS_DEFAULT_MATH};
  add_handle(*handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (!live(handle, "cublasDestroy")) return CUBLAS_STATUS_NOT_INITIALIZED;
  remove_handle(handle);
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (!live(handle, "cublasSetStream")) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  handle->workspace = nullptr;  // back to the default workspace pool, unconditionally
  handle->workspace_bytes = 0;
  return CUBLAS_STATUS_SUCCESS;
}

// A user-owned workspace for the calls on the handle's current stream, until the next
// cublasSetStream. (nullptr, 0) selects none.
cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, size_t bytes) {
  if (!live(handle, "cublasSetWorkspace")) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0 || (!workspace && bytes != 0))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (workspace) {
    int d = -1;
    require_device_range(workspace, bytes, "cublasSetWorkspace: workspace");
    if (is_device_range(workspace, bytes, &d) && d != handle->device)
      fault("cublasSetWorkspace: the workspace is memory of device %d, but the handle belongs to device %d", d,
            handle->device);
  }
  handle->workspace = workspace;
  handle->workspace_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t* stream) {
  if (!live(handle, "cublasGetStream")) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!stream) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!live(handle, "cublasSetMathMode")) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!valid_math_mode(mode)) return CUBLAS_STATUS_INVALID_VALUE;
  handle->math_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (!live(handle, "cublasGetMathMode")) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->math_mode;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
#define MT_EMU_NAME(code) \
  case code: return #code;
    MT_EMU_NAME(CUBLAS_STATUS_SUCCESS)
    MT_EMU_NAME(CUBLAS_STATUS_NOT_INITIALIZED)
    MT_EMU_NAME(CUBLAS_STATUS_ALLOC_FAILED)
    MT_EMU_NAME(CUBLAS_STATUS_INVALID_VALUE)
    MT_EMU_NAME(CUBLAS_STATUS_ARCH_MISMATCH)
    MT_EMU_NAME(CUBLAS_STATUS_MAPPING_ERROR)
    MT_EMU_NAME(CUBLAS_STATUS_EXECUTION_FAILED)
    MT_EMU_NAME(CUBLAS_STATUS_INTERNAL_ERROR)
    MT_EMU_NAME(CUBLAS_STATUS_NOT_SUPPORTED)
    MT_EMU_NAME(CUBLAS_STATUS_LICENSE_ERROR)
#undef MT_EMU_NAME
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "error detected trying to check the license";
  }
  return "unknown error";
}

// ---- GEMMs ----

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  return gemm("cublasGemmEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C,
              Ctype, ldc, 0, 1, computeType, algo, false);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long int strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo) {
  return gemm("cublasGemmStridedBatchedEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype,
              ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType, algo, true);
}

// ---- cuBLASLt handles ----

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  if (!lightHandle) return CUBLAS_STATUS_INVALID_VALUE;
  *lightHandle = new cublasLtContext{current_device()};
  add_handle(*lightHandle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (!live(lightHandle, "cublasLtDestroy")) return CUBLAS_STATUS_NOT_INITIALIZED;
  remove_handle(lightHandle);
  delete lightHandle;
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"

// ---- cuBLASLt's FP8 matmul ----
//
// NVIDIA's documented semantics (cuBLAS reference, cublasLtMatmul and its FP8 section; cublasLt.h's
// attribute comments), for per-tensor FP32 scales:
//   D_temp = alpha * scale_A * scale_B * op(A) op(B) + beta * scale_C * C
//   amax_D = max |D_temp|          (before the output scale: it measures what D is scaled from)
//   D      = scale_D * D_temp, rounded to Dtype
// with FP32 accumulation (CUBLAS_COMPUTE_32F, scale type CUDA_R_32F), a scale pointer left unset
// (or NULL) meaning 1. What is emulated, and refused as the library refuses it:
//   - A and B are CUDA_R_8F_E4M3 / CUDA_R_8F_E5M2, not both E5M2; C is BF16, F16 or F32; D is C's
//     type, or an FP8 type when C is BF16 or F16 (F32 C goes with F32 D only); anything else,
//     including every non-FP8 matmul (not emulated), is CUBLAS_STATUS_NOT_SUPPORTED;
//   - compute capability below 8.9 has no FP8 GEMM: NOT_SUPPORTED; on 8.9 and 9.x only the "TN"
//     layout runs (transa = T, transb = N): NOT_SUPPORTED otherwise; 10.0 and later take any;
//   - A, B, C and D 16-byte aligned and leading dimensions multiples of 16 bytes: NOT_SUPPORTED
//     otherwise; D_SCALE_POINTER with a non-FP8 D: CUBLAS_STATUS_INVALID_VALUE (cublasLt.h: set for
//     an unsupported combination);
//   - epilogues other than the default, device pointer mode, batches (layout attributes) and
//     matrix orders other than column-major are not emulated: NOT_SUPPORTED (or no definition).
// Arithmetic: each dot product in order, one fused multiply-add per term in FP32 (products of two
// FP8 values are exact in FP32); then s = alpha * scale_A * scale_B in FP32 (left to right),
// D_temp = s * acc (+ (beta * scale_C) * C through one FMA when beta != 0); amax drops NaNs (as
// fmaxf); D = fp8(scale_D * D_temp) saturating to the largest finite value (the epilogue's
// satfinite conversion) or rounded to nearest even to BF16 / F16 / F32. Where the GPU's order of
// summation differs, a caller's FP32-summation bound covers it.
struct cublasLtMatmulDescEmu {
  cublasComputeType_t compute;
  cudaDataType scale_type;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  const float* scale[4] = {};  // A, B, C, D (device pointers)
  float* amax_d = nullptr;
  int32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
};
struct cublasLtMatrixLayoutEmu {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
};
struct cublasLtMatmulPreferenceEmu {
  uint64_t max_workspace = 0;
};

namespace mixtape::cuda_emulator {
namespace {

cublasLtMatmulDescEmu* desc_of(cublasLtMatmulDesc_t d) { return reinterpret_cast<cublasLtMatmulDescEmu*>(d); }
cublasLtMatrixLayoutEmu* layout_of(cublasLtMatrixLayout_t l) { return reinterpret_cast<cublasLtMatrixLayoutEmu*>(l); }

bool is_fp8(cudaDataType t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }
size_t lt_element_size(cudaDataType t) { return is_fp8(t) ? 1 : element_size(t); }

float lt_load(const char* p, cudaDataType t, int64_t i) {
  if (t == CUDA_R_8F_E4M3) return e4m3fn_bits_to_float(static_cast<uint8_t>(p[i]));
  if (t == CUDA_R_8F_E5M2) return e5m2_bits_to_float(static_cast<uint8_t>(p[i]));
  return static_cast<float>(load(p, t, i));
}
void lt_store(char* p, cudaDataType t, int64_t i, float v) {
  if (t == CUDA_R_8F_E4M3)
    p[i] = static_cast<char>(float_to_e4m3fn_bits(v, Fp8Saturation::Finite));
  else if (t == CUDA_R_8F_E5M2)
    p[i] = static_cast<char>(float_to_e5m2_bits(v, Fp8Saturation::Finite));
  else
    store(p, t, i, v);
}

struct LtGemm {
  bool ta, tb;
  int64_t m, n, k;
  cublasLtMatrixLayoutEmu a, b, c, d;
  float alpha, beta;
  const float* scale[4];
  float* amax_d;
};

// The checks cublasLtMatmul and cublasLtMatmulAlgoGetHeuristic share (argument order: descriptors,
// then the combination). Pointers are checked by cublasLtMatmul only.
cublasStatus_t lt_plan(const cublasLtMatmulDescEmu* op, const cublasLtMatrixLayoutEmu* A,
                       const cublasLtMatrixLayoutEmu* B, const cublasLtMatrixLayoutEmu* C,
                       const cublasLtMatrixLayoutEmu* D, LtGemm* g) {
  if (!op || !A || !B || !C || !D) return CUBLAS_STATUS_INVALID_VALUE;
  const bool ta = op->transa != CUBLAS_OP_N, tb = op->transb != CUBLAS_OP_N;
  const uint64_t m = ta ? A->cols : A->rows, k = ta ? A->rows : A->cols;
  const uint64_t kb = tb ? B->cols : B->rows, n = tb ? B->rows : B->cols;
  if (kb != k || C->rows != m || C->cols != n || D->rows != m || D->cols != n) return CUBLAS_STATUS_INVALID_VALUE;
  for (const cublasLtMatrixLayoutEmu* l : {A, B, C, D})
    if (l->ld < static_cast<int64_t>(std::max<uint64_t>(1, l->rows))) return CUBLAS_STATUS_INVALID_VALUE;
  // The FP8 table.
  if (!is_fp8(A->type) || !is_fp8(B->type)) return CUBLAS_STATUS_NOT_SUPPORTED;  // not emulated
  if (A->type == CUDA_R_8F_E5M2 && B->type == CUDA_R_8F_E5M2) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (op->compute != CUBLAS_COMPUTE_32F || op->scale_type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  const bool c16 = C->type == CUDA_R_16BF || C->type == CUDA_R_16F;
  const bool d_ok = D->type == C->type ? (c16 || C->type == CUDA_R_32F) : (c16 && is_fp8(D->type));
  if (!d_ok) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (op->scale[3] && !is_fp8(D->type)) return CUBLAS_STATUS_INVALID_VALUE;
  if (op->epilogue != CUBLASLT_EPILOGUE_DEFAULT || op->pointer_mode != CUBLASLT_POINTER_MODE_HOST)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  // The architecture.
  const int cc = compute_capability();
  if (cc < 89) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (cc < 100 && !(ta && !tb)) return CUBLAS_STATUS_NOT_SUPPORTED;  // Ada and Hopper: TN only
  for (const cublasLtMatrixLayoutEmu* l : {A, B, C, D})
    if ((static_cast<uint64_t>(l->ld) * lt_element_size(l->type)) % 16 != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  *g = LtGemm{ta, tb, static_cast<int64_t>(m), static_cast<int64_t>(n), static_cast<int64_t>(k), *A, *B, *C, *D,
              0.0f, 0.0f, {op->scale[0], op->scale[1], op->scale[2], op->scale[3]}, op->amax_d};
  return CUBLAS_STATUS_SUCCESS;
}

void lt_run(const LtGemm& g, const char* A, const char* B, const char* C, char* D) {
  auto scale = [&](int i) { return g.scale[i] ? *g.scale[i] : 1.0f; };
  const float s = g.alpha * scale(0) * scale(1);
  const float bc = g.beta * scale(2);
  std::vector<float> a(static_cast<size_t>(g.m * g.k)), b(static_cast<size_t>(g.n * g.k));
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t l = 0; l < g.k; ++l) a[i * g.k + l] = lt_load(A, g.a.type, g.ta ? i * g.a.ld + l : l * g.a.ld + i);
  for (int64_t j = 0; j < g.n; ++j)
    for (int64_t l = 0; l < g.k; ++l) b[j * g.k + l] = lt_load(B, g.b.type, g.tb ? l * g.b.ld + j : j * g.b.ld + l);
  float amax = 0.0f;
  for (int64_t j = 0; j < g.n; ++j)
    for (int64_t i = 0; i < g.m; ++i) {
      float acc = 0.0f;
      for (int64_t l = 0; l < g.k; ++l) acc = std::fma(a[i * g.k + l], b[j * g.k + l], acc);
      const float t = g.beta == 0.0f ? s * acc : std::fma(s, acc, bc * lt_load(C, g.c.type, j * g.c.ld + i));
      const float at = std::fabs(t);
      amax = at > amax ? at : amax;  // NaN compares false and is dropped
      lt_store(D, g.d.type, j * g.d.ld + i, g.scale[3] ? scale(3) * t : t);
    }
  if (g.amax_d) *g.amax_d = amax;
}

}  // namespace
}  // namespace mixtape::cuda_emulator

extern "C" {

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  if (!matmulDesc) return CUBLAS_STATUS_INVALID_VALUE;
  auto* d = new cublasLtMatmulDescEmu{};
  d->compute = computeType;
  d->scale_type = scaleType;
  *matmulDesc = reinterpret_cast<cublasLtMatmulDesc_t>(d);  // opaque to callers; never read as the toolkit's
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  delete desc_of(matmulDesc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes) {
  cublasLtMatmulDescEmu* d = desc_of(matmulDesc);
  if (!d || !buf) return CUBLAS_STATUS_INVALID_VALUE;
  auto get = [&](auto* field) {
    if (sizeInBytes != sizeof(*field)) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(field, buf, sizeInBytes);
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return get(&d->transa);
    case CUBLASLT_MATMUL_DESC_TRANSB: return get(&d->transb);
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: return get(&d->scale[0]);
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: return get(&d->scale[1]);
    case CUBLASLT_MATMUL_DESC_C_SCALE_POINTER: return get(&d->scale[2]);
    case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER: return get(&d->scale[3]);
    case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER: return get(&d->amax_d);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return get(&d->epilogue);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return get(&d->pointer_mode);
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM: {
      int8_t v = 0;
      return get(&v);  // a speed hint; the emulator's accumulation is FP32 either way
    }
    default: return CUBLAS_STATUS_NOT_SUPPORTED;  // not emulated
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (!matLayout) return CUBLAS_STATUS_INVALID_VALUE;
  *matLayout = reinterpret_cast<cublasLtMatrixLayout_t>(new cublasLtMatrixLayoutEmu{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  delete layout_of(matLayout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new cublasLtMatmulPreferenceEmu{});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete reinterpret_cast<cublasLtMatmulPreferenceEmu*>(pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t sizeInBytes) {
  auto* p = reinterpret_cast<cublasLtMatmulPreferenceEmu*>(pref);
  if (!p || !buf) return CUBLAS_STATUS_INVALID_VALUE;
  if (attr != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return CUBLAS_STATUS_NOT_SUPPORTED;  // not emulated
  if (sizeInBytes != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&p->max_workspace, buf, sizeInBytes);
  return CUBLAS_STATUS_SUCCESS;
}

// One algorithm (the emulator's one GEMM, needing no workspace) when the matmul is supported.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount) {
  if (!live(lightHandle, "cublasLtMatmulAlgoGetHeuristic")) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!preference || requestedAlgoCount < 1 || !heuristicResultsArray || !returnAlgoCount)
    return CUBLAS_STATUS_INVALID_VALUE;
  LtGemm g{};
  const cublasStatus_t st = lt_plan(desc_of(operationDesc), layout_of(Adesc), layout_of(Bdesc), layout_of(Cdesc),
                                    layout_of(Ddesc), &g);
  *returnAlgoCount = 0;
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  heuristicResultsArray[0] = cublasLtMatmulHeuristicResult_t{};
  heuristicResultsArray[0].state = CUBLAS_STATUS_SUCCESS;
  heuristicResultsArray[0].wavesCount = 1.0f;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
  static constexpr const char* call = "cublasLtMatmul";
  (void)algo;  // any algorithm the heuristic returned computes the same contract here
  if (!live(lightHandle, call)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  LtGemm g{};
  const cublasStatus_t st =
      lt_plan(desc_of(computeDesc), layout_of(Adesc), layout_of(Bdesc), layout_of(Cdesc), layout_of(Ddesc), &g);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  for (const void* p : {A, B, C, static_cast<const void*>(D)})
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (is_device_range(alpha, 4) || is_device_range(beta, 4))
    fault("%s: alpha or beta is device memory, but the pointer mode is CUBLASLT_POINTER_MODE_HOST", call);
  g.alpha = *static_cast<const float*>(alpha);
  g.beta = *static_cast<const float*>(beta);
  if (g.m == 0 || g.n == 0) return CUBLAS_STATUS_SUCCESS;
  const int dev = lightHandle->device;
  if (current_device() != dev)
    fault("%s: the current device is %d, but the handle belongs to device %d", call, current_device(), dev);
  if (stream_device(stream) != dev)
    fault("%s: the stream belongs to device %d, the handle to device %d", call, stream_device(stream), dev);
  auto bytes = [](const cublasLtMatrixLayoutEmu& l) {
    return extent(static_cast<int64_t>(l.rows), static_cast<int64_t>(l.cols), l.ld, lt_element_size(l.type));
  };
  check_operand(call, "A", -1, A, bytes(g.a), dev);
  check_operand(call, "B", -1, B, bytes(g.b), dev);
  if (g.beta != 0.0f) check_operand(call, "C", -1, C, bytes(g.c), dev);
  check_operand(call, "D", -1, D, bytes(g.d), dev);
  const char* names[4] = {"A_SCALE_POINTER", "B_SCALE_POINTER", "C_SCALE_POINTER", "D_SCALE_POINTER"};
  for (int i = 0; i < 4; ++i)
    if (g.scale[i]) check_operand(call, names[i], -1, g.scale[i], sizeof(float), dev);
  if (g.amax_d) check_operand(call, "AMAX_D_POINTER", -1, g.amax_d, sizeof(float), dev);
  if (workspaceSizeInBytes > 0) check_operand(call, "workspace", -1, workspace, workspaceSizeInBytes, dev);
  // Counted under its own name (launch_sites()), so a test can tell the FP8 matmul from the
  // widened cublasGemmEx fallback.
  enqueue(
      stream,
      [=] {
        DeviceAccess access;
        lt_run(g, static_cast<const char*>(A), static_cast<const char*>(B), static_cast<const char*>(C),
               static_cast<char*>(D));
      },
      call);
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
