// ops/dropout.h — inverted dropout with a counter-based (Philox) mask.
#pragma once
#include "core/rng.h"
#include "core/tensor.h"

namespace mixtape {

// x: any shape, floating. Identity (returns x itself) when !training or p == 0; zeros when
// p == 1; otherwise each element is kept with probability 1 - p and kept values are scaled by
// 1 / (1 - p) (computed in f32 for 16-bit x, rounded once). The mask comes from `gen` (the
// default generator when null): the call reserves numel words of its Philox stream and element
// i (row-major) uses word i, so a seed gives the same mask on any thread count. p == 0, p == 1
// and !training draw nothing. Backward: g * mask / (1 - p). p outside [0, 1] is an error.
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);

}  // namespace mixtape
