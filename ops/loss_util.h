// ops/loss_util.h — what the CPU loss files (ops/nll_loss.cpp, cross_entropy.cpp, mse_loss.cpp,
// bce_loss.cpp) share: the reduction attribute, dense copies of inputs and weights in the compute
// dtype, optional saved inputs, and the refusal of a weight that requires grad.
// Invariant (the dtype contract of every CPU loss kernel): inputs f16/bf16/f32/f64; per-element
// math in acc_t<T> (f32 for 16-bit); Sum/Mean accumulate in f64 whatever T and the result is
// rounded once to the output dtype; weights are read as f32 (f64 for f64 losses) without being
// rounded to a 16-bit input's dtype first.
// Internal: not part of the public API.
#pragma once
#include <cstddef>
#include <cstdint>

#include "autograd/backward_context.h"
#include "autograd/grad_mode.h"
#include "core/tensor.h"
#include "ops/cpu/elementwise.h"
#include "ops/loss.h"

namespace mixtape::loss_impl {

inline int64_t reduction_attr(Reduction r) { return static_cast<int64_t>(r); }

// t as a contiguous tensor of dtype dt (t itself when it already is one); not recorded.
inline Tensor dense(const Tensor& t, DType dt) {
  if (t.dtype() == dt && t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.sizes(), TensorOptions(dt));
  cpu::copy_into(out, t);
  return out;
}

// The dtype weights are read in for a loss computed in dt: f64 for f64, else f32.
inline DType weight_dtype(DType dt) { return dt == DType::Float64 ? DType::Float64 : DType::Float32; }

// w broadcast to `shape` and materialised in dtype dt (undefined stays undefined).
inline Tensor broadcast_dense(const Tensor& w, const IntList& shape, DType dt) {
  if (!w.defined()) return w;
  Tensor out = Tensor::empty(shape, TensorOptions(dt));
  cpu::copy_into(out, w);
  return out;
}

// Optional inputs that were undefined at forward time have no saved slot.
inline Tensor optional_input(const BackwardContext& c, size_t i) {
  return c.saved_inputs[i].defined() || c.saved_inputs[i].released() ? c.input(i) : Tensor();
}

// PyTorch refuses, at forward time, a weight that requires grad for these losses.
inline void check_constant(const char* op, const Tensor& t, const char* what) {
  MT_CHECK(!(t.defined() && t.requires_grad() && autograd::GradMode::is_enabled()), op, ": ", what, " ",
           t.describe(), " requires grad, but ", op, " is not differentiable with respect to ", what,
           " (as in PyTorch); pass ", what, ".detach()");
}

inline IntList output_shape(Reduction r, const IntList& elementwise) { return r == Reduction::None ? elementwise : IntList{}; }

}  // namespace mixtape::loss_impl
