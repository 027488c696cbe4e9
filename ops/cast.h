// ops/cast.h — changing dtype or device. Casts are ordinary differentiable ops: the gradient of
// to(f16) is cast back to the source dtype (this is how an f32 weight used by an f16 op under
// autocast ends up with an f32 .grad).
#pragma once
#include "core/tensor.h"

namespace mixtape {

Tensor to_dtype(const Tensor& x, DType dtype);     // returns x itself if already dtype
Tensor to_device(const Tensor& x, Device device);  // returns x itself if already there
Tensor clone(const Tensor& x);                     // a contiguous copy, differentiable
Tensor contiguous(const Tensor& x);                // x if already contiguous, else clone

}  // namespace mixtape
