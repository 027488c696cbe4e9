// optim/cuda/step_kernels.cu — fused SGD / Adam / AdamW steps on the device from the SAME per-element
// functors as the CPU loop (optim/optim_functors.h: fn::SGDUpdate, fn::AdamUpdate, fn::unscale,
// fn::round_stochastic), so a step is bit-identical to the CPU step: the functors spell every
// fused multiply-add with madd() (__fmaf_rn / __fma_rn here, std::fma there) and every other
// operation is one IEEE operation. One pass per element: load the grad (widening a 16-bit one and
// unscaling it), update master and state in registers, store them and the 16-bit model copy.
// Two forms: one launch per tensor (sgd_step_, adam_step_), and multi-tensor launches that update
// many tensors at once (sgd_step_multi_, adam_step_multi_: see "multi-tensor steps" below) with the
// same per-element code, so both give the same bits.
// Also norm_pow_sum (clip_grad_norm_'s reduction, in double).
#include "core/cuda/launch.cuh"
#include "optim/cuda/step_kernels.h"
#include "optim/optim_functors.h"

namespace mixtape::optim::cuda {
using ::mixtape::cuda::launch_kernel;
namespace {

constexpr int kThreads = 256;
unsigned blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  if (b > 65535LL * 4) b = 65535LL * 4;
  return static_cast<unsigned>(b);
}

// What one element's load and store need besides its tensor's pointers: the same for every
// tensor of a multi-tensor launch.
struct ElementIO {
  DType w_dtype, grad_dtype, model_dtype;
  float inv_scale;
  bool stochastic;
  uint64_t seed;
  // Capturable launches (FusedStepArgs): the device scalars every tensor of the launch shares,
  // and (Adam) the doubles fn::AdamUpdate::make needs to rebuild the functor from them.
  bool capturable;
  const float* found_inf;
  const float* inv_scale_ptr;
  const double* lr;
  double beta1, beta2, eps, weight_decay;
};
ElementIO io_of(const FusedStepArgs& a) {
  return {a.w_dtype, a.grad_dtype, a.model_dtype, a.inv_scale, a.stochastic, a.seed, a.step != nullptr,
          a.found_inf, a.inv_scale_ptr, a.lr, 0.0, 0.0, 0.0, 0.0};
}
ElementIO io_of(const FusedStepArgs& a, const AdamParams& p) {
  ElementIO io = io_of(a);
  io.beta1 = p.beta1;
  io.beta2 = p.beta2;
  io.eps = p.eps;
  io.weight_decay = p.weight_decay;
  return io;
}
// A capturable launch's skip, read on the device (NaN counts as non-zero, as in update_scale).
__device__ __forceinline__ bool skipped(const ElementIO& io) {
  return io.capturable && io.found_inf != nullptr && *io.found_inf != 0.0f;
}
// The functor of a capturable launch's tensor whose count is *step: the same fields the host's
// make() gives for that lr and count.
template <typename W>
__device__ __forceinline__ fn::SGDUpdate<W> capturable_sgd(fn::SGDUpdate<W> f, const ElementIO& io, const int64_t* step) {
  f.neg_lr = W(-*io.lr);
  f.first = *step == 0;
  return f;
}
template <typename W>
__device__ __forceinline__ fn::AdamUpdate<W> capturable_adam(const fn::AdamUpdate<W>& f, const ElementIO& io,
                                                             const int64_t* step) {
  return fn::AdamUpdate<W>::make(*io.lr, io.beta1, io.beta2, io.eps, io.weight_decay, f.amsgrad, f.decoupled,
                                 *step + 1);
}

template <typename W>
__device__ __forceinline__ W load_grad(const ElementIO& io, const void* grad, int64_t i) {
  if (io.grad_dtype == io.w_dtype) return static_cast<const W*>(grad)[i];  // arrives unscaled
  float g = io.grad_dtype == DType::Float16 ? float(static_cast<const Half*>(grad)[i])
                                            : float(static_cast<const BFloat16*>(grad)[i]);
  return static_cast<W>(fn::unscale(g, io.inv_scale_ptr != nullptr ? *io.inv_scale_ptr : io.inv_scale));
}

// i: the element's index in its tensor (the stochastic rounding draw depends on it and offset).
template <typename W>
__device__ __forceinline__ void store_model(const ElementIO& io, void* model, uint64_t offset, W w, int64_t i) {
  if constexpr (std::is_same<W, float>::value) {
    if (!model) return;
    if (io.model_dtype == DType::Float16) {
      static_cast<Half*>(model)[i] =
          io.stochastic ? fn::round_stochastic<Half>(w, fn::rounding_uniform(io.seed, offset, uint64_t(i))) : Half(w);
    } else {
      static_cast<BFloat16*>(model)[i] =
          io.stochastic ? fn::round_stochastic<BFloat16>(w, fn::rounding_uniform(io.seed, offset, uint64_t(i)))
                        : BFloat16(w);
    }
  }
}

// One element of an SGD / Adam step: the single-tensor and the multi-tensor kernels both run these.
template <typename W>
__device__ __forceinline__ void sgd_element(const fn::SGDUpdate<W>& f, const ElementIO& io, W* w, const void* grad,
                                            void* model, W* buf, uint64_t offset, int64_t i) {
  W wi = w[i];
  W b = buf ? buf[i] : W(0);
  f(wi, load_grad<W>(io, grad, i), b);
  w[i] = wi;
  if (buf) buf[i] = b;
  store_model<W>(io, model, offset, wi, i);
}
template <typename W>
__device__ __forceinline__ void adam_element(const fn::AdamUpdate<W>& f, const ElementIO& io, W* w, const void* grad,
                                             void* model, W* m, W* v, W* vmax, uint64_t offset, int64_t i) {
  W wi = w[i], mi = m[i], vi = v[i], vm = vmax ? vmax[i] : W(0);
  f(wi, load_grad<W>(io, grad, i), mi, vi, vm);
  w[i] = wi;
  m[i] = mi;
  v[i] = vi;
  if (vmax) vmax[i] = vm;
  store_model<W>(io, model, offset, wi, i);
}

template <typename W>
__global__ void sgd_kernel(FusedStepArgs a, ElementIO io, fn::SGDUpdate<W> f) {
  if (skipped(io)) return;
  if (io.capturable) f = capturable_sgd(f, io, a.step);
  W* w = static_cast<W*>(a.w);
  W* buf = static_cast<W*>(a.state[0]);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += int64_t(blockDim.x) * gridDim.x)
    sgd_element<W>(f, io, w, a.grad, a.model, buf, a.offset, i);
}

