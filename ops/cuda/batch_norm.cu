// ops/cuda/batch_norm.cu — batch_norm forward and backward kernels with ops/normalization.cpp's
// numerics: per-channel statistics and gradient sums in f64, coefficients in f64 (the shared
// fn:: functors), the elementwise transforms in acc_t<T> rounded once.
// Invariant: results depend on the shape only, never on the GPU or timing. A channel's M = N S
// values are cut into chunks by bn_partition (a function of N, C, S); one block per (channel,
// chunk) writes f64 partials with a fixed thread stride and a fixed tree; a finalize kernel
// combines a channel's partials sequentially in chunk order. No atomics.
// Variance without cancellation: each block takes its chunk's sum, then the squared deviations
// from the chunk's own mean (a second pass over a chunk still in cache); the finalize adds
//   M2 = sum_p [M2_p + n_p (mean_p - mean)^2]   (exact identity, every term >= 0).
// Channel tensors (weight, bias, running and saved statistics, statistics outputs) are read and
// written in their own dtype (BnChan), so a call launches: forward training 3 (partials,
// finalize, affine), eval 2 (finalize, affine), backward 3 (partials, finalize, grad_input).
// Direct kernels rather than cuDNN's batch norm: cuDNN accumulates statistics in f32, the CPU op
// (and so the parity tests) in f64.
#include <algorithm>

#include "ops/cuda/batch_norm_kernels.h"
#include "ops/cuda/loops.cuh"
#include "ops/normalization_functors.h"

