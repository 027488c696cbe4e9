// ops/linear_args.h — linear's argument checks, shared by the CPU kernel and the public entry
// point (ops/linear.cpp, where they are defined) and the CUDA glue (ops/cuda/gemm.cpp), so every
// path fails with the same messages. Internal: not part of the public API.
#pragma once
#include "core/tensor.h"

namespace mixtape {

// linear(x: (*, in), w: (out, in), b: (out) or undefined): shapes; with `dtypes`, also a floating
// x with w and b of its dtype (the kernels' rule; the entry point leaves dtypes to autocast).
void check_linear(const char* op, const Tensor& x, const Tensor& w, const Tensor& b, bool dtypes);

}  // namespace mixtape
