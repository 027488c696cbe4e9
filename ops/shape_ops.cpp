// ops/shape_ops.cpp — cat (and stack on top of it), argmax, index_select and its adjoint.
//   cat(t_0..t_k: any dtypes, dim) -> promoted dtype; d/dt_i = the slice of g that t_i filled
//   argmax(x, dim?, keepdim) -> Int64; not differentiable
//   index_select(x, dim, index (k) i64) -> x's shape with size k at dim; its gradient is
//   index_select_backward (index_add into zeros), whose gradient is index_select again.
// CPU layout: a contiguous tensor is read as (outer, n, inner) with `dim` in the middle, so one
// selected slice is `inner` contiguous elements.
#include "ops/shape_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/argmax_args.h"
#include "ops/cpu/elementwise.h"
#include "ops/dim_layout.h"
#include "ops/index_select_args.h"
#include "ops/op_def.h"

namespace mixtape {

ArgmaxArgs argmax_args(const OpCall& c, const Tensor& x) {
  const bool keepdim = c.attrs.get<bool>("keepdim");
  MT_CHECK(x.dtype() != DType::Bool, c.name(), ": bool tensors are not supported, got ", x.describe());
  ArgmaxArgs a;
  if (!c.attrs.has("dim")) {
    MT_CHECK(x.numel() > 0, c.name(), ": cannot take the argmax of an empty tensor ", x.describe(),
             " over all elements (pass a dim)");
    if (keepdim) a.out_sizes = IntList(static_cast<size_t>(x.dim()), 1);
    return a;
  }
  const int64_t d = wrap_dim(c.attrs.get<int64_t>("dim"), x.dim(), c.name());
  a.dim = d;
  if (x.dim() > 0) {
    a.out_sizes = x.sizes();
    if (keepdim)
      a.out_sizes[d] = 1;
    else
      a.out_sizes.erase(a.out_sizes.begin() + d);
    MT_CHECK(x.sizes()[d] > 0 || numel_of(a.out_sizes) == 0, c.name(), ": cannot reduce dimension ", d,
             " of size 0 in ", x.describe(), " (the argmax of nothing is undefined)");
  }
  return a;
}

int64_t index_select_dim(const char* op, const Tensor& x, int64_t dim) {
  MT_CHECK(x.dim() > 0, op, ": expected a tensor with at least 1 dim, got ", x.describe());
  return wrap_dim(dim, x.dim(), op);
}

int64_t index_select_backward_dim(const char* op, const IntList& sizes, int64_t dim) {
  MT_CHECK(!sizes.empty(), op, ": expected sizes with at least 1 dim, got []");
  return wrap_dim(dim, static_cast<int64_t>(sizes.size()), op);
}

void check_index_select_index(const Tensor& index, const char* op) {
  MT_CHECK(index.defined(), op, ": index is undefined");
  MT_CHECK(index.dtype() == DType::Int64, op, ": index must be Int64, got ", index.describe());
  MT_CHECK(index.dim() <= 1, op, ": index must be 1-D, got ", index.describe());
}

void check_index_select_bounds(const int64_t* v, int64_t count, int64_t dim, int64_t n, const char* op) {
  for (int64_t j = 0; j < count; ++j)
    MT_CHECK(v[j] >= 0 && v[j] < n, op, ": ", index_select_bound_message(v[j], j, dim, n));
}

std::string index_select_bound_message(int64_t value, int64_t position, int64_t dim, int64_t n) {
  return detail::str_cat("index ", value, " at position ", position, " is out of bounds for dimension ", dim,
                         " with size ", n);
}
std::string gather_bound_message(int64_t value, int64_t position, int64_t dim, int64_t n) {
  return detail::str_cat("index ", value, " is out of bounds for dimension ", dim, " with size ", n,
                         " (at index position ", position, ")");
}

void check_index_select_backward_grad(const Tensor& g, const IntList& sizes, int64_t d, int64_t k, const char* op) {
  IntList want = sizes;
  want[static_cast<size_t>(d)] = k;
  MT_CHECK(g.sizes() == want, op, ": expected a gradient of shape ", shape_str(want), " (", shape_str(sizes), " with ",
           k, " indices along dim ", d, "), got ", g.describe());
  MT_CHECK(is_floating(g.dtype()), op, ": expected a floating gradient, got ", g.describe());
}

namespace {

// t as a contiguous tensor of dtype dt (t itself when it already is one); not recorded.
Tensor dense(const Tensor& t, DType dt) {
  if (t.dtype() == dt && t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.sizes(), TensorOptions(dt));
  cpu::copy_into(out, t);
  return out;
}

// ---- samples ----
// An index of a sample: exact Int64 values on the device of the sample's input (an Index sample
// argument draws uniform values; these cases need repeated indices at given places).
Tensor sample_index(const Tensor& like, const IntList& sizes, const std::vector<double>& v) {
  return tensor(v, sizes, TensorOptions(DType::Int64)).to(like.device());
}
// Parity of the copying ops (cat, stack, index_select and their gradients): values are moved, not
// computed, and the samples' scatter-adds add at most two values into each zero (a + b = b + a, so
// the device's atomic order cannot show); the constant factors are one multiply on both:
// bit-identical, 0 roundings.
constexpr SampleChecks kMovesValues{.parity_roundings = 0};

// ---- cat ----
// PyTorch's legacy rule: a 1-D empty tensor joins any cat (its shape is not checked).
bool legacy_empty(const IntList& s) { return s.size() == 1 && s[0] == 0; }

struct CatPlan {
  int64_t dim = 0;
  IntList sizes{0};  // the output's
  DType dtype = DType::Float32;
};

CatPlan plan_cat(const TensorList& ts, int64_t dim, const char* op) {
  MT_CHECK(!ts.empty(), op, ": expected a non-empty list of tensors");
  CatPlan p;
  int64_t ref = -1;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    MT_CHECK(t.defined(), op, ": tensor ", i, " is undefined");
    MT_CHECK(t.dim() > 0, op, ": zero-dimensional tensor (at position ", i, ") cannot be concatenated");
    p.dtype = i == 0 ? t.dtype() : promote_types(p.dtype, t.dtype());
    if (ref < 0 && !legacy_empty(t.sizes())) ref = static_cast<int64_t>(i);
  }
  if (ref < 0) {  // every tensor is [0]
    p.dim = wrap_dim(dim, 1, op);
    return p;
  }
  const Tensor& r = ts[static_cast<size_t>(ref)];
  p.dim = wrap_dim(dim, r.dim(), op);
  p.sizes = r.sizes();
  p.sizes[p.dim] = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    if (legacy_empty(t.sizes())) continue;
    MT_CHECK(t.dim() == r.dim(), op, ": tensors must have the same number of dimensions: tensor ", ref, " is ",
             r.describe(), " (", r.dim(), "-D) but tensor ", i, " is ", t.describe(), " (", t.dim(), "-D)");
    for (int64_t d = 0; d < r.dim(); ++d)
      MT_CHECK(d == p.dim || t.sizes()[d] == r.sizes()[d], op, ": sizes of tensors must match except in dimension ",
               p.dim, ": expected size ", r.sizes()[d], " but got size ", t.sizes()[d], " in dimension ", d,
               " for tensor ", i, " (", t.describe(), "; tensor ", ref, " is ", r.describe(), ")");
    p.sizes[p.dim] += t.sizes()[p.dim];
  }
  return p;
}