namespace mixtape::cuda {

namespace {

constexpr int kBnThreads = 256;     // partials blocks (a power of two: the tree below halves it)
constexpr int kBnFinalize = 128;    // finalize threads per block, one channel each
// The partition: chunks of at least kChunkMin values (8 per thread: below that a block's two
// reductions cost more than its loads), about kBlocksTarget (channel, chunk) blocks in all
// (enough to fill any current GPU, fixed so the partition stays a function of the shape), and
// chunks of at most kChunkMax values so a chunk is still in cache for the second pass.
constexpr int64_t kChunkMin = 2048;
constexpr int64_t kChunkMax = 16384;
constexpr int64_t kBlocksTarget = 1024;
constexpr int64_t kMaxChunks = 65535;  // grid.y

}  // namespace

BnPartition bn_partition(BnShape v) {
  const int64_t M = v.N * v.S;
  const int64_t by_size = (M + kChunkMin - 1) / kChunkMin;
  const int64_t by_grid = std::max<int64_t>(1, kBlocksTarget / std::max<int64_t>(1, v.C));
  int64_t chunks = std::min(by_size, by_grid);
  chunks = std::max(chunks, (M + kChunkMax - 1) / kChunkMax);
  chunks = std::min(std::max<int64_t>(chunks, 1), kMaxChunks);
  const int64_t len = (M + chunks - 1) / chunks;  // M == 0: one empty chunk
  if (len > 0) chunks = (M + len - 1) / len;       // no empty chunk at the end
  return {chunks, len};
}

int64_t bn_scratch_doubles(BnShape v) { return 2 * v.C * bn_partition(v).chunks + 3 * v.C; }

namespace {

__device__ double chan_load(const BnChan& a, int64_t c, double fallback) {
  if (!a.data) return fallback;
  const int64_t o = c * a.stride;
  switch (a.dtype) {
    case DType::Float16: return static_cast<double>(static_cast<float>(static_cast<const Half*>(a.data)[o]));
    case DType::BFloat16: return static_cast<double>(static_cast<float>(static_cast<const BFloat16*>(a.data)[o]));
    case DType::Float32: return static_cast<double>(static_cast<const float*>(a.data)[o]);
    case DType::Float64: return static_cast<const double*>(a.data)[o];
    default: return fallback;  // the host checks every channel tensor is floating
  }
}
// Rounds as ops/cast.cpp does: f64 -> f32 -> 16-bit (convert.cu's rule).
__device__ void chan_store(const BnChan& a, int64_t c, double v) {
  if (!a.data) return;
  const int64_t o = c * a.stride;
  switch (a.dtype) {
    case DType::Float16: static_cast<Half*>(a.data)[o] = Half(static_cast<float>(v)); break;
    case DType::BFloat16: static_cast<BFloat16*>(a.data)[o] = BFloat16(static_cast<float>(v)); break;
    case DType::Float32: static_cast<float*>(a.data)[o] = static_cast<float>(v); break;
    case DType::Float64: static_cast<double*>(a.data)[o] = v; break;
    default: break;
  }
}

// A fixed tree over the block (blockDim.x a power of two): the same sum in the same order on
// every GPU. sh holds 2 blockDim.x doubles; both values reduce together (half the barriers).
__device__ void block_sum2(double& a, double& b, double* sh) {
  const unsigned B = blockDim.x, t = threadIdx.x;
  sh[t] = a;
  sh[B + t] = b;
  __syncthreads();
  for (unsigned w = B / 2; w > 0; w >>= 1) {
    if (t < w) {
      sh[t] += sh[t + w];
      sh[B + t] += sh[B + t + w];
    }
    __syncthreads();
  }
  a = sh[0];
  b = sh[B];
  __syncthreads();  // sh is reused by the caller's next reduction
}

// Calls f(offset in x) for the values [begin, end) of channel c (value i = n S + s of the channel
// sits at (n C + c) S + s), thread t taking begin + t, + blockDim.x, ...: no division per value.
template <typename F>
__device__ void for_chunk(const BnShape& v, int64_t c, int64_t begin, int64_t end, F&& f) {
  int64_t i = begin + threadIdx.x;
  if (i >= end) return;
  int64_t n = i / v.S, s = i - n * v.S;
  const int64_t dn = blockDim.x / v.S, ds = blockDim.x - dn * v.S;
  for (; i < end; i += blockDim.x) {
    f((n * v.C + c) * v.S + s);
    n += dn;
    s += ds;
    if (s >= v.S) {
      s -= v.S;
      ++n;
    }
  }
}

// Block (c, p): psum[c P + p] = the chunk's sum, pm2[c P + p] = the squared deviations from the
// chunk's mean.
template <typename T>
__global__ void bn_stats_partials_kernel(const T* x, BnShape v, BnPartition part, double* psum, double* pm2) {
  using A = acc_t<T>;
  __shared__ double sh[2 * kBnThreads];
  const int64_t c = blockIdx.x, p = blockIdx.y, M = v.N * v.S;
  const int64_t begin = p * part.len, end = begin + part.len < M ? begin + part.len : M;
  double s = 0, unused = 0;
  for_chunk(v, c, begin, end, [&](int64_t o) { s += static_cast<double>(static_cast<A>(x[o])); });
  block_sum2(s, unused, sh);
  const double mu = end > begin ? s / static_cast<double>(end - begin) : 0.0;
  double q = 0;
  for_chunk(v, c, begin, end, [&](int64_t o) {
    const double d = static_cast<double>(static_cast<A>(x[o])) - mu;
    q += d * d;
  });
  block_sum2(q, unused, sh);
  if (threadIdx.x == 0) {
    psum[c * part.chunks + p] = s;
    pm2[c * part.chunks + p] = q;
  }
}

// One thread per channel. training: mean and variance from the partials (chunk order), the
// running statistics updated in place (their dtype); eval: mean / var are the running ones. Then
// the coefficients (scale, shift: f64 scratch for the affine kernel) and the statistics outputs.
// The batch counter, when given, is counted once per call by thread 0 of block 0.
__global__ void bn_forward_finalize_kernel(BnShape v, BnPartition part, const double* psum, const double* pm2,
                                           bool training, BnChan rm, BnChan rv, BnChan w, BnChan b, double momentum,
                                           double eps, int64_t* counter, BnChan save_mean, BnChan save_invstd,
                                           double* scale, double* shift) {
  if (counter && blockIdx.x == 0 && threadIdx.x == 0) *counter += 1;
  const int64_t M = v.N * v.S;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < v.C; c += int64_t(blockDim.x) * gridDim.x) {
    double mean, var, var_unbiased = 0;
    if (training) {
      const double* ps = psum + c * part.chunks;
      const double* pq = pm2 + c * part.chunks;
      double total = 0;
      for (int64_t p = 0; p < part.chunks; ++p) total += ps[p];
      mean = total / static_cast<double>(M);
      double m2 = 0;
      for (int64_t p = 0; p < part.chunks; ++p) {
        const int64_t rest = M - p * part.len;
        const double np = static_cast<double>(rest < part.len ? rest : part.len);
        const double d = ps[p] / np - mean;
        m2 += pq[p] + np * d * d;
      }
      var = m2 / static_cast<double>(M);
      var_unbiased = m2 / static_cast<double>(M - 1);
    } else {
      mean = chan_load(rm, c, 0.0);
      var = chan_load(rv, c, 1.0);
    }
    const fn::BnCoefficients k = fn::bn_coefficients(mean, var, chan_load(w, c, 1.0), chan_load(b, c, 0.0), eps);
    scale[c] = k.scale;
    shift[c] = k.shift;
    chan_store(save_mean, c, mean);
    chan_store(save_invstd, c, k.invstd);
    if (training && rm.data) {
      chan_store(rm, c, fn::bn_running(chan_load(rm, c, 0.0), mean, momentum));
      chan_store(rv, c, fn::bn_running(chan_load(rv, c, 0.0), var_unbiased, momentum));
    }
  }
}

// out = x * scale[c] + shift[c] in acc_t, rounded once; I: 32-bit indexing when it fits.
template <typename T, typename I>
__global__ void bn_affine_kernel(const T* x, I S, I C, I n, const double* scale, const double* shift, T* out) {
  using A = acc_t<T>;
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += I(blockDim.x) * gridDim.x) {
    const I c = (i / S) % C;
    out[i] = static_cast<T>(static_cast<A>(x[i]) * static_cast<A>(scale[c]) + static_cast<A>(shift[c]));
  }
}

