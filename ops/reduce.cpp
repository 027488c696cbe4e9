// ops/reduce.cpp — sum, mean, max, amax.
//   sum(x: T[*], dims, keepdim, dtype?) -> dtype or T (Int64 for integers); AMP fp32-unless-dtype
//   mean(x, dims, keepdim) = sum / count, floating only
//   max(x, dim, keepdim) -> (values T, indices i64)
//   amax(x, dims, keepdim) -> T
// CPU strategy: every output element reduces its elements in row-major order of the reduced
// dims, so results do not depend on threads or layout; output elements are split over threads.
// sum/mean walk the input in place (no copy: the conv bias gradient sums (N, H, W) of an NCHW
// gradient, a permutation that is not contiguous); max/amax first make the runs contiguous.
#include "ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/cpu/elementwise.h"
#include "ops/cpu/lane_sum.h"
#include "ops/op_def.h"
#include "ops/reduce_dims.h"

namespace mixtape {

// Normalised, sorted, unique reduced dims; empty `dims` means all.
IntList reduced_dims(const Tensor& x, const IntList& dims, const char* op) {
  IntList out;
  if (dims.empty()) {
    for (int64_t d = 0; d < x.dim(); ++d) out.push_back(d);
    return out;
  }
  std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(x.dim(), 1)), false);
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, x.dim(), op);
    MT_CHECK(!seen[static_cast<size_t>(w)], op, ": dim ", w, " appears twice in ", shape_str(dims));
    seen[static_cast<size_t>(w)] = true;
  }
  for (int64_t d = 0; d < x.dim(); ++d)
    if (seen[static_cast<size_t>(d)]) out.push_back(d);
  return out;
}

