// ops/views.cpp — view ops: a device-independent kernel that computes new sizes/strides over
// the same storage, and a backward that maps the gradient back to the base's shape.
#include "ops/views.h"

#include <numeric>

#include "ops/cpu/elementwise.h"
#include "ops/op_def.h"

namespace mixtape {
namespace {

IntList infer_size(const IntList& sizes, int64_t numel, const char* op, const Tensor& x) {
  IntList out = sizes;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      MT_CHECK(infer < 0, op, ": only one dimension can be inferred (-1), got ", shape_str(sizes));
      infer = static_cast<int64_t>(i);
    } else {
      MT_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in ", shape_str(sizes));
      known *= out[i];
    }
  }
  if (infer >= 0) {
    MT_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(sizes), " is invalid for input ",
             x.describe(), " of ", numel, " elements");
    out[static_cast<size_t>(infer)] = numel / known;
  }
  MT_CHECK(numel_of(out) == numel, op, ": shape ", shape_str(sizes), " is invalid for input ", x.describe(), " of ",
           numel, " elements");
  return out;
}

// ---- view ----
TensorList view_kernel(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  IntList sizes = infer_size(c.attrs.get<IntList>("sizes"), x.numel(), c.name(), x);
  MT_CHECK(x.is_contiguous(), c.name(), ": input ", x.describe(), " with strides ", shape_str(x.strides()),
           " is not contiguous; use reshape() (which copies) instead");
  return {x.as_strided_alias(sizes, contiguous_strides(sizes), x.storage_offset())};
}
TensorList view_backward(BackwardContext& c) { return {reshape(c.grad(), c.input_sizes(0))}; }
// The view samples multiply by a constant input so the gradient is not all ones.
const OpSchema& kView = define_op("view")
                            .save({})
                            .grad(view_backward)
                            .kernel_any_device(view_kernel)
                            .sample("infer", {arg({2, 6}), arg({4}).constant()},
                                    [](const TensorList& x) { return TensorList{x[0].view({3, -1}) * x[1]}; })
                            .sample("reshape-non-contiguous", {arg({3, 4})},
                                    [](const TensorList& x) { return TensorList{x[0].t().reshape({2, 6}) * 2.0}; });

// ---- permute / transpose ----
TensorList permute_kernel(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const IntList& dims = c.attrs.get<IntList>("dims");
  MT_CHECK(static_cast<int64_t>(dims.size()) == x.dim(), c.name(), ": expected ", x.dim(), " dims for ", x.describe(),
           ", got ", shape_str(dims));
  IntList sizes, strides;
  std::vector<bool> used(dims.size(), false);
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, x.dim(), c.name());
    MT_CHECK(!used[static_cast<size_t>(w)], c.name(), ": dim ", w, " repeated in ", shape_str(dims));
    used[static_cast<size_t>(w)] = true;
    sizes.push_back(x.sizes()[w]);
    strides.push_back(x.strides()[w]);
  }
  return {x.as_strided_alias(sizes, strides, x.storage_offset())};
}
TensorList permute_backward(BackwardContext& c) {
  const IntList& dims = c.attrs.get<IntList>("dims");
  IntList inv(dims.size(), 0);
  for (size_t i = 0; i < dims.size(); ++i)
    inv[static_cast<size_t>(wrap_dim(dims[i], static_cast<int64_t>(dims.size()), "permute"))] = static_cast<int64_t>(i);
  return {permute(c.grad(), inv)};
}
const OpSchema& kPermute =
    define_op("permute")
        .save({})
        .grad(permute_backward)
        .kernel_any_device(permute_kernel)
        .sample("3d", {arg({2, 3, 4}), arg({4, 2, 3}).constant()},
                [](const TensorList& x) { return TensorList{x[0].permute({2, 0, 1}) * x[1]}; });