// Block (c, p): the chunk's sum g and sum g (x - mean[c]).
template <typename T>
__global__ void bn_grad_partials_kernel(const T* g, const T* x, BnShape v, BnPartition part, BnChan mean,
                                        double* psg, double* psgx) {
  using A = acc_t<T>;
  __shared__ double sh[2 * kBnThreads];
  const int64_t c = blockIdx.x, p = blockIdx.y, M = v.N * v.S;
  const int64_t begin = p * part.len, end = begin + part.len < M ? begin + part.len : M;
  const double mu = chan_load(mean, c, 0.0);
  double sg = 0, sgx = 0;
  for_chunk(v, c, begin, end, [&](int64_t o) {
    const double gv = static_cast<double>(static_cast<A>(g[o]));
    sg += gv;
    sgx += gv * (static_cast<double>(static_cast<A>(x[o])) - mu);
  });
  block_sum2(sg, sgx, sh);
  if (threadIdx.x == 0) {
    psg[c * part.chunks + p] = sg;
    psgx[c * part.chunks + p] = sgx;
  }
}

// One thread per channel: the sums in chunk order, the two outputs (their dtype) and the
// coefficients of grad_x = ka g + kb x + kd (f64 scratch).
__global__ void bn_grad_finalize_kernel(BnShape v, BnPartition part, const double* psg, const double* psgx,
                                        bool training, BnChan w, BnChan mean, BnChan invstd, BnChan sum_gxhat_out,
                                        BnChan sum_g_out, double* ka, double* kb, double* kd) {
  const double M = static_cast<double>(v.N * v.S);
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < v.C; c += int64_t(blockDim.x) * gridDim.x) {
    double sg = 0, sgx = 0;
    for (int64_t p = 0; p < part.chunks; ++p) {
      sg += psg[c * part.chunks + p];
      sgx += psgx[c * part.chunks + p];
    }
    const double is = chan_load(invstd, c, 1.0);
    const double sum_gxhat = sgx * is;
    chan_store(sum_gxhat_out, c, sum_gxhat);
    chan_store(sum_g_out, c, sg);
    const fn::BnGradCoefficients k =
        fn::bn_grad_coefficients(chan_load(w, c, 1.0), is, chan_load(mean, c, 0.0), sg, sum_gxhat, M, training);
    ka[c] = k.ka;
    kb[c] = k.kb;
    kd[c] = k.kd;
  }
}

template <typename T, typename I>
__global__ void bn_grad_input_kernel(const T* g, const T* x, I S, I C, I n, const double* ka, const double* kb,
                                     const double* kd, T* gx) {
  using A = acc_t<T>;
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += I(blockDim.x) * gridDim.x) {
    const I c = (i / S) % C;
    gx[i] = static_cast<T>(static_cast<A>(ka[c]) * static_cast<A>(g[i]) + static_cast<A>(kb[c]) * static_cast<A>(x[i]) +
                           static_cast<A>(kd[c]));
  }
}

