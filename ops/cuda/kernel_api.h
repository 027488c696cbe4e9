// ops/cuda/kernel_api.h — the boundary between the op glue (ops/cuda/*.cpp, C++20, knows Tensor and
// the dispatcher) and the CUDA kernels (ops/cuda/*.cu, C++17, know only pointers, byte strides and
// dtypes). Everything that crosses it is plain data, so the .cu files never include core/tensor.h.
//
// Invariant: a launcher only enqueues work on the stream it is given and returns the launch's
// cudaError_t; the .cpp side checks it with MT_CUDA_CHECK (core/cuda/check.h) naming the op.
// Geometry is already broadcast and coalesced by the caller (ops/cuda/tensor_iter.h): at most
// kMaxDims dims, strides in BYTES, operand 0 is the output.
// C++17-clean, no Tensor: both compilers include this header.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace mixtape::cuda {

inline constexpr int kMaxDims = 8;      // after coalescing; more dims are made contiguous first
inline constexpr int kMaxOperands = 4;  // output + 3 inputs (where)

// N operands over one shape; operand 0 is written.
struct Operands {
  int nops = 0;
  int ndim = 0;
  int64_t numel = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxOperands][kMaxDims] = {};  // bytes; 0 where an operand is broadcast
  char* data[kMaxOperands] = {};
  // True when every operand is dense in the same row-major order (one dim, stride = element size):
  // the launchers then take the vectorized contiguous path.
  bool contiguous = false;
};

// Pointwise ops launch through fn::CudaKernels<F> (ops/pointwise_functor.h), not through here.
// out (dtype dst) = convert(in (dtype src)), with ops/cast.cpp's conversion rules.
cudaError_t launch_copy(DType dst, DType src, const Operands& ops, cudaStream_t s);
// Every element of operand 0 (dtype dt) = value, converted as ops/creation.cpp does.
cudaError_t launch_fill(DType dt, const Operands& ops, double value, cudaStream_t s);
// out = cond ? a : b, a byte copy of elem_size bytes (ops = out, cond (bool), a, b).
cudaError_t launch_where(size_t elem_size, const Operands& ops, cudaStream_t s);
// Philox fill of a contiguous tensor (ops/creation.cpp's random_fill_): element i from the words
// of stream (seed, offset), uniform [0,1) or standard normal.
cudaError_t launch_random_fill(DType dt, void* data, int64_t n, uint64_t seed, uint64_t offset, bool normal,
                               cudaStream_t s);
// dropout (ops/dropout.cpp): element i of a contiguous x is kept when the uniform of word i of
// (seed, offset) is < 1 - p; out = x * (1 / (1 - p)) in acc_t (0 when dropped), mask as bool.
// `state` (a graph's Philox slot during capture, else null): the seed is state[0] and the offset
// state[1] + offset, read on the device when the kernel runs (core/cuda/graph.h).
cudaError_t launch_dropout(DType dt, const void* x, void* out, bool* mask, int64_t n, double p, uint64_t seed,
                           uint64_t offset, const uint64_t* state, cudaStream_t s);

// ---- reductions over contiguous runs (ops/cuda/reduce.cu) ----
// `in` holds `runs` runs of `len` contiguous elements; each run reduces to one output element.
enum class ReduceOp : uint8_t { Sum, Mean, Max };
// Sum/Mean: out (dtype acc_dt: f64 for f32/f64 input, f32 for 16-bit, i64 for integers, as the
// CPU's reduce_acc) = sum (/ len). Max: out (dtype in_dt) = the run's max with NaN winning, and
// its first index in `indices` (may be null).
cudaError_t launch_reduce_runs(ReduceOp op, DType in_dt, const void* in, int64_t runs, int64_t len, void* out,
                               int64_t* indices, cudaStream_t s);

}  // namespace mixtape::cuda
