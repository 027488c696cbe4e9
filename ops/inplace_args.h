// ops/inplace_args.h — the checks of the in-place writes copy_, add_ and mul_: the source or
// other operand broadcasts to self, and the result dtype can be written back into self. Shared
// by the CPU kernels (ops/creation.cpp, where they are defined) and the CUDA glue
// (ops/cuda/creation_ops.cpp), so both backends fail with the same messages. Internal: not part
// of the public API.
#pragma once
#include "core/tensor.h"

namespace mixtape {

// copy_(dst, src): src broadcasts to dst's shape.
void check_copy_args(const char* op, const Tensor& dst, const Tensor& src);

// self op= other: the promoted dtype can be cast to self's (same kind), and other broadcasts to
// self's shape.
void check_inplace_result(const char* op, const Tensor& self, const Tensor& other);

}  // namespace mixtape
