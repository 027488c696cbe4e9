// ops/indexing.cpp — gather and its adjoint scatter_add (each is the other's backward).
// Index values are checked against the dim size: an out-of-range index is an error naming the
// position and value, never an out-of-bounds read.
#include "ops/indexing.h"

#include "ops/cpu/elementwise.h"
#include "ops/index_select_args.h"
#include "ops/op_def.h"

namespace mixtape {
namespace {

void check_index(const Tensor& index, int64_t dim, const IntList& data_sizes, const char* op) {
  MT_CHECK(index.dtype() == DType::Int64, op, ": index must be Int64, got ", dtype_name(index.dtype()));
  MT_CHECK(index.dim() == static_cast<int64_t>(data_sizes.size()), op, ": index ", index.describe(),
           " must have the same number of dims as the data ", shape_str(data_sizes));
  for (int64_t d = 0; d < index.dim(); ++d)
    MT_CHECK(d == dim || index.sizes()[d] <= data_sizes[static_cast<size_t>(d)], op, ": index size ",
             index.sizes()[d], " exceeds data size ", data_sizes[static_cast<size_t>(d)], " at dim ", d);
}

// Walks every index element; calls fn(data_offset, index_linear) with element offsets.
template <typename F>
void walk(const Tensor& index, int64_t dim, const IntList& data_strides, int64_t dim_size, const char* op, F&& fn) {
  Tensor idx = contiguous(index.detach());
  const int64_t* ip = idx.data_ptr<int64_t>();
  int64_t n = idx.numel();
  IntList sizes = idx.sizes();
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, off = 0;
    for (int64_t d = idx.dim() - 1; d >= 0; --d) {
      int64_t c = rem % sizes[d];
      rem /= sizes[d];
      if (d == dim) {
        int64_t v = ip[i];
        MT_CHECK(v >= 0 && v < dim_size, op, ": ", gather_bound_message(v, i, dim, dim_size));
        c = v;
      }
      off += c * data_strides[d];
    }
    fn(off, i);
  }
}

// ---- samples ----
// The index of the samples, (3, 2) along dim 1 of a (3, 4) tensor with a repeated index in row 1:
// exact Int64 values on the device of the sample's input (an Index sample argument draws uniform
// values; this case needs the repeat at a given place).
Tensor sample_index(const Tensor& like) {
  return tensor({0.0, 3.0, 1.0, 1.0, 2.0, 0.0}, {3, 2}, TensorOptions(DType::Int64)).to(like.device());
}
// Parity: gather moves values; scatter_add adds at most two values into each zero here (a + b =
// b + a, so the device's atomic order cannot show), forward and backward: bit-identical, 0.
constexpr SampleChecks kIndexingParity{.parity_roundings = 0};

TensorList gather_cpu(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& index = c.inputs[1];
  int64_t dim = wrap_dim(c.attrs.get<int64_t>("dim"), x.dim(), c.name());
  check_index(index, dim, x.sizes(), c.name());
  Tensor out = Tensor::empty(index.sizes(), TensorOptions(x.dtype()));
  visit_dtype(x.dtype(), c.name(), [&]<typename T>() {
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    walk(index, dim, x.strides(), x.sizes()[dim], c.name(), [&](int64_t off, int64_t i) { op[i] = xp[off]; });
  });
  return {out};
}
TensorList gather_backward(BackwardContext& c) {
  int64_t dim = wrap_dim(c.attrs.get<int64_t>("dim"), static_cast<int64_t>(c.input_sizes(0).size()), "gather");
  return {scatter_add_into_zeros(c.grad(), dim, c.input(1), c.input_sizes(0)), Tensor()};
}
const OpSchema& kGather = define_op("gather")
                             .save({1})
                             .grad(gather_backward)
                             .kernel(DeviceType::CPU, gather_cpu)
                             .sample("repeated-index", {arg({3, 4})},
                                     [](const TensorList& x) { return TensorList{gather(x[0], 1, sample_index(x[0]))}; },
                                     kIndexingParity);

TensorList scatter_add_cpu(const OpCall& c) {
  const Tensor& src = c.inputs[0];
  const Tensor& index = c.inputs[1];
  const IntList& sizes = c.attrs.get<IntList>("sizes");
  int64_t dim = wrap_dim(c.attrs.get<int64_t>("dim"), static_cast<int64_t>(sizes.size()), c.name());
  check_index(index, dim, sizes, c.name());
  MT_CHECK(src.sizes() == index.sizes(), c.name(), ": src ", src.describe(), " and index ", index.describe(),
           " must have the same shape");
  // Accumulate in the compute type, round once.
  DType acc_dt = is_reduced_float(src.dtype()) ? DType::Float32 : src.dtype();
  Tensor acc = Tensor::empty(sizes, TensorOptions(acc_dt));
  if (acc.nbytes()) std::memset(acc.data_ptr(), 0, acc.nbytes());
  Tensor s = contiguous(cpu::cast_to(src, acc_dt).detach());
  visit_dtype(acc_dt, c.name(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      MT_ERROR(c.name(), ": unsupported dtype ", dtype_name(acc_dt));
    } else {
      T* ap = static_cast<T*>(acc.data_ptr());
      const T* sp = static_cast<const T*>(s.data_ptr());
      walk(index, dim, acc.strides(), sizes[static_cast<size_t>(dim)], c.name(),
           [&](int64_t off, int64_t i) { ap[off] += sp[i]; });
    }
  });
  return {cpu::cast_to(acc, src.dtype())};
}
TensorList scatter_add_backward(BackwardContext& c) {
  return {gather(c.grad(), c.attrs.get<int64_t>("dim"), c.input(1)), Tensor()};
}
const OpSchema& kScatterAdd = define_op("scatter_add")
                                  .policy(AmpPolicy::Promote)  // PyTorch's CUDA promote list
                                  .save({1})
                                  .grad(scatter_add_backward)
                                  .kernel(DeviceType::CPU, scatter_add_cpu)
                                  .sample("repeated-index", {arg({3, 2})},
                                          [](const TensorList& x) {
                                            return TensorList{scatter_add_into_zeros(x[0], 1, sample_index(x[0]), {3, 4})};
                                          },
                                          kIndexingParity);

}  // namespace

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  return dispatch1(kGather, {x, index}, {{"dim", dim}});
}
Tensor scatter_add_into_zeros(const Tensor& src, int64_t dim, const Tensor& index, const IntList& sizes) {
  return dispatch1(kScatterAdd, {src, index}, {{"dim", dim}, {"sizes", sizes}});
}

}  // namespace mixtape