TensorList cat_cpu(const OpCall& c) {
  const CatPlan p = plan_cat(c.inputs, c.attrs.get<int64_t>("dim"), c.name());
  Tensor out = Tensor::empty(p.sizes, TensorOptions(p.dtype));
  int64_t off = 0;
  for (const Tensor& t : c.inputs) {
    if (legacy_empty(t.sizes())) continue;
    const int64_t n = t.sizes()[p.dim];
    if (t.numel() > 0) {
      Tensor region = out.as_strided_alias(t.sizes(), out.strides(), off * out.strides()[p.dim]);
      cpu::copy_into(region, t);  // converts to the promoted dtype, any strides
    }
    off += n;
  }
  return {out};
}

TensorList cat_backward(BackwardContext& c) {
  const int64_t dim = c.attrs.get<int64_t>("dim");
  TensorList grads;
  int64_t off = 0;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    const IntList& s = c.input_sizes(i);
    if (legacy_empty(s)) {
      grads.push_back(c.needs_input_grad(i) ? zeros({0}, TensorOptions(c.input_dtype(i))) : Tensor());
      continue;
    }
    const int64_t n = s[static_cast<size_t>(dim)];
    grads.push_back(c.needs_input_grad(i) ? slice(c.grad(), dim, off, off + n) : Tensor());
    off += n;
  }
  return grads;
}
// AMP policy none: cat is on no CUDA autocast list, so it promotes its inputs itself
// (docs/autocast-policy.md).
// Samples: the products with a constant make every output element's weight in the gradcheck
// distinct; stack is unsqueeze + cat, so its case is one of cat's.
const OpSchema& kCat =
    define_op("cat")
        .save({})
        .grad(cat_backward)
        .kernel(DeviceType::CPU, cat_cpu)
        .sample("middle-dim", {arg({2, 1, 3}), arg({2, 4, 3}), arg({2, 2, 3}), arg({2, 7, 3}).constant()},
                [](const TensorList& x) { return TensorList{cat({x[0], x[1], x[2]}, 1) * x[3]}; }, kMovesValues)
        .sample("legacy-empty", {arg({0}), arg({2, 3})},
                [](const TensorList& x) { return TensorList{cat({x[0], x[1]}, -1) * 2.0}; }, kMovesValues)
        .sample("stack-dim1", {arg({2, 3}), arg({2, 3}), arg({2, 2, 3}).constant()},
                [](const TensorList& x) { return TensorList{stack({x[0], x[1]}, 1) * x[2]}; }, kMovesValues);

