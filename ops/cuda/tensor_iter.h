// ops/cuda/tensor_iter.h — the host side of every CUDA elementwise op (C++20, knows Tensor): device
// tensors, operand geometry for the kernels (broadcast, coalesced, in bytes), dtype casts and
// dense copies on the device. The CUDA counterpart of ops/cpu/elementwise.h's helpers.
// Invariant: every function runs on the tensors' device (DeviceGuard) and enqueues on that
// device's current stream; nothing here synchronises with the host.
#pragma once
#include <initializer_list>

#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/dispatcher.h"
#include "ops/cuda/kernel_api.h"

namespace mixtape::cuda {

// A fresh contiguous tensor on `device`.
Tensor empty_on(const IntList& sizes, DType dt, Device device);
// Geometry for out = f(inputs...) with inputs broadcast to out's shape. Throws (naming `op`) when
// more than kMaxDims dims remain after merging. Operands of >= 2^31 elements that are not dense
// must be densified first (dense_inputs) unless the launcher instantiates 64-bit indexing.
Operands make_operands(const char* op, const Tensor& out, std::initializer_list<Tensor> inputs);
// make_operands for the kernels that read and write FP8 (copies and fills, ops/cuda/fp8_convert.cu);
// make_operands itself refuses FP8 operands by name, since no arithmetic kernel has FP8 yet.
Operands make_operands_float8_ok(const char* op, const Tensor& out, std::initializer_list<Tensor> inputs);
// `t` broadcast to `shape` as a dense tensor when the op has >= 2^31 elements and `t` is not
// already dense with that shape (the launchers index such work with 64-bit only when dense).
Tensor densify_if_huge(const Tensor& t, const IntList& shape, const char* op);
// dst (any strides) = src broadcast to dst's shape, converting dtypes (ops/cast.cpp's rules).
void copy_into(const Tensor& dst, const Tensor& src, const char* op);
// t converted to dt (t itself when it already is dt).
Tensor cast_to(const Tensor& t, DType dt, const char* op);
// t as a contiguous tensor (t itself when it already is).
Tensor dense(const Tensor& t, const char* op);
// The device every CUDA kernel of a call runs on: that of its first non-wrapped-number input.
Device call_device(const OpCall& call);

}  // namespace mixtape::cuda
