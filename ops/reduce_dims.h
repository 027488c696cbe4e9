// ops/reduce_dims.h — the dims arithmetic of the reductions sum, mean, max and amax: the
// normalised reduced dims, the output shape, the kept-first/reduced-last view and sum's dtypes.
// Shared by the CPU kernels (ops/reduce.cpp, where it is defined) and the CUDA glue
// (ops/cuda/reduce_ops.cpp), so both backends accept the same dims and fail with the same
// messages. Internal: not part of the public API.
#pragma once
#include <cstdint>
#include <utility>

#include "core/dispatcher.h"
#include "core/tensor.h"

namespace mixtape {

// Normalised, sorted, unique reduced dims of x; empty `dims` means all. A dim named twice is an
// error of `op`.
IntList reduced_dims(const Tensor& x, const IntList& dims, const char* op);

// x's shape without the (sorted) reduced dims rdims, or with them as 1 when keepdim.
IntList reduced_shape(const Tensor& x, const IntList& rdims, bool keepdim);

// x viewed (an alias, not a copy) with kept dims first and the reduced dims rdims last, so each
// output element reduces one run; returns (view, run length). The caller makes it contiguous.
std::pair<Tensor, int64_t> reduced_last_view(const Tensor& x, const IntList& rdims);

// sum / mean (one kernel; the op says which): dims (empty = all), keepdim, dtype (optional).
struct SumArgs {
  IntList rdims;     // reduced_dims of attr dims
  bool keepdim;
  bool is_mean;
  DType out_dtype;   // attr dtype, else x's (Int64 for integers and bool)
  DType src_dtype;   // x is cast to this first: out_dtype when both are floating (sum(f16, dtype=f32)
                     // accumulates f16 values as f32), else x's
};
// Reads and checks the attrs of a sum / mean call on x (mean needs a floating dtype).
SumArgs sum_args(const OpCall& call, const Tensor& x);

}  // namespace mixtape
