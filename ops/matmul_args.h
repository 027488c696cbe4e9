// ops/matmul_args.h — matmul's argument checks and output shape, and the BLAS operand-layout test,
// shared by the CPU kernel (ops/matmul.cpp, where they are defined) and the CUDA glue
// (ops/cuda/gemm.cpp), so both backends accept the same operands, fail with the same messages and
// hand a GEMM the same strided operands. Internal: not part of the public API.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace mixtape {

// matmul(a: (*A, n, k), b: (*B, k, m)) -> (broadcast(*A, *B), n, m).
struct MatmulShape {
  int64_t n, k, m;
  IntList abatch, bbatch;  // *A, *B
  IntList batch;           // broadcast(*A, *B)
  IntList out_shape;       // (batch, n, m)
};
// Checks both operands have >= 2 dims, are floating of one dtype, and have matching inner dims
// and broadcastable batch dims.
MatmulShape check_matmul_args(const char* op, const Tensor& a, const Tensor& b);

// A row-major (rows, cols) matrix with element strides (sr, sc) as a BLAS operand: trans = false
// for row-major with leading dim ld, true for column-major. False when neither stride is 1 (or
// the other too small): the caller makes the operand dense first.
struct BlasOperand {
  bool trans;
  int64_t ld;
};
bool blas_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc, BlasOperand& out);

}  // namespace mixtape