template <typename W>
__global__ void adam_kernel(FusedStepArgs a, ElementIO io, fn::AdamUpdate<W> f) {
  if (skipped(io)) return;
  if (io.capturable) f = capturable_adam(f, io, a.step);
  W* w = static_cast<W*>(a.w);
  W* m = static_cast<W*>(a.state[0]);
  W* v = static_cast<W*>(a.state[1]);
  W* vmax = static_cast<W*>(a.state[2]);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += int64_t(blockDim.x) * gridDim.x)
    adam_element<W>(f, io, w, a.grad, a.model, m, v, vmax, a.offset, i);
}

// ---- multi-tensor steps ----
// One launch updates up to a table's worth of tensors. The table (every tensor's pointers, size,
// rounding offset and per-tensor functor values) travels as the kernel's one parameter: no
// host->device copy, nothing to keep alive, no synchronisation. The work is cut into block tasks
// of kMultiChunk elements of one tensor; tensor k owns tasks [slots[k-1].chunk_end,
// slots[k].chunk_end), so a block finds its tensor by binary search and strides over tasks.
// Each element runs sgd_element / adam_element with its index in its own tensor: the single-
// tensor kernel's bits. Empty tensors get no slot (every slot owns at least one task).

// The kernel-parameter limit every CUDA toolkit, driver and GPU accepts (12.1+ on Volta+ takes
// 32 KiB; 4 KiB keeps to the common limit). A table is sized to fit it.
constexpr size_t kParamBytes = 4096;
constexpr int64_t kMultiChunk = 8 * kThreads;      // elements per block task
constexpr uint32_t kMaxTasks = 1u << 31;           // per launch: task indices stay in uint32
constexpr uint32_t kMaxMultiBlocks = 65535u * 4u;  // blocks per launch (they stride over tasks)

