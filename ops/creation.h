// ops/creation.h — tensors made from nothing (zeros, arange, randn) and in-place writes
// (fill_, copy_, add_, mul_). Random tensors come from core/rng.h's counter-based stream, so
// a seed gives the same values on any thread count (and on CUDA, once its kernels exist).
#pragma once
#include "core/rng.h"
#include "core/tensor.h"

namespace mixtape {

Tensor empty(const IntList& sizes, TensorOptions opts = {});
Tensor zeros(const IntList& sizes, TensorOptions opts = {});
Tensor ones(const IntList& sizes, TensorOptions opts = {});
Tensor full(const IntList& sizes, const Scalar& value, TensorOptions opts = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, const Scalar& value);
// [start, end) with `step`; like PyTorch, Int64 unless any argument is floating.
Tensor arange(const Scalar& end, TensorOptions opts);
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1);
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, TensorOptions opts);
Tensor linspace(double start, double end, int64_t steps, TensorOptions opts = {});
// Uniform [0, 1) and standard normal, from `gen` (the default generator when null).
Tensor rand(const IntList& sizes, TensorOptions opts = {}, Generator* gen = nullptr);
Tensor randn(const IntList& sizes, TensorOptions opts = {}, Generator* gen = nullptr);

// In-place (bump the version counter; refused on tensors autograd needs).
Tensor& fill_(Tensor& t, const Scalar& value);
Tensor& zero_(Tensor& t);
Tensor& copy_(Tensor& dst, const Tensor& src);  // src broadcast to dst, dtype converted
Tensor& add_(Tensor& t, const Tensor& other, const Scalar& alpha = 1);
Tensor& mul_(Tensor& t, const Tensor& other);
Tensor& mul_(Tensor& t, const Scalar& other);

}  // namespace mixtape