// ---- argmax ----
TensorList argmax_cpu(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const ArgmaxArgs a = argmax_args(c, x);
  DimLayout l;
  if (!a.dim)
    l.len = x.numel();
  else if (x.dim() > 0)
    l = layout_of(x.sizes(), *a.dim);
  Tensor xd = dense(x, x.dtype());
  Tensor out = Tensor::empty(a.out_sizes, TensorOptions(DType::Int64));
  int64_t* o = out.data_ptr<int64_t>();
  const int64_t rows = l.outer * l.inner;
  visit_dtype(x.dtype(), c.name(), [&]<typename T>() {
    using A = acc_t<T>;
    const T* p = static_cast<const T*>(xd.data_ptr());
#pragma omp parallel for if (rows * l.len >= cpu::kParallelGrain && rows > 1) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T* base = p + (r / l.inner) * l.len * l.inner + r % l.inner;
      int64_t best = 0;
      A bv = static_cast<A>(base[0]);
      for (int64_t j = 1; j < l.len; ++j) {
        if constexpr (std::is_floating_point_v<A>)
          if (std::isnan(bv)) break;  // the first NaN wins
        const A v = static_cast<A>(base[j * l.inner]);
        bool take = v > bv;
        if constexpr (std::is_floating_point_v<A>) take = take || std::isnan(v);
        if (take) {
          bv = v;
          best = j;
        }
      }
      o[r] = best;
    }
  });
  return {out};
}
// Samples (no gradient): distinct integers, so no rounding to a 16-bit dtype makes a tie, along
// each dim and over all elements; then ties and NaNs on purpose: the first largest index wins,
// the first NaN before any number, on both devices. The outputs are Int64: compared exactly.
const OpSchema& kArgmax =
    define_op("argmax")
        .not_differentiable()
        .kernel(DeviceType::CPU, argmax_cpu)
        .sample("distinct", {values_arg({3, 5}, {-7, 0, 7, -1, 6, -2, 5, -3, 4, -4, 3, -5, 2, -6, 1})},
                [](const TensorList& x) {
                  return TensorList{argmax(x[0], 1), argmax(x[0], 0, true), argmax(x[0]), argmax(x[0], -1, true)};
                },
                no_gradcheck())
        .sample("ties-nan-first-wins",
                {values_arg({3, 4}, {1, 3, 3, 0, std::nan(""), 2, std::nan(""), 5, 2, 2, 2, 2})},
                [](const TensorList& x) { return TensorList{argmax(x[0], 1), argmax(x[0], 0), argmax(x[0])}; },
                no_gradcheck());

