// examples/custom_op/softplus.h — the public function of the example op.
#pragma once
#include <mixtape/mixtape.h>

namespace example {

// softplus(x) = log(1 + e^x), computed stably: x + log1p(e^-x) for x > 0, log1p(e^x) otherwise.
// x: any shape, any dtype (integers compute in f32). Gradient: sigmoid(x).
// AMP: runs in f32 under autocast (16-bit inputs are cast up), as PyTorch's softplus on CUDA.
mixtape::Tensor softplus(const mixtape::Tensor& x);

}  // namespace example