// ---- expand ----
TensorList expand_kernel(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const IntList& req = c.attrs.get<IntList>("sizes");
  MT_CHECK(static_cast<int64_t>(req.size()) >= x.dim(), c.name(), ": the number of sizes provided (", req.size(),
           ") must be greater or equal to the number of dimensions in the tensor (", x.dim(), ")");
  size_t lead = req.size() - static_cast<size_t>(x.dim());
  IntList sizes(req.size(), 0), strides(req.size(), 0);
  for (size_t i = 0; i < req.size(); ++i) {
    if (i < lead) {
      MT_CHECK(req[i] >= 0, c.name(), ": size -1 is not allowed in a new leading dimension, got ", shape_str(req));
      sizes[i] = req[i];
      strides[i] = 0;
      continue;
    }
    int64_t have = x.sizes()[i - lead];
    int64_t want = req[i] == -1 ? have : req[i];
    MT_CHECK(have == want || have == 1, c.name(), ": the expanded size (", want, ") must match the existing size (",
             have, ") at non-singleton dimension ", i, "; target ", shape_str(req), ", tensor ", x.describe());
    sizes[i] = want;
    strides[i] = have == want ? x.strides()[i - lead] : 0;
  }
  return {x.as_strided_alias(sizes, strides, x.storage_offset())};
}
TensorList expand_backward(BackwardContext& c) { return {sum_to(c.grad(), c.input_sizes(0))}; }
const OpSchema& kExpand = define_op("expand")
                              .save({})
                              .grad(expand_backward)
                              .kernel_any_device(expand_kernel)
                              .sample("new-and-broadcast-dims", {arg({3, 1}), arg({2, 3, 4}).constant()},
                                      [](const TensorList& x) { return TensorList{x[0].expand({2, 3, 4}) * x[1]}; });

// ---- squeeze / unsqueeze of one dim (always views, whatever the strides) ----
TensorList squeeze_kernel(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  int64_t d = c.attrs.get<int64_t>("dim");
  IntList sizes = x.sizes(), strides = x.strides();
  sizes.erase(sizes.begin() + d);
  strides.erase(strides.begin() + d);
  return {x.as_strided_alias(sizes, strides, x.storage_offset())};
}
TensorList unsqueeze_kernel(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  int64_t d = c.attrs.get<int64_t>("dim");
  IntList sizes = x.sizes(), strides = x.strides();
  int64_t st = d < x.dim() ? x.sizes()[d] * x.strides()[d] : 1;
  sizes.insert(sizes.begin() + d, 1);
  strides.insert(strides.begin() + d, st);
  return {x.as_strided_alias(sizes, strides, x.storage_offset())};
}
const OpSchema& kSqueeze = define_op("squeeze").save({}).grad(view_backward).kernel_any_device(squeeze_kernel).sample(
    "then-unsqueeze", {arg({3, 1, 2})}, [](const TensorList& x) { return TensorList{x[0].squeeze(1).unsqueeze(0) * 3.0}; });
const OpSchema& kUnsqueeze = define_op("unsqueeze")
                                 .save({})
                                 .grad(view_backward)
                                 .kernel_any_device(unsqueeze_kernel)
                                 .sample("middle", {arg({3, 2}), arg({3, 1, 2}).constant()},
                                         [](const TensorList& x) { return TensorList{x[0].unsqueeze(1) * x[1]}; });

// ---- slice(dim, start, end, step) ----
struct SliceArgs {
  int64_t dim, start, end, step;
};
SliceArgs clamp_slice(const IntList& sizes, int64_t dim, int64_t start, int64_t end, int64_t step, const char* op) {
  int64_t nd = static_cast<int64_t>(sizes.size());
  MT_CHECK(nd > 0, op, ": cannot slice a 0-d tensor");
  dim = wrap_dim(dim, nd, op);
  MT_CHECK(step > 0, op, ": step must be positive, got ", step);
  int64_t n = sizes[static_cast<size_t>(dim)];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  return {dim, start, end, step};
}
TensorList slice_kernel(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  SliceArgs s = clamp_slice(x.sizes(), c.attrs.get<int64_t>("dim"), c.attrs.get<int64_t>("start"),
                            c.attrs.get<int64_t>("end"), c.attrs.get<int64_t>("step"), c.name());
  IntList sizes = x.sizes(), strides = x.strides();
  sizes[s.dim] = (s.end - s.start + s.step - 1) / s.step;
  strides[s.dim] = x.strides()[s.dim] * s.step;
  return {x.as_strided_alias(sizes, strides, x.storage_offset() + s.start * x.strides()[s.dim])};
}
TensorList slice_grad(BackwardContext& c) {
  return {slice_backward(c.grad(), c.input_sizes(0), c.attrs.get<int64_t>("dim"), c.attrs.get<int64_t>("start"),
                         c.attrs.get<int64_t>("end"), c.attrs.get<int64_t>("step"))};
}
const OpSchema& kSlice =
    define_op("slice")
        .save({})
        .grad(slice_grad)
        .kernel_any_device(slice_kernel)
        .sample("step", {arg({4, 7})},
                [](const TensorList& x) { return TensorList{x[0].slice(1, 1, 7, 2) * x[0].slice(1, -3, 100)}; })
        .sample("select-narrow", {arg({4, 5})}, [](const TensorList& x) {
          return TensorList{x[0].select(0, -1) * x[0].narrow(0, 1, 1).squeeze(0)};
        });