// ---- index_select / index_select_backward ----
// Checks index (1-D or 0-d Int64, values in [0, n)) and returns it contiguous.
Tensor checked_index(const Tensor& index, int64_t dim, int64_t n, const char* op) {
  check_index_select_index(index, op);
  Tensor idx = dense(index, DType::Int64);
  check_index_select_bounds(idx.data_ptr<int64_t>(), idx.numel(), dim, n, op);
  return idx;
}

TensorList index_select_cpu(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const int64_t d = index_select_dim(c.name(), x, c.attrs.get<int64_t>("dim"));
  const int64_t n = x.sizes()[d];
  Tensor idx = checked_index(c.inputs[1], d, n, c.name());
  const int64_t k = idx.numel();
  IntList out_sizes = x.sizes();
  out_sizes[d] = k;
  Tensor xd = dense(x, x.dtype());
  Tensor out = Tensor::empty(out_sizes, TensorOptions(x.dtype()));
  const DimLayout l = layout_of(x.sizes(), d);
  const int64_t* ip = idx.data_ptr<int64_t>();
  const size_t row = static_cast<size_t>(l.inner) * x.element_size();
  const char* src = static_cast<const char*>(xd.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  if (row == 0) return {out};
#pragma omp parallel for if (out.numel() >= cpu::kParallelGrain && l.outer * k > 1) schedule(static)
  for (int64_t r = 0; r < l.outer * k; ++r) {
    const int64_t o = r / k, j = r % k;
    std::memcpy(dst + static_cast<size_t>(r) * row, src + static_cast<size_t>(o * n + ip[j]) * row, row);
  }
  return {out};
}

TensorList index_select_backward_cpu(const OpCall& c) {
  const Tensor& g = c.inputs[0];
  const IntList& sizes = c.attrs.get<IntList>("sizes");
  const int64_t d = index_select_backward_dim(c.name(), sizes, c.attrs.get<int64_t>("dim"));
  const int64_t n = sizes[static_cast<size_t>(d)];
  Tensor idx = checked_index(c.inputs[1], d, n, c.name());
  const int64_t k = idx.numel();
  check_index_select_backward_grad(g, sizes, d, k, c.name());
  // Accumulate in the compute type (f32 for 16-bit), round once.
  const DType acc_dt = is_reduced_float(g.dtype()) ? DType::Float32 : g.dtype();
  Tensor acc = Tensor::empty(sizes, TensorOptions(acc_dt));
  if (acc.nbytes()) std::memset(acc.data_ptr(), 0, acc.nbytes());
  Tensor gd = dense(g, acc_dt);
  const DimLayout l = layout_of(sizes, d);
  const int64_t* ip = idx.data_ptr<int64_t>();
  visit_floating(acc_dt, c.name(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      T* a = static_cast<T*>(acc.data_ptr());
      const T* gp = static_cast<const T*>(gd.data_ptr());
      // Parallel over outer only: repeated indices within one outer slice write the same row.
#pragma omp parallel for if (g.numel() >= cpu::kParallelGrain && l.outer > 1) schedule(static)
      for (int64_t o = 0; o < l.outer; ++o)
        for (int64_t j = 0; j < k; ++j) {
          T* dst = a + (o * n + ip[j]) * l.inner;
          const T* src = gp + (o * k + j) * l.inner;
          for (int64_t i = 0; i < l.inner; ++i) dst[i] += src[i];
        }
    }
  });
  return {cpu::cast_to(acc, g.dtype())};
}