dim3 partials_grid(BnShape v, BnPartition part) {
  return dim3(static_cast<unsigned>(v.C), static_cast<unsigned>(part.chunks));
}
// 32-bit element indexing below 2^31 elements (the grid-stride step stays below 2^31 as well).
bool small_index(int64_t n) { return n < (int64_t(1) << 31); }

}  // namespace

cudaError_t launch_bn_forward(DType dt, const void* x, BnShape v, bool training, BnChan running_mean,
                              BnChan running_var, BnChan weight, BnChan bias, double momentum, double eps,
                              int64_t* counter, BnChan save_mean, BnChan save_invstd, double* scratch, void* out,
                              cudaStream_t s) {
  const BnPartition part = bn_partition(v);
  double* psum = scratch;
  double* pm2 = scratch + v.C * part.chunks;
  double* scale = scratch + 2 * v.C * part.chunks;
  double* shift = scale + v.C;
  const int64_t n = v.N * v.C * v.S;
  return visit_floating_cuda(dt, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x);
    cudaError_t e = cudaSuccess;
    if (training && v.C > 0) {
      e = launch_kernel(bn_stats_partials_kernel<T>, partials_grid(v, part), kBnThreads, 0, s, xp, v, part, psum, pm2);
      if (e != cudaSuccess) return e;
    }
    e = launch_kernel(bn_forward_finalize_kernel, grid_for(v.C, kBnFinalize), kBnFinalize, 0, s, v, part, psum, pm2,
                      training, running_mean, running_var, weight, bias, momentum, eps, counter, save_mean,
                      save_invstd, scale, shift);
    if (e != cudaSuccess || n == 0) return e;
    T* op = static_cast<T*>(out);
    if (small_index(n))
      return launch_kernel(bn_affine_kernel<T, uint32_t>, grid_for(n, kThreads), kThreads, 0, s, xp,
                           static_cast<uint32_t>(v.S), static_cast<uint32_t>(v.C), static_cast<uint32_t>(n), scale,
                           shift, op);
    return launch_kernel(bn_affine_kernel<T, int64_t>, grid_for(n, kThreads), kThreads, 0, s, xp, v.S, v.C, n, scale,
                         shift, op);
  });
}

cudaError_t launch_bn_backward(DType dt, const void* g, const void* x, BnShape v, bool training, BnChan weight,
                               BnChan save_mean, BnChan save_invstd, BnChan sum_gxhat, BnChan sum_g, double* scratch,
                               void* gx, cudaStream_t s) {
  const BnPartition part = bn_partition(v);
  double* psg = scratch;
  double* psgx = scratch + v.C * part.chunks;
  double* ka = scratch + 2 * v.C * part.chunks;
  double* kb = ka + v.C;
  double* kd = kb + v.C;
  const int64_t n = v.N * v.C * v.S;
  if (v.C == 0) return cudaSuccess;  // no channel: nothing to sum or write
  return visit_floating_cuda(dt, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    const T* gp = static_cast<const T*>(g);
    const T* xp = static_cast<const T*>(x);
    cudaError_t e = launch_kernel(bn_grad_partials_kernel<T>, partials_grid(v, part), kBnThreads, 0, s, gp, xp, v,
                                  part, save_mean, psg, psgx);
    if (e != cudaSuccess) return e;
    e = launch_kernel(bn_grad_finalize_kernel, grid_for(v.C, kBnFinalize), kBnFinalize, 0, s, v, part, psg, psgx,
                      training, weight, save_mean, save_invstd, sum_gxhat, sum_g, ka, kb, kd);
    if (e != cudaSuccess || n == 0) return e;
    T* op = static_cast<T*>(gx);
    if (small_index(n))
      return launch_kernel(bn_grad_input_kernel<T, uint32_t>, grid_for(n, kThreads), kThreads, 0, s, gp, xp,
                           static_cast<uint32_t>(v.S), static_cast<uint32_t>(v.C), static_cast<uint32_t>(n), ka, kb,
                           kd, op);
    return launch_kernel(bn_grad_input_kernel<T, int64_t>, grid_for(n, kThreads), kThreads, 0, s, gp, xp, v.S, v.C, n,
                         ka, kb, kd, op);
  });
}

}  // namespace mixtape::cuda