struct SgdSlot {
  void* w;
  const void* grad;
  void* model;  // null: w is the parameter
  void* buf;    // null: no momentum
  int64_t n;
  // The stochastic rounding stream's offset; in a capturable launch (never stochastic: the glue
  // launches those tensor by tensor) the address of the tensor's count instead, so the slot keeps
  // its size (the table its capacity).
  uint64_t offset_or_step;
  uint32_t chunk_end;  // one past this tensor's last task
  bool first;          // fn::SGDUpdate::first: the momentum buffer is being created
};
template <typename W>
struct AdamSlot {
  void* w;
  const void* grad;
  void* model;
  void* m;
  void* v;
  void* vmax;  // null without amsgrad
  int64_t n;
  uint64_t offset_or_step;  // as SgdSlot's
  uint32_t chunk_end;
  // The fields of fn::AdamUpdate that depend on the tensor's step (the bias corrections),
  // computed on the host by AdamUpdate::make as for a single-tensor launch; a capturable launch
  // computes them on the device from the count instead.
  W neg_step_size, bias_correction2_sqrt;
};
template <typename F, typename Slot>
struct MultiTable {
  static constexpr int kCapacity = int((kParamBytes - sizeof(ElementIO) - sizeof(F) - 32) / sizeof(Slot));
  ElementIO io;
  F f;  // the functor every tensor shares, but for the fields its slot sets
  int count;
  uint32_t tasks;  // slots[count - 1].chunk_end
  Slot slots[kCapacity];
};

template <typename Slot>
__device__ __forceinline__ int slot_of(const Slot* slots, int count, uint32_t task) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (slots[mid].chunk_end > task)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}
// The element range [begin, end) of `task` in slot k's tensor.
template <typename Slot>
__device__ __forceinline__ void task_range(const Slot* slots, int k, uint32_t task, int64_t& begin, int64_t& end) {
  begin = int64_t(task - (k > 0 ? slots[k - 1].chunk_end : 0u)) * kMultiChunk;
  end = slots[k].n - begin < kMultiChunk ? slots[k].n : begin + kMultiChunk;
}

template <typename W>
__global__ void sgd_multi_kernel(MultiTable<fn::SGDUpdate<W>, SgdSlot> t) {
  if (skipped(t.io)) return;
  for (uint32_t task = blockIdx.x; task < t.tasks; task += gridDim.x) {
    const int k = slot_of(t.slots, t.count, task);
    const SgdSlot& s = t.slots[k];
    int64_t begin, end;
    task_range(t.slots, k, task, begin, end);
    fn::SGDUpdate<W> f = t.f;
    f.first = s.first;
    if (t.io.capturable) f = capturable_sgd(f, t.io, reinterpret_cast<const int64_t*>(s.offset_or_step));
    const uint64_t offset = t.io.capturable ? 0 : s.offset_or_step;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
      sgd_element<W>(f, t.io, static_cast<W*>(s.w), s.grad, s.model, static_cast<W*>(s.buf), offset, i);
  }
}

template <typename W>
__global__ void adam_multi_kernel(MultiTable<fn::AdamUpdate<W>, AdamSlot<W>> t) {
  if (skipped(t.io)) return;
  for (uint32_t task = blockIdx.x; task < t.tasks; task += gridDim.x) {
    const int k = slot_of(t.slots, t.count, task);
    const AdamSlot<W>& s = t.slots[k];
    int64_t begin, end;
    task_range(t.slots, k, task, begin, end);
    fn::AdamUpdate<W> f = t.f;
    f.neg_step_size = s.neg_step_size;
    f.bias_correction2_sqrt = s.bias_correction2_sqrt;
    if (t.io.capturable) f = capturable_adam(f, t.io, reinterpret_cast<const int64_t*>(s.offset_or_step));
    const uint64_t offset = t.io.capturable ? 0 : s.offset_or_step;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
      adam_element<W>(f, t.io, static_cast<W*>(s.w), s.grad, s.model, static_cast<W*>(s.m), static_cast<W*>(s.v),
                      static_cast<W*>(s.vmax), offset, i);
  }
}

// Whether tensor a can share a launch with tensor b: the same dtypes, buffers, unscale and rounding.
bool same_launch_kind(const FusedStepArgs& a, const FusedStepArgs& b) {
  bool same = a.w_dtype == b.w_dtype && a.grad_dtype == b.grad_dtype && (a.model == nullptr) == (b.model == nullptr) &&
              (a.model == nullptr || a.model_dtype == b.model_dtype) && a.inv_scale == b.inv_scale &&
              a.stochastic == b.stochastic && a.n > 0 && (a.step == nullptr) == (b.step == nullptr) &&
              a.found_inf == b.found_inf && a.inv_scale_ptr == b.inv_scale_ptr && a.lr == b.lr;
  for (int j = 0; j < 3; ++j) same = same && (a.state[j] == nullptr) == (b.state[j] == nullptr);
  return same;
}