TensorList index_select_backward_grad(BackwardContext& c) {
  return {index_select(c.grad(), c.attrs.get<int64_t>("dim"), c.input(1)), Tensor()};
}
// Sample: with respect to g (index_select's double backward); repeated indices accumulate.
const OpSchema& kIndexSelectBackward =
    define_op("index_select_backward")
        .save({1})
        .grad(index_select_backward_grad)
        .kernel(DeviceType::CPU, index_select_backward_cpu)
        .sample("double", {arg({2, 5})},
                [](const TensorList& x) {
                  return TensorList{index_select_backward(x[0], {2, 3}, 1, sample_index(x[0], {5}, {0, 2, 2, 1, 0}))};
                },
                kMovesValues);

TensorList index_select_grad(BackwardContext& c) {
  return {index_select_backward(c.grad(), c.input_sizes(0), c.attrs.get<int64_t>("dim"), c.input(1)), Tensor()};
}
// Samples: repeated indices (their gradients accumulate), along the first and the last dim.
const OpSchema& kIndexSelect =
    define_op("index_select")
        .save({1})
        .grad(index_select_grad)
        .kernel(DeviceType::CPU, index_select_cpu)
        .sample("repeated-dim0", {arg({4, 3})},
                [](const TensorList& x) {
                  return TensorList{index_select(x[0], 0, sample_index(x[0], {5}, {0, 2, 2, 3, 0}))};
                },
                kMovesValues)
        .sample("repeated-dim-1", {arg({2, 3, 4})},
                [](const TensorList& x) { return TensorList{index_select(x[0], -1, sample_index(x[0], {3}, {3, 1, 3}))}; },
                kMovesValues);

}  // namespace

// The tape records which inputs an op saves as one bit per input (OpSchema::saved_inputs, a
// uint64_t), and autograd/op_node.cpp shifts it by the input's position: undefined from the 65th
// input on (UBSan stops there). Longer lists are joined in groups of at most 64, then the groups.
constexpr size_t kMaxCatInputs = 64;

Tensor cat(const TensorList& tensors, int64_t dim) {
  const CatPlan p = plan_cat(tensors, dim, "cat");  // checks up front; the attr holds the wrapped dim
  if (tensors.size() <= kMaxCatInputs) return dispatch1(kCat, tensors, {{"dim", p.dim}});
  TensorList groups;
  for (size_t i = 0; i < tensors.size(); i += kMaxCatInputs) {
    TensorList g(tensors.begin() + static_cast<std::ptrdiff_t>(i),
                 tensors.begin() + static_cast<std::ptrdiff_t>(std::min(i + kMaxCatInputs, tensors.size())));
    const bool all_empty = std::all_of(g.begin(), g.end(), [](const Tensor& t) { return legacy_empty(t.sizes()); });
    groups.push_back(cat(g, all_empty ? 0 : p.dim));
  }
  return cat(groups, p.dim);
}

Tensor stack(const TensorList& tensors, int64_t dim) {
  MT_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    MT_CHECK(tensors[i].defined(), "stack: tensor ", i, " is undefined");
    MT_CHECK(tensors[i].sizes() == tensors[0].sizes(), "stack: expects each tensor to be equal size, but got ",
             tensors[0].describe(), " at entry 0 and ", tensors[i].describe(), " at entry ", i);
  }
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  TensorList parts;
  parts.reserve(tensors.size());
  for (const Tensor& t : tensors) parts.push_back(unsqueeze(t, d));
  return cat(parts, d);
}

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  MT_CHECK(x.defined(), "argmax: input is undefined");
  Attrs a{{"keepdim", keepdim}};
  if (dim) a.set("dim", wrap_dim(*dim, x.dim(), "argmax"));
  return dispatch1(kArgmax, {x}, std::move(a));
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  MT_CHECK(x.defined(), "index_select: input is undefined");
  return dispatch1(kIndexSelect, {x, index}, {{"dim", wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "index_select")}});
}

Tensor index_select_backward(const Tensor& g, const IntList& sizes, int64_t dim, const Tensor& index) {
  return dispatch1(kIndexSelectBackward, {g, index},
                   {{"sizes", sizes}, {"dim", wrap_dim(dim, static_cast<int64_t>(sizes.size()), "index_select_backward")}});
}

}  // namespace mixtape