// slice_backward(g, sizes, ...): zeros(sizes) with the slice region set to g.
TensorList slice_backward_cpu(const OpCall& c) {
  const Tensor& g = c.inputs[0];
  Tensor out = Tensor::empty(c.attrs.get<IntList>("sizes"), TensorOptions(g.dtype()));
  if (out.nbytes()) std::memset(out.data_ptr(), 0, out.nbytes());
  Tensor region = slice_kernel(OpCall{{out}, c.attrs, c.op})[0];
  cpu::copy_into(region, g);
  return {out};
}
TensorList slice_backward_backward(BackwardContext& c) {
  return {slice(c.grad(), c.attrs.get<int64_t>("dim"), c.attrs.get<int64_t>("start"), c.attrs.get<int64_t>("end"),
                c.attrs.get<int64_t>("step"))};
}
const OpSchema& kSliceBackward =
    define_op("slice_backward")
        .save({})
        .grad(slice_backward_backward)
        .kernel(DeviceType::CPU, slice_backward_cpu)
        .sample("double", {arg({2, 2})}, {{"sizes", IntList{5, 2}}, {"dim", int64_t(0)}, {"start", int64_t(1)},
                                          {"end", int64_t(5)}, {"step", int64_t(2)}});

}  // namespace

Tensor view(const Tensor& x, const IntList& sizes) { return dispatch1(kView, {x}, {{"sizes", sizes}}); }

Tensor reshape(const Tensor& x, const IntList& sizes) {
  if (x.is_contiguous()) return view(x, sizes);
  return view(clone(x), sizes);
}

Tensor permute(const Tensor& x, const IntList& dims) { return dispatch1(kPermute, {x}, {{"dims", dims}}); }

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  int64_t nd = std::max<int64_t>(x.dim(), 1);
  d0 = wrap_dim(d0, x.dim(), "transpose");
  d1 = wrap_dim(d1, x.dim(), "transpose");
  if (x.dim() == 0) return permute(x, {});
  IntList dims(static_cast<size_t>(nd), 0);
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[d0], dims[d1]);
  return permute(x, dims);
}

Tensor expand(const Tensor& x, const IntList& sizes) { return dispatch1(kExpand, {x}, {{"sizes", sizes}}); }

Tensor squeeze(const Tensor& x, int64_t dim) {
  if (x.dim() == 0) return x;
  dim = wrap_dim(dim, x.dim(), "squeeze");
  if (x.sizes()[dim] != 1) return x;  // PyTorch: squeezing a non-1 dim is a no-op
  return dispatch1(kSqueeze, {x}, {{"dim", dim}});
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  return dispatch1(kUnsqueeze, {x}, {{"dim", wrap_dim(dim, x.dim() + 1, "unsqueeze")}});
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  return dispatch1(kSlice, {x}, {{"dim", dim}, {"start", start}, {"end", end}, {"step", step}});
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  MT_CHECK(x.dim() > 0, "narrow: cannot narrow a 0-d tensor");
  int64_t d = wrap_dim(dim, x.dim(), "narrow");
  int64_t n = x.sizes()[d];
  if (start < 0) start += n;
  MT_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow: start (", start, ") + length (", length,
           ") exceeds dimension size (", n, ") of dim ", d, " in ", x.describe());
  return slice(x, d, start, start + length, 1);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  MT_CHECK(x.dim() > 0, "select: cannot select on a 0-d tensor");
  int64_t d = wrap_dim(dim, x.dim(), "select");
  int64_t n = x.sizes()[d];
  MT_CHECK(index >= -n && index < n, "select: index ", index, " is out of bounds for dimension ", d, " with size ", n);
  if (index < 0) index += n;
  return squeeze(slice(x, d, index, index + 1, 1), d);
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  if (x.dim() == 0) return reshape(x, {1});
  int64_t s = wrap_dim(start_dim, x.dim(), "flatten"), e = wrap_dim(end_dim, x.dim(), "flatten");
  MT_CHECK(s <= e, "flatten: start_dim (", s, ") cannot come after end_dim (", e, ")");
  IntList sizes;
  for (int64_t d = 0; d < s; ++d) sizes.push_back(x.sizes()[d]);
  int64_t m = 1;
  for (int64_t d = s; d <= e; ++d) m *= x.sizes()[d];
  sizes.push_back(m);
  for (int64_t d = e + 1; d < x.dim(); ++d) sizes.push_back(x.sizes()[d]);
  return reshape(x, sizes);
}

Tensor slice_backward(const Tensor& g, const IntList& sizes, int64_t dim, int64_t start, int64_t end, int64_t step) {
  return dispatch1(kSliceBackward, {g}, {{"sizes", sizes}, {"dim", dim}, {"start", start}, {"end", end}, {"step", step}});
}

}  // namespace mixtape
