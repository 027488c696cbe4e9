// ops/cuda/indexing_ops.cpp — CUDA kernels of gather, scatter_add, index_select,
// index_select_backward, cat and slice_backward, with the CPU ops' checks and messages
// (ops/indexing.cpp, ops/shape_ops.cpp, ops/views.cpp). Index values are checked by the kernels and
// reported at the next synchronisation (core/cuda/deferred_check.h): a located mixtape::Error with
// the CPU's message, never a device fault, and no host stop. cat and slice_backward are device copies into views of the
// output.
#include "core/cuda/deferred_check.h"
#include "ops/creation.h"
#include "ops/cuda/indexing_kernels.h"
#include "ops/cuda/tensor_iter.h"
#include "ops/dim_layout.h"
#include "ops/index_select_args.h"

namespace mixtape::cuda {
namespace {

// Shapes are checked at once; the values, on the device (core/cuda/deferred_check.h): the
// kernel records the first out-of-range position, reported with the CPU's message.
void check_index(const Tensor& index, int64_t dim, const IntList& data_sizes, const char* op) {
  MT_CHECK(index.dtype() == DType::Int64, op, ": index must be Int64, got ", dtype_name(index.dtype()));
  MT_CHECK(index.dim() == static_cast<int64_t>(data_sizes.size()), op, ": index ", index.describe(),
           " must have the same number of dims as the data ", shape_str(data_sizes));
  MT_CHECK(index.dim() <= kMaxDims, op, ": CUDA gather/scatter take at most ", kMaxDims, " dims, got ",
           index.describe());
  for (int64_t d = 0; d < index.dim(); ++d)
    MT_CHECK(d == dim || index.sizes()[d] <= data_sizes[static_cast<size_t>(d)], op, ": index size ",
             index.sizes()[d], " exceeds data size ", data_sizes[static_cast<size_t>(d)], " at dim ", d);
}
DeferredCheck gather_check(const char* op, int64_t dim, int64_t n) {
  return DeferredCheck(op, [dim, n](uint64_t position, uint64_t value) {
    return gather_bound_message(static_cast<int64_t>(value), static_cast<int64_t>(position), dim, n);
  });
}

IndexGeom index_geom(const Tensor& index, int64_t dim, const IntList& data_strides, int64_t dim_size,
                     unsigned long long* bad) {
  IndexGeom g{};
  g.dim_size = dim_size;
  g.bad = bad;
  g.nd = static_cast<int>(index.dim());
  for (int d = 0; d < g.nd; ++d) {
    g.sizes[d] = index.sizes()[static_cast<size_t>(d)];
    g.data_strides[d] = data_strides[static_cast<size_t>(d)];
  }
  g.dim = static_cast<int>(dim);
  g.n = index.numel();
  return g;
}

TensorList gather_cuda(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& index = c.inputs[1];
  const int64_t dim = wrap_dim(c.attrs.get<int64_t>("dim"), x.dim(), c.name());
  check_index(index, dim, x.sizes(), c.name());
  DeviceGuard guard(x.device().index());
  const Tensor idx = dense(index, c.name());
  Tensor out = empty_on(index.sizes(), x.dtype(), x.device());
  DeferredCheck check = gather_check(c.name(), dim, x.sizes()[dim]);
  MT_CUDA_CHECK(launch_gather(x.element_size(), index_geom(idx, dim, x.strides(), x.sizes()[dim], check.slot()),
                              x.data_ptr(),
                              static_cast<const int64_t*>(idx.data_ptr()), out.data_ptr(), current_stream()),
                c.name());
  check.commit(idx.data_ptr(), sizeof(int64_t));
  return {out};
}

TensorList scatter_add_cuda(const OpCall& c) {
  const Tensor& src = c.inputs[0];
  const Tensor& index = c.inputs[1];
  const IntList& sizes = c.attrs.get<IntList>("sizes");
  const int64_t dim = wrap_dim(c.attrs.get<int64_t>("dim"), static_cast<int64_t>(sizes.size()), c.name());
  check_index(index, dim, sizes, c.name());
  MT_CHECK(src.sizes() == index.sizes(), c.name(), ": src ", src.describe(), " and index ", index.describe(),
           " must have the same shape");
  const DType acc_dt = is_reduced_float(src.dtype()) ? DType::Float32 : src.dtype();
  MT_CHECK(acc_dt == DType::Float32 || acc_dt == DType::Float64 || acc_dt == DType::Int32 || acc_dt == DType::Int64,
           c.name(), ": CUDA scatter_add takes f16, bf16, f32, f64, i32 or i64, got ", src.describe());
  DeviceGuard guard(src.device().index());
  Tensor acc = empty_on(sizes, acc_dt, src.device());
  fill_(acc, 0.0);
  const Tensor s = dense(cast_to(src, acc_dt, c.name()), c.name()), idx = dense(index, c.name());
  const int64_t n = sizes[static_cast<size_t>(dim)];
  DeferredCheck check = gather_check(c.name(), dim, n);
  MT_CUDA_CHECK(launch_scatter_add(acc_dt, index_geom(idx, dim, acc.strides(), n, check.slot()), s.data_ptr(),
                                   static_cast<const int64_t*>(idx.data_ptr()), acc.data_ptr(), current_stream()),
                c.name());
  check.commit(idx.data_ptr(), sizeof(int64_t));
  return {cast_to(acc, src.dtype(), c.name())};
}

// index_select's index: 1-D or 0-d Int64 (ops/index_select_args.h); its values in [0, n) are
// checked by the kernel (index_select_check), reported with the CPU's message.
Tensor checked_index(const Tensor& index, const char* op) {
  check_index_select_index(index, op);
  return dense(index, op);
}
DeferredCheck index_select_check(const char* op, int64_t dim, int64_t n) {
  return DeferredCheck(op, [dim, n](uint64_t position, uint64_t value) {
    return index_select_bound_message(static_cast<int64_t>(value), static_cast<int64_t>(position), dim, n);
  });
}

TensorList index_select_cuda(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const int64_t d = index_select_dim(c.name(), x, c.attrs.get<int64_t>("dim"));
  const int64_t n = x.sizes()[d];
  DeviceGuard guard(x.device().index());
  const Tensor idx = checked_index(c.inputs[1], c.name());
  DeferredCheck check = index_select_check(c.name(), d, n);
  const int64_t k = idx.numel();
  IntList out_sizes = x.sizes();
  out_sizes[d] = k;
  const Tensor xd = dense(x, c.name());
  Tensor out = empty_on(out_sizes, x.dtype(), x.device());
  const DimLayout l = layout_of(x.sizes(), d);
  MT_CUDA_CHECK(launch_index_select(x.element_size(), xd.data_ptr(), static_cast<const int64_t*>(idx.data_ptr()),
                                    out.data_ptr(), l.outer, n, k, l.inner, check.slot(), current_stream()),
                c.name());
  check.commit(idx.data_ptr(), sizeof(int64_t));
  return {out};
}

TensorList index_select_backward_cuda(const OpCall& c) {
  const Tensor& g = c.inputs[0];
  const IntList& sizes = c.attrs.get<IntList>("sizes");
  const int64_t d = index_select_backward_dim(c.name(), sizes, c.attrs.get<int64_t>("dim"));
  const int64_t n = sizes[static_cast<size_t>(d)];
  DeviceGuard guard(g.device().index());
  const Tensor idx = checked_index(c.inputs[1], c.name());
  DeferredCheck check = index_select_check(c.name(), d, n);
  const int64_t k = idx.numel();
  check_index_select_backward_grad(g, sizes, d, k, c.name());
  const DType acc_dt = is_reduced_float(g.dtype()) ? DType::Float32 : g.dtype();
  Tensor acc = empty_on(sizes, acc_dt, g.device());
  fill_(acc, 0.0);
  const Tensor gd = dense(cast_to(g, acc_dt, c.name()), c.name());
  const DimLayout l = layout_of(sizes, d);
  MT_CUDA_CHECK(launch_index_add(acc_dt, gd.data_ptr(), static_cast<const int64_t*>(idx.data_ptr()), acc.data_ptr(),
                                 l.outer, n, k, l.inner, check.slot(), current_stream()),
                c.name());
  check.commit(idx.data_ptr(), sizeof(int64_t));
  return {cast_to(acc, g.dtype(), c.name())};
}

// ---- cat: ops/shape_ops.cpp's plan (PyTorch's legacy rule: a 1-D empty tensor joins any cat) ----
bool legacy_empty(const IntList& s) { return s.size() == 1 && s[0] == 0; }

TensorList cat_cuda(const OpCall& c) {
  const TensorList& ts = c.inputs;
  const char* op = c.name();
  MT_CHECK(!ts.empty(), op, ": expected a non-empty list of tensors");
  DType dtype = DType::Float32;
  int64_t ref = -1;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    MT_CHECK(t.defined(), op, ": tensor ", i, " is undefined");
    MT_CHECK(t.dim() > 0, op, ": zero-dimensional tensor (at position ", i, ") cannot be concatenated");
    dtype = i == 0 ? t.dtype() : promote_types(dtype, t.dtype());
    if (ref < 0 && !legacy_empty(t.sizes())) ref = static_cast<int64_t>(i);
  }
  const Device dev = call_device(c);
  DeviceGuard guard(dev.index());
  if (ref < 0) {  // every tensor is [0]
    wrap_dim(c.attrs.get<int64_t>("dim"), 1, op);
    return {empty_on({0}, dtype, dev)};
  }
  const Tensor& r = ts[static_cast<size_t>(ref)];
  const int64_t dim = wrap_dim(c.attrs.get<int64_t>("dim"), r.dim(), op);
  IntList sizes = r.sizes();
  sizes[dim] = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    if (legacy_empty(t.sizes())) continue;
    MT_CHECK(t.dim() == r.dim(), op, ": tensors must have the same number of dimensions: tensor ", ref, " is ",
             r.describe(), " (", r.dim(), "-D) but tensor ", i, " is ", t.describe(), " (", t.dim(), "-D)");
    for (int64_t d = 0; d < r.dim(); ++d)
      MT_CHECK(d == dim || t.sizes()[d] == r.sizes()[d], op, ": sizes of tensors must match except in dimension ", dim,
               ": expected size ", r.sizes()[d], " but got size ", t.sizes()[d], " in dimension ", d, " for tensor ",
               i, " (", t.describe(), "; tensor ", ref, " is ", r.describe(), ")");
    sizes[dim] += t.sizes()[dim];
  }
  Tensor out = empty_on(sizes, dtype, dev);
  int64_t off = 0;
  for (const Tensor& t : ts) {
    if (legacy_empty(t.sizes())) continue;
    if (t.numel() > 0) {
      Tensor region = out.as_strided_alias(t.sizes(), out.strides(), off * out.strides()[dim]);
      copy_into(region, t, op);  // converts to the promoted dtype, any strides
    }
    off += t.sizes()[dim];
  }
  return {out};
}

// slice_backward(g; sizes, dim, start, end, step): zeros(sizes) with the slice region set to g.
TensorList slice_backward_cuda(const OpCall& c) {
  const Tensor& g = c.inputs[0];
  DeviceGuard guard(g.device().index());
  Tensor out = empty_on(c.attrs.get<IntList>("sizes"), g.dtype(), g.device());
  fill_(out, 0.0);
  const Tensor region = dispatch1(*find_op("slice"), {out}, c.attrs);  // the slice view (any-device kernel)
  copy_into(region, g, c.name());
  return {out};
}

const bool kRegistered = [] {
  register_kernel("gather", DeviceType::CUDA, gather_cuda);
  register_kernel("scatter_add", DeviceType::CUDA, scatter_add_cuda);
  register_kernel("index_select", DeviceType::CUDA, index_select_cuda);
  register_kernel("index_select_backward", DeviceType::CUDA, index_select_backward_cuda);
  register_kernel("cat", DeviceType::CUDA, cat_cuda);
  register_kernel("slice_backward", DeviceType::CUDA, slice_backward_cuda);
  return true;
}();

}  // namespace
}  // namespace mixtape::cuda
