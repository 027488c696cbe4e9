// ops/cuda/tensor_iter.cpp — operand geometry, casts and copies on the device (see tensor_iter.h).
#include "ops/cuda/tensor_iter.h"

#include <climits>

#include "ops/cpu/loops.h"

namespace mixtape::cuda {

Tensor empty_on(const IntList& sizes, DType dt, Device device) {
  return Tensor::empty(sizes, TensorOptions(dt).with_device(device));
}

Operands make_operands(const char* op, const Tensor& out, std::initializer_list<Tensor> inputs) {
  // Only copies and fills have FP8 CUDA kernels (docs/FP8.md): refuse here, naming the op and
  // dtype, rather than let a kernel's dtype switch fail with a bare cudaErrorInvalidValue.
  MT_CHECK(!is_float8(out.dtype()), op, ": no CUDA kernel for ", dtype_name(out.dtype()),
           " (FP8 tensors on CUDA support to()/copy and fill; convert with .to(Float32) first)");
  for (const Tensor& t : inputs)
    MT_CHECK(!is_float8(t.dtype()), op, ": no CUDA kernel for ", dtype_name(t.dtype()),
             " (FP8 tensors on CUDA support to()/copy and fill; convert with .to(Float32) first)");
  return make_operands_float8_ok(op, out, inputs);
}

Operands make_operands_float8_ok(const char* op, const Tensor& out, std::initializer_list<Tensor> inputs) {
  const IntList& shape = out.sizes();
  const int n = 1 + static_cast<int>(inputs.size());
  MT_CHECK(n <= kMaxOperands, op, ": too many operands for a CUDA elementwise kernel (", n, ")");
  std::vector<IntList> st;
  std::vector<size_t> esize;
  std::vector<char*> data;
  st.push_back(cpu::broadcast_byte_strides(out, shape));
  esize.push_back(out.element_size());
  data.push_back(static_cast<char*>(out.data_ptr()));
  for (const Tensor& t : inputs) {
    st.push_back(cpu::broadcast_byte_strides(t, shape));
    esize.push_back(t.element_size());
    data.push_back(static_cast<char*>(t.data_ptr()));
  }
  // Merge dims that are contiguous in every operand, drop size-1 dims (as cpu::coalesce).
  IntList sizes;
  std::vector<IntList> cst(static_cast<size_t>(n));
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!sizes.empty()) {
      bool merge = true;
      for (int k = 0; k < n; ++k)
        if (cst[k].back() != st[k][d] * shape[d]) merge = false;
      if (merge) {
        sizes.back() *= shape[d];
        for (int k = 0; k < n; ++k) cst[k].back() = st[k][d];
        continue;
      }
    }
    sizes.push_back(shape[d]);
    for (int k = 0; k < n; ++k) cst[k].push_back(st[k][d]);
  }
  if (sizes.empty()) {
    sizes.push_back(1);
    for (int k = 0; k < n; ++k) cst[k].push_back(static_cast<int64_t>(esize[k]));
  }
  MT_CHECK(static_cast<int>(sizes.size()) <= kMaxDims, op, ": CUDA kernels take at most ", kMaxDims,
           " non-mergeable dims, got ", sizes.size(), " for output ", out.describe(), " (make an input contiguous)");
  Operands o;
  o.nops = n;
  o.ndim = static_cast<int>(sizes.size());
  o.numel = out.numel();
  bool dense = o.ndim == 1;
  for (int d = 0; d < o.ndim; ++d) o.sizes[d] = sizes[static_cast<size_t>(d)];
  for (int k = 0; k < n; ++k) {
    o.data[k] = data[static_cast<size_t>(k)];
    for (int d = 0; d < o.ndim; ++d) o.strides[k][d] = cst[static_cast<size_t>(k)][static_cast<size_t>(d)];
    if (o.ndim == 1 && o.sizes[0] > 1 && o.strides[k][0] != static_cast<int64_t>(esize[static_cast<size_t>(k)]))
      dense = false;
  }
  o.contiguous = dense;
  return o;
}

Tensor densify_if_huge(const Tensor& t, const IntList& shape, const char* op) {
  if (numel_of(shape) <= INT_MAX) return t;
  if (t.sizes() == shape && t.is_contiguous()) return t;
  Tensor d = empty_on(shape, t.dtype(), t.device());
  copy_into(d, t, op);
  return d;
}

void copy_into(const Tensor& dst, const Tensor& src, const char* op) {
  if (dst.numel() == 0) return;
  DeviceGuard guard(dst.device().index());
  const Operands o = make_operands_float8_ok(op, dst, {src});
  MT_CUDA_CHECK(launch_copy(dst.dtype(), src.dtype(), o, current_stream()), op);
}

Tensor cast_to(const Tensor& t, DType dt, const char* op) {
  if (t.dtype() == dt) return t;
  Tensor out = empty_on(t.sizes(), dt, t.device());
  copy_into(out, t, op);
  return out;
}

Tensor dense(const Tensor& t, const char* op) {
  if (t.is_contiguous()) return t;
  Tensor out = empty_on(t.sizes(), t.dtype(), t.device());
  copy_into(out, t, op);
  return out;
}

Device call_device(const OpCall& call) {
  for (const Tensor& t : call.inputs)
    if (t.defined() && !t.is_wrapped_number()) return t.device();
  MT_ERROR(call.name(), ": no tensor input to take the CUDA device from");
}

}  // namespace mixtape::cuda
