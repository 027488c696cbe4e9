// ops/relu_mask.h — what relu keeps for its backward: the mask out > 0, one bit per element.
// Format: a UInt8 tensor of ceil(n / 8) bytes for an output of n elements; bit k (value 1 << k)
// of byte j is element 8 j + k of the output in row-major order, the unused high bits of the
// last byte are 0. Why bits in bytes: relu' is a step, one bit holds all of it (1/32 of an f32
// output, 1/16 of a 16-bit one), and bytes need no alignment or padding of n beyond the last
// byte, while a CUDA thread per byte writes it whole (no atomics).
// Invariant: relu_mask_grad(g, mask(out)) gives exactly relu_grad(g, out)'s bits (g where
// out > 0 in acc_t, compared as fn::ReluGrad does; NaN and zeros of out give +0), on every
// device. Internal: relu's backward calls relu_mask_grad; the public relu_grad takes the output.
#pragma once
#include "core/dispatcher.h"

namespace mixtape {

// The bytes of the mask of n elements.
inline int64_t relu_mask_bytes(int64_t n) { return (n + 7) / 8; }
// relu computes the mask unless its call says "mask": false (relu() asks for it only when the
// call is recorded for backward; a sample's plain dispatch gets it).
inline bool relu_wants_mask(const Attrs& a) { return !a.has("mask") || a.get<bool>("mask"); }
// relu_mask_grad's checks (both devices): g floating, mask UInt8 of relu_mask_bytes(g.numel()).
void check_relu_mask_grad(const char* op, const Tensor& g, const Tensor& mask);

// g where bit i of `mask` is set, +0 elsewhere; g's dtype and shape. Differentiable in g (itself).
Tensor relu_mask_grad(const Tensor& g, const Tensor& mask);

// The CPU kernels: the mask of relu's output `out` (any layout), and relu_mask_grad(g, mask).
Tensor relu_mask_cpu(const Tensor& out);
// relu's output and its mask in one pass, for contiguous BF16 (where its row list picks
// bits_avx512) and f32 input on an AVX-512 CPU: the bits of the pointwise relu and relu_mask_cpu.
// Empty where it does not apply (the caller runs those two).
TensorList relu_and_mask_cpu(const Tensor& x);
TensorList relu_mask_grad_cpu(const OpCall& call);

// The mask relu keeps for x (tests and samples).
Tensor relu_mask_of(const Tensor& x);

}  // namespace mixtape