IntList reduced_shape(const Tensor& x, const IntList& rdims, bool keepdim) {
  IntList out;
  size_t r = 0;
  for (int64_t d = 0; d < x.dim(); ++d) {
    bool red = r < rdims.size() && rdims[r] == d;
    if (red) ++r;
    if (!red)
      out.push_back(x.sizes()[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

std::pair<Tensor, int64_t> reduced_last_view(const Tensor& x, const IntList& rdims) {
  IntList perm;
  int64_t len = 1;
  size_t r = 0;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (r < rdims.size() && rdims[r] == d) {
      ++r;
      len *= x.sizes()[d];
    } else {
      perm.push_back(d);
    }
  }
  for (int64_t d : rdims) perm.push_back(d);
  IntList sizes, strides;
  for (int64_t d : perm) {
    sizes.push_back(x.sizes()[d]);
    strides.push_back(x.strides()[d]);
  }
  return {x.as_strided_alias(sizes, strides, x.storage_offset()), len};
}

SumArgs sum_args(const OpCall& call, const Tensor& x) {
  SumArgs a;
  // The op says which: sum and mean share the kernels, and an attribute could be left out.
  a.is_mean = call.op != nullptr && call.op->name == "mean";
  a.rdims = reduced_dims(x, call.attrs.get<IntList>("dims"), call.name());
  a.keepdim = call.attrs.get<bool>("keepdim");
  a.out_dtype = call.attrs.get_dtype("dtype").value_or(is_integral(x.dtype(), true) ? DType::Int64 : x.dtype());
  MT_CHECK(!a.is_mean || is_floating(a.out_dtype), call.name(), ": mean needs a floating dtype, got ",
           dtype_name(a.out_dtype), " (pass dtype=Float32 or convert the input)");
  // Compute in the requested dtype when it is wider (sum(f16, dtype=f32) accumulates f16 values as f32).
  a.src_dtype = is_floating(a.out_dtype) && is_floating(x.dtype()) ? a.out_dtype : x.dtype();
  return a;
}

namespace {

// Accumulator of reductions: wider than storage so long sums stay accurate.
template <typename T> struct reduce_acc { using type = double; };
template <> struct reduce_acc<Half> { using type = float; };
template <> struct reduce_acc<BFloat16> { using type = float; };
template <> struct reduce_acc<int64_t> { using type = int64_t; };
template <> struct reduce_acc<int32_t> { using type = int64_t; };
template <> struct reduce_acc<uint8_t> { using type = int64_t; };
template <> struct reduce_acc<bool> { using type = int64_t; };

// x permuted so kept dims come first and reduced dims last, contiguous. Returns (runs, run length).
std::pair<Tensor, int64_t> as_runs(const Tensor& x, const IntList& rdims) {
  auto [p, len] = reduced_last_view(x, rdims);
  if (!p.is_contiguous()) p = cpu::cast_to(clone(p.detach()), x.dtype());
  return {p, len};
}

// The reduced elements of x, seen from each output element: the kept dims give a run's start,
// the reduced dims (coalesced where contiguous) are walked in row-major order, innermost as rows.
struct StridedRuns {
  IntList kept_sizes, kept_strides;    // elements
  IntList outer_sizes, outer_strides;  // reduced dims except the innermost
  int64_t inner = 1, inner_stride = 1;
  int64_t len = 1;                     // elements per run

  StridedRuns(const Tensor& x, const IntList& rdims) {
    size_t r = 0;
    IntList red_sizes, red_strides;
    for (int64_t d = 0; d < x.dim(); ++d) {
      const bool red = r < rdims.size() && rdims[r] == d;
      if (red) ++r;
      if (x.sizes()[d] == 1) continue;  // contributes nothing to offsets
      (red ? red_sizes : kept_sizes).push_back(x.sizes()[d]);
      (red ? red_strides : kept_strides).push_back(x.strides()[d]);
    }
    for (size_t k = 0; k < red_sizes.size(); ++k) {
      len *= red_sizes[k];
      if (k > 0) {
        // merge dim k into the previous one when they are contiguous with each other
        if (inner_stride == red_strides[k] * red_sizes[k]) {
          inner *= red_sizes[k];
          inner_stride = red_strides[k];
          continue;
        }
        outer_sizes.push_back(inner);
        outer_strides.push_back(inner_stride);
      }
      inner = red_sizes[k];
      inner_stride = red_strides[k];
    }
  }
  // Offset (elements) of run i's first element; i indexes the kept dims row-major.
  int64_t start(int64_t i) const {
    int64_t off = 0;
    for (size_t d = kept_sizes.size(); d-- > 0;) {
      off += (i % kept_sizes[d]) * kept_strides[d];
      i /= kept_sizes[d];
    }
    return off;
  }
  // row(offset, count) for each innermost row of run i, in row-major order.
  template <typename Row>
  void visit(int64_t i, Row&& row) const {
    const int64_t base = start(i);
    int64_t outer = 1;
    for (int64_t s : outer_sizes) outer *= s;
    for (int64_t o = 0; o < outer; ++o) {
      int64_t off = base, rem = o;
      for (size_t d = outer_sizes.size(); d-- > 0;) {
        off += (rem % outer_sizes[d]) * outer_strides[d];
        rem /= outer_sizes[d];
      }
      row(off, inner);
    }
  }
};

// Runs fn(run_index) for every output element, in parallel when the work is large.
template <typename F>
void for_each_run(int64_t runs, int64_t len, F&& fn) {
#pragma omp parallel for if (runs * len >= cpu::kParallelGrain && runs > 1) schedule(static)
  for (int64_t i = 0; i < runs; ++i) fn(i);
}

// attrs: dims (IntList, empty = all), keepdim (bool), dtype (optional); the op (sum or mean) decides the rest
TensorList sum_cpu(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const SumArgs a = sum_args(call, x);
  const bool is_mean = a.is_mean;
  Tensor src = cpu::cast_to(x, a.src_dtype);
  const StridedRuns runs(src, a.rdims);
  const int64_t len = runs.len;
  Tensor out = Tensor::empty(reduced_shape(x, a.rdims, a.keepdim), TensorOptions(a.out_dtype));
  visit_dtype(src.dtype(), call.name(), [&]<typename T>() {
    using Acc = typename reduce_acc<T>::type;
    const T* in = static_cast<const T*>(src.data_ptr());
    Tensor acc_out = Tensor::empty(out.sizes(), TensorOptions(dtype_v<Acc>));
    Acc* o = static_cast<Acc*>(acc_out.data_ptr());
    for_each_run(out.numel(), len, [&](int64_t i) {
      cpu::LaneSum<Acc> lanes;
      runs.visit(i, [&](int64_t off, int64_t n) {
        const T* p = in + off;
        const int64_t st = runs.inner_stride;
        if constexpr (cpu::is_16bit_v<T>) {  // widen blocks with F16C; same values, same lanes
          cpu::for_each_widened(p, st, n, [&](const float* v, int64_t m) {
            lanes.add(m, [&](int64_t j) { return static_cast<Acc>(v[j]); });
          });
        } else {
          lanes.add(n, [&](int64_t j) { return static_cast<Acc>(static_cast<acc_t<T>>(p[j * st])); });
        }
      });
      Acc s = lanes.total();
      if (is_mean) s = len ? s / static_cast<Acc>(len) : std::numeric_limits<Acc>::quiet_NaN();
      o[i] = s;
    });
    cpu::copy_into(out, acc_out);  // the single rounding to the output dtype
  });
  return {out};
}

// Gradient of a reduction output broadcast back over the reduced dims.
Tensor expand_reduced_grad(const Tensor& g, const BackwardContext& c) {
  const IntList& in_sizes = c.input_sizes(0);
  IntList rdims;
  {
    IntList dims = c.attrs.get<IntList>("dims");
    if (dims.empty())
      for (int64_t d = 0; d < static_cast<int64_t>(in_sizes.size()); ++d) rdims.push_back(d);
    else
      for (int64_t d : dims) rdims.push_back(wrap_dim(d, static_cast<int64_t>(in_sizes.size()), "sum"));
  }
  Tensor gk = g;
  if (!c.attrs.get<bool>("keepdim")) {
    std::sort(rdims.begin(), rdims.end());
    for (int64_t d : rdims) gk = gk.unsqueeze(d);
  }
  return gk.expand(in_sizes);
}

TensorList sum_backward(BackwardContext& c) { return {expand_reduced_grad(c.grad(), c)}; }
const OpSchema& kSum =
    define_op("sum")
        .args({"input"})
        .policy(AmpPolicy::FP32UnlessDtype)
        .save({})
        .grad(sum_backward)
        .kernel(DeviceType::CPU, sum_cpu)
        .sample("all", {arg({2, 3})}, [](const TensorList& x) { return TensorList{sum(x[0])}; })
        .sample("dims-keepdim", {arg({2, 3, 4})}, [](const TensorList& x) { return TensorList{sum(x[0], {0, 2}, true)}; })
        .sample("last-dim", {arg({2, 3, 4})}, [](const TensorList& x) { return TensorList{sum(x[0], {-1})}; });

TensorList mean_backward(BackwardContext& c) {
  int64_t n = numel_of(c.input_sizes(0)) / std::max<int64_t>(1, numel_of(c.grad().sizes()));
  return {expand_reduced_grad(c.grad() / static_cast<double>(n), c)};
}
const OpSchema& kMean = define_op("mean")
                            .save({})
                            .grad(mean_backward)
                            .kernel(DeviceType::CPU, sum_cpu)
                            .sample("dim", {arg({2, 3, 4})}, [](const TensorList& x) { return TensorList{mean(x[0], {1})}; })
                            .sample("all", {arg({2, 3})}, [](const TensorList& x) { return TensorList{mean(x[0])}; });

// ---- max over one dim: (values, indices) ----
TensorList max_cpu(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  MT_CHECK(x.numel() > 0, call.name(), ": cannot reduce an empty tensor ", x.describe());
  int64_t dim = wrap_dim(call.attrs.get<int64_t>("dim"), x.dim(), call.name());
  bool keepdim = call.attrs.get<bool>("keepdim");
  IntList rdims = x.dim() == 0 ? IntList{} : IntList{dim};
  auto [runs_t, len] = as_runs(x, rdims);
  IntList oshape = reduced_shape(x, rdims, keepdim);
  Tensor values = Tensor::empty(oshape, TensorOptions(x.dtype()));
  Tensor indices = Tensor::empty(oshape, TensorOptions(DType::Int64));
  int64_t* idx = indices.data_ptr<int64_t>();
  visit_dtype(x.dtype(), call.name(), [&]<typename T>() {
    const T* in = static_cast<const T*>(runs_t.data_ptr());
    T* out = static_cast<T*>(values.data_ptr());
    for_each_run(values.numel(), len, [&](int64_t i) {
      const T* p = in + i * len;
      int64_t best = 0;
      auto bv = static_cast<acc_t<T>>(p[0]);
      for (int64_t j = 1; j < len; ++j) {
        auto v = static_cast<acc_t<T>>(p[j]);
        if constexpr (std::is_floating_point_v<acc_t<T>>)
          if (std::isnan(bv)) break;  // NaN wins and stays
        bool is_nan = false;
        if constexpr (std::is_floating_point_v<acc_t<T>>) is_nan = std::isnan(v);
        if (v > bv || is_nan) {
          bv = v;
          best = j;
        }
      }
      out[i] = p[best];
      idx[i] = best;
    });
  });
  return {values, indices};
}

TensorList max_backward(BackwardContext& c) {
  int64_t dim = c.attrs.get<int64_t>("dim");
  Tensor g = c.grad(0), idx = c.output(1);
  int64_t nd = static_cast<int64_t>(c.input_sizes(0).size());
  if (nd == 0) return {g};
  dim = wrap_dim(dim, nd, "max");
  if (!c.attrs.get<bool>("keepdim")) {
    g = g.unsqueeze(dim);
    idx = idx.unsqueeze(dim);
  }
  return {scatter_add_into_zeros(g, dim, idx, c.input_sizes(0))};
}
const OpSchema& kMax = define_op("max")
                           .save({}, {1})
                           .grad(max_backward)
                           .kernel(DeviceType::CPU, max_cpu)
                           .sample("dim", {arg({3, 5})},
                                   [](const TensorList& x) {
                                     auto [values, indices] = max(x[0], 1);
                                     return TensorList{values, indices};
                                   })
                           .sample("keepdim", {arg({3, 4, 2})},
                                   [](const TensorList& x) { return TensorList{max(x[0], 1, true).first}; });

// ---- amax over dims ----
TensorList amax_cpu(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  MT_CHECK(x.numel() > 0, call.name(), ": cannot reduce an empty tensor ", x.describe());
  IntList rdims = reduced_dims(x, call.attrs.get<IntList>("dims"), call.name());
  auto [runs_t, len] = as_runs(x, rdims);
  Tensor out = Tensor::empty(reduced_shape(x, rdims, call.attrs.get<bool>("keepdim")), TensorOptions(x.dtype()));
  visit_dtype(x.dtype(), call.name(), [&]<typename T>() {
    const T* in = static_cast<const T*>(runs_t.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    for_each_run(out.numel(), len, [&](int64_t i) {
      const T* p = in + i * len;
      T best = p[0];
      for (int64_t j = 1; j < len; ++j) {
        auto v = static_cast<acc_t<T>>(p[j]), b = static_cast<acc_t<T>>(best);
        bool nan_v = false, nan_b = false;
        if constexpr (std::is_floating_point_v<acc_t<T>>) {
          nan_v = std::isnan(v);
          nan_b = std::isnan(b);
        }
        if (!nan_b && (v > b || nan_v)) best = p[j];
      }
      o[i] = best;
    });
  });
  return {out};
}
TensorList amax_backward(BackwardContext& c) {
  Tensor x = c.input(0);
  Tensor y = expand_reduced_grad(c.output(0), c);
  Tensor mask = to_dtype(eq(x, y), c.grad().dtype());
  Tensor count = expand_reduced_grad(sum(mask, c.attrs.get<IntList>("dims"), c.attrs.get<bool>("keepdim")), c);
  return {expand_reduced_grad(c.grad(), c) * mask / count};
}
// Ties make amax non-differentiable; with a step of 1e-6 a central difference sees slope 1/2 for
// each tied entry: exactly PyTorch's even split, which the "ties" sample checks.
const OpSchema& kAmax =
    define_op("amax")
        .save({0}, {0})
        .grad(amax_backward)
        .kernel(DeviceType::CPU, amax_cpu)
        .sample("dims", {arg({3, 4, 2})}, [](const TensorList& x) { return TensorList{amax(x[0], {0, 2})}; })
        .sample("ties", {values_arg({2, 3}, {1.0, 3.0, 3.0, 2.0, 0.0, -1.0})},
                [](const TensorList& x) { return TensorList{amax(x[0], 1)}; });

}  // namespace

Tensor sum(const Tensor& x, std::optional<DType> dtype) { return sum(x, IntList{}, false, dtype); }
Tensor sum(const Tensor& x, const IntList& dims, bool keepdim, std::optional<DType> dtype) {
  Attrs a{{"dims", dims}, {"keepdim", keepdim}};
  if (dtype) a.set("dtype", *dtype);
  return dispatch1(kSum, {x}, std::move(a));
}
Tensor mean(const Tensor& x) { return mean(x, IntList{}, false); }
Tensor mean(const Tensor& x, const IntList& dims, bool keepdim) {
  return dispatch1(kMean, {x}, {{"dims", dims}, {"keepdim", keepdim}});
}
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  TensorList r = dispatch(kMax, {x}, {{"dim", dim}, {"keepdim", keepdim}});
  return {r[0], r[1]};
}
Tensor amax(const Tensor& x, const IntList& dims, bool keepdim) {
  return dispatch1(kAmax, {x}, {{"dims", dims}, {"keepdim", keepdim}});
}
Tensor amax(const Tensor& x, int64_t dim, bool keepdim) { return amax(x, IntList{dim}, keepdim); }

Tensor sum_to(const Tensor& g, const IntList& shape) {
  if (g.sizes() == shape) return g;
  int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
  MT_CHECK(lead >= 0, "sum_to: cannot reduce ", g.describe(), " to ", shape_str(shape));
  IntList dims;
  for (int64_t d = 0; d < g.dim(); ++d)
    if (d < lead || (shape[static_cast<size_t>(d - lead)] == 1 && g.sizes()[d] != 1)) dims.push_back(d);
  Tensor r = dims.empty() ? g : sum(g, dims, /*keepdim=*/true, g.dtype());
  return r.reshape(shape);
}

}  // namespace mixtape
