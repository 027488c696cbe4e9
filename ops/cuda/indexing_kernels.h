// ops/cuda/indexing_kernels.h — launchers of ops/cuda/indexing.cu (plain data, C++17).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "ops/cuda/kernel_api.h"

namespace mixtape::cuda {

// Geometry of gather / scatter_add: the index tensor (dense, `nd` dims of `sizes`) addresses the
// data tensor through `data_strides` (elements), its values replacing the coordinate along `dim`.
struct IndexGeom {
  int nd;
  int64_t sizes[kMaxDims];
  int64_t data_strides[kMaxDims];
  int dim;
  int64_t n;         // index elements
  int64_t dim_size;  // the data's size along dim: valid index values are [0, dim_size)
  // A deferred-check slot (core/cuda/deferred_check.h) for the first index position out of range;
  // such an element gathers 0 / adds nothing.
  unsigned long long* bad;
};
// out[i] = data[offset(i)], elem_size bytes per element (any dtype).
cudaError_t launch_gather(size_t elem_size, const IndexGeom& g, const void* data, const int64_t* index, void* out,
                          cudaStream_t s);
// acc[offset(i)] += src[i] (acc of dtype dt: f32, f64, i32 or i64; atomic adds).
cudaError_t launch_scatter_add(DType dt, const IndexGeom& g, const void* src, const int64_t* index, void* acc,
                               cudaStream_t s);
// index_select: out (outer, k, inner) = x (outer, n, inner) rows idx[j]; elem_size bytes each.
// idx values outside [0, n) go to the deferred-check slot `bad` (their rows are 0 / add nothing).
cudaError_t launch_index_select(size_t elem_size, const void* x, const int64_t* idx, void* out, int64_t outer,
                                int64_t n, int64_t k, int64_t inner, unsigned long long* bad, cudaStream_t s);
// Its adjoint: acc (outer, n, inner) += g (outer, k, inner) rows into rows idx[j] (dt f32/f64; atomic).
cudaError_t launch_index_add(DType dt, const void* g, const int64_t* idx, void* acc, int64_t outer, int64_t n,
                             int64_t k, int64_t inner, unsigned long long* bad, cudaStream_t s);

}  // namespace mixtape::cuda