// Packs the non-empty tensors into tables (a new one when the table is full, or where the rounding
// seed changes) and launches `kernel` on each; fill(slot, k) writes tensor k's slot but for its
// chunk_end. Checks every non-empty tensor before the first launch (negative sizes are refused).
template <typename F, typename Slot, typename Fill>
cudaError_t launch_multi(void (*kernel)(MultiTable<F, Slot>), const FusedStepArgs* ts, int count, const F& f,
                         const ElementIO& io, Fill&& fill, cudaStream_t stream) {
  using Table = MultiTable<F, Slot>;
  static_assert(sizeof(Table) <= kParamBytes, "a multi-tensor table must fit the kernel-parameter limit");
  static_assert(Table::kCapacity >= 32, "a multi-tensor table holds too few tensors to be worth a launch");
  // The first non-empty tensor is the reference (an empty tensor's pointers may be null).
  int ref = 0;
  while (ref < count && ts[ref].n == 0) ++ref;
  if (ref == count) return cudaSuccess;
  for (int k = 0; k < count; ++k) {
    if (ts[k].n == 0) continue;
    if (!same_launch_kind(ts[k], ts[ref])) return cudaErrorInvalidValue;
    if ((ts[k].n + kMultiChunk - 1) / kMultiChunk >= int64_t(kMaxTasks)) return cudaErrorInvalidValue;
  }
  Table t{};
  t.io = io;
  t.f = f;
  auto flush = [&]() -> cudaError_t {
    if (t.count == 0) return cudaSuccess;
    const unsigned blocks = t.tasks < kMaxMultiBlocks ? t.tasks : kMaxMultiBlocks;
    const cudaError_t e = launch_kernel(kernel, blocks, kThreads, 0, stream, t);
    t.count = 0;
    t.tasks = 0;
    return e;
  };
  for (int k = 0; k < count; ++k) {
    const FusedStepArgs& a = ts[k];
    if (a.n == 0) continue;
    const auto tasks = static_cast<uint32_t>((a.n + kMultiChunk - 1) / kMultiChunk);
    const bool full =
        t.count == Table::kCapacity || tasks > kMaxTasks - t.tasks || (a.stochastic && a.seed != t.io.seed);
    if (t.count > 0 && full) {
      if (const cudaError_t e = flush(); e != cudaSuccess) return e;
    }
    if (t.count == 0) t.io.seed = a.seed;
    Slot& s = t.slots[t.count++];
    fill(s, k);
    t.tasks += tasks;
    s.chunk_end = t.tasks;
  }
  return flush();
}

// ---- a capturable step's counts ----
// After the update kernels: every count of the call advances by one unless found_inf says the
// step was skipped (read on the device). Its own launch, so no update kernel reads a count while
// another block advances it. Empty tensors' counts advance too, as on the CPU.
constexpr int kStepsPerAdvance = 400;  // 3.2 KiB of pointers: inside the kernel-parameter limit
struct StepTable {
  const float* found_inf;
  int count;
  int64_t* steps[kStepsPerAdvance];
};
__global__ void advance_steps_kernel(StepTable t) {
  if (t.found_inf != nullptr && *t.found_inf != 0.0f) return;
  for (int k = threadIdx.x; k < t.count; k += blockDim.x) *t.steps[k] += 1;
}
cudaError_t advance_steps(const FusedStepArgs* ts, int count, cudaStream_t stream) {
  StepTable t{};
  for (int k = 0; k < count; ++k) {
    if (ts[k].step == nullptr || ts[k].found_inf != ts[0].found_inf) return cudaErrorInvalidValue;
    if (t.count == kStepsPerAdvance) {
      t.found_inf = ts[0].found_inf;
      if (const cudaError_t e = launch_kernel(advance_steps_kernel, 1, kThreads, 0, stream, t); e != cudaSuccess) return e;
      t.count = 0;
    }
    t.steps[t.count++] = ts[k].step;
  }
  t.found_inf = ts[0].found_inf;
  return t.count > 0 ? launch_kernel(advance_steps_kernel, 1, kThreads, 0, stream, t) : cudaSuccess;
}

constexpr int kNormBlocks = 256;
// Stage 1: each block folds its elements into one double; stage 2 (one block) folds the partials.
// Order differs from the CPU's sequential sum: the result differs by summation order only.
__device__ __forceinline__ double fold(double acc, double a, bool is_max) {
  if (is_max) return (acc != acc) ? acc : ((a > acc || a != a) ? a : acc);  // NaN sticks
  return acc + a;
}
template <typename T>
__global__ void norm_partial_kernel(const T* x, int64_t n, double p, double* partials) {
  __shared__ double sh[kThreads];
  const bool is_max = ::isinf(p);
  double acc = 0.0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    const double v = static_cast<double>(static_cast<acc_t<T>>(x[i]));
    const double a = fabs(v);
    acc = fold(acc, is_max ? a : (p == 2.0 ? v * v : (p == 1.0 ? a : pow(a, p))), is_max);
  }
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) sh[threadIdx.x] = fold(sh[threadIdx.x], sh[threadIdx.x + w], is_max);
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = sh[0];
}
__global__ void norm_final_kernel(const double* partials, int count, double p, double* out) {
  if (threadIdx.x != 0) return;
  const bool is_max = ::isinf(p);
  double acc = 0.0;
  for (int i = 0; i < count; ++i) acc = fold(acc, partials[i], is_max);
  *out = acc;
}

}  // namespace

cudaError_t launch_sgd_step(const FusedStepArgs& a, const SGDParams& p, cudaStream_t s) {
  if (a.step != nullptr && a.lr == nullptr) return cudaErrorInvalidValue;
  cudaError_t e = cudaSuccess;
  if (a.n == 0) {
  } else if (a.w_dtype == DType::Float64) {
    const auto f = fn::SGDUpdate<double>::make(p.lr, p.momentum, p.dampening, p.weight_decay, p.nesterov, p.first);
    e = launch_kernel(sgd_kernel<double>, blocks_for(a.n), kThreads, 0, s, a, io_of(a), f);
  } else {
    const auto f = fn::SGDUpdate<float>::make(p.lr, p.momentum, p.dampening, p.weight_decay, p.nesterov, p.first);
    e = launch_kernel(sgd_kernel<float>, blocks_for(a.n), kThreads, 0, s, a, io_of(a), f);
  }
  return e == cudaSuccess && a.step != nullptr ? advance_steps(&a, 1, s) : e;
}

cudaError_t launch_adam_step(const FusedStepArgs& a, const AdamParams& p, cudaStream_t s) {
  if (a.step != nullptr && a.lr == nullptr) return cudaErrorInvalidValue;
  cudaError_t e = cudaSuccess;
  if (a.n == 0) {
  } else if (a.w_dtype == DType::Float64) {
    const auto f = fn::AdamUpdate<double>::make(p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, p.amsgrad, p.decoupled,
                                                p.step);
    e = launch_kernel(adam_kernel<double>, blocks_for(a.n), kThreads, 0, s, a, io_of(a, p), f);
  } else {
    const auto f = fn::AdamUpdate<float>::make(p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, p.amsgrad, p.decoupled,
                                               p.step);
    e = launch_kernel(adam_kernel<float>, blocks_for(a.n), kThreads, 0, s, a, io_of(a, p), f);
  }
  return e == cudaSuccess && a.step != nullptr ? advance_steps(&a, 1, s) : e;
}

namespace {
template <typename W>
cudaError_t sgd_multi(const FusedStepArgs* ts, const bool* first, int count, const SGDParams& p, cudaStream_t s) {
  const auto f = fn::SGDUpdate<W>::make(p.lr, p.momentum, p.dampening, p.weight_decay, p.nesterov, false);
  return launch_multi<fn::SGDUpdate<W>, SgdSlot>(
      sgd_multi_kernel<W>, ts, count, f, io_of(ts[0]),
      [&](SgdSlot& slot, int k) {
        const FusedStepArgs& a = ts[k];
        const uint64_t offset_or_step = a.step != nullptr ? reinterpret_cast<uint64_t>(a.step) : a.offset;
        slot = SgdSlot{a.w, a.grad, a.model, a.state[0], a.n, offset_or_step, 0u, first[k]};
      },
      s);
}
template <typename W>
cudaError_t adam_multi(const FusedStepArgs* ts, const int64_t* step, int count, const AdamParams& p, cudaStream_t s) {
  auto make = [&](int64_t t) {
    return fn::AdamUpdate<W>::make(p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, p.amsgrad, p.decoupled, t);
  };
  return launch_multi<fn::AdamUpdate<W>, AdamSlot<W>>(
      adam_multi_kernel<W>, ts, count, make(1), io_of(ts[0], p),
      [&](AdamSlot<W>& slot, int k) {
        const FusedStepArgs& a = ts[k];
        const fn::AdamUpdate<W> fk = make(step[k] >= 1 ? step[k] : 1);
        const uint64_t offset_or_step = a.step != nullptr ? reinterpret_cast<uint64_t>(a.step) : a.offset;
        slot = AdamSlot<W>{a.w, a.grad, a.model, a.state[0], a.state[1], a.state[2], a.n, offset_or_step, 0u,
                           fk.neg_step_size, fk.bias_correction2_sqrt};
      },
      s);
}
}  // namespace

cudaError_t launch_sgd_step_multi(const FusedStepArgs* ts, const bool* first, int count, const SGDParams& p,
                                  cudaStream_t s) {
  if (count <= 0) return cudaSuccess;
  const bool capturable = ts[0].step != nullptr;
  if (capturable && ts[0].lr == nullptr) return cudaErrorInvalidValue;
  if (capturable && ts[0].stochastic) {  // the slot holds the count where the rounding offset goes
    for (int k = 0; k < count; ++k) {
      SGDParams pk = p;
      pk.first = first[k];
      if (const cudaError_t e = launch_sgd_step(ts[k], pk, s); e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }
  const cudaError_t e = ts[0].w_dtype == DType::Float64 ? sgd_multi<double>(ts, first, count, p, s)
                                                        : sgd_multi<float>(ts, first, count, p, s);
  return e == cudaSuccess && capturable ? advance_steps(ts, count, s) : e;
}

cudaError_t launch_adam_step_multi(const FusedStepArgs* ts, const int64_t* step, int count, const AdamParams& p,
                                   cudaStream_t s) {
  if (count <= 0) return cudaSuccess;
  const bool capturable = ts[0].step != nullptr;
  if (capturable && ts[0].lr == nullptr) return cudaErrorInvalidValue;
  for (int k = 0; k < count; ++k)
    if (!capturable && step[k] < 1) return cudaErrorInvalidValue;
  if (capturable && ts[0].stochastic) {  // the slot holds the count where the rounding offset goes
    for (int k = 0; k < count; ++k) {
      AdamParams pk = p;
      pk.step = 1;  // not read: the kernel takes the count from the device
      if (const cudaError_t e = launch_adam_step(ts[k], pk, s); e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }
  const cudaError_t e = ts[0].w_dtype == DType::Float64 ? adam_multi<double>(ts, step, count, p, s)
                                                        : adam_multi<float>(ts, step, count, p, s);
  return e == cudaSuccess && capturable ? advance_steps(ts, count, s) : e;
}

int multi_step_tensors_per_launch(bool adam, DType w_dtype) {
  if (!adam)
    return w_dtype == DType::Float64 ? MultiTable<fn::SGDUpdate<double>, SgdSlot>::kCapacity
                                     : MultiTable<fn::SGDUpdate<float>, SgdSlot>::kCapacity;
  return w_dtype == DType::Float64 ? MultiTable<fn::AdamUpdate<double>, AdamSlot<double>>::kCapacity
                                   : MultiTable<fn::AdamUpdate<float>, AdamSlot<float>>::kCapacity;
}

int norm_partials_needed() { return kNormBlocks; }

cudaError_t launch_norm_pow_sum(const void* x, DType dt, int64_t n, double p, double* partials, double* out,
                                cudaStream_t s) {
  cudaError_t e = cudaSuccess;
  switch (dt) {
    case DType::Float16:
      e = launch_kernel(norm_partial_kernel<Half>, kNormBlocks, kThreads, 0, s, static_cast<const Half*>(x), n, p,
                        partials);
      break;
    case DType::BFloat16:
      e = launch_kernel(norm_partial_kernel<BFloat16>, kNormBlocks, kThreads, 0, s, static_cast<const BFloat16*>(x), n,
                        p, partials);
      break;
    case DType::Float32:
      e = launch_kernel(norm_partial_kernel<float>, kNormBlocks, kThreads, 0, s, static_cast<const float*>(x), n, p,
                        partials);
      break;
    case DType::Float64:
      e = launch_kernel(norm_partial_kernel<double>, kNormBlocks, kThreads, 0, s, static_cast<const double*>(x), n, p,
                        partials);
      break;
    default: return cudaErrorInvalidValue;
  }
  if (e != cudaSuccess) return e;
  return launch_kernel(norm_final_kernel, 1, 32, 0, s, partials, kNormBlocks, p, out);
}

}  // namespace mixtape::optim::cuda
