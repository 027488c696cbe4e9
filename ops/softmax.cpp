// ops/softmax.cpp — softmax, log_softmax and their gradient ops.
//   softmax(x, dim, dtype?)      y_j = exp(x_j - m) / s,         m = max_j x_j, s = sum_j exp(x_j - m)
//   log_softmax(x, dim, dtype?)  y_j = (x_j - m) - log(s)
//   softmax_backward(g, y, dim)      = y * (g - sum(g * y))     (the vector-Jacobian product)
//   log_softmax_backward(g, y, dim)  = g - exp(y) * sum(g)
// Shapes: everything has x's shape; the sums run along `dim` (a 0-d tensor is one row of one).
// Dtypes: f16/bf16/f32/f64; with attr "dtype" (the name autocast looks for) the input is
// converted to it first. Math in acc_t<T> (f32 for 16-bit and f32, f64 for f64), one rounding
// on store, so f16 softmax(x) == f32 softmax(float(x)) rounded once, bit for bit.
// Non-finite inputs follow PyTorch: a row holding NaN, or +inf, or only -inf, gives NaN.
//
// CPU layout: x (made contiguous) is viewed as (outer, len, inner) with `dim` in the middle;
// each task handles one outer index and a block of up to kBlock inner positions, so the loops
// over `len` read contiguous memory whatever the dim.
#include "ops/softmax.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "ops/cpu/elementwise.h"
#include "ops/dim_layout.h"
#include "ops/op_def.h"
#include "ops/softmax_args.h"

namespace mixtape {

SoftmaxArgs softmax_args(const OpCall& c, const Tensor& x) {
  const int64_t dim = wrap_dim(c.attrs.get<int64_t>("dim"), x.dim(), c.name());
  const std::optional<DType> want = c.attrs.get_dtype("dtype");
  if (want)
    MT_CHECK(is_floating(*want), c.name(), ": dtype must be floating (Float16, BFloat16, Float32, Float64), got ",
             dtype_name(*want));
  else
    MT_CHECK(is_floating(x.dtype()), c.name(), ": expected a floating input, got ", x.describe(),
             " (pass dtype=Float32 to convert it first)");
  const DType dt = want.value_or(x.dtype());
  return {dim, dt};
}

SoftmaxArgs softmax_backward_args(const OpCall& c, const Tensor& g, const Tensor& y) {
  MT_CHECK(g.sizes() == y.sizes(), c.name(), ": gradient ", g.describe(), " and output ", y.describe(),
           " must have the same shape");
  const int64_t dim = wrap_dim(c.attrs.get<int64_t>("dim"), y.dim(), c.name());
  const DType dt = promote_types(g.dtype(), y.dtype());
  MT_CHECK(is_floating(dt), c.name(), ": expected floating tensors, got ", g.describe(), " and ", y.describe());
  return {dim, dt};
}

namespace {

constexpr int64_t kBlock = 256;

// t as a contiguous tensor of dtype dt (t itself when it already is one); not recorded.
Tensor dense(const Tensor& t, DType dt) {
  if (t.dtype() == dt && t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.sizes(), TensorOptions(dt));
  cpu::copy_into(out, t);
  return out;
}

// fn(offset of the block's first element, block width) for every (outer, inner block).
template <typename F>
void for_each_block(const DimLayout& l, F&& fn) {
  const int64_t nb = (l.inner + kBlock - 1) / kBlock, tasks = l.outer * nb;
  const bool par = l.outer * l.len * l.inner >= cpu::kParallelGrain && tasks > 1;
#pragma omp parallel for if (par) schedule(static)
  for (int64_t k = 0; k < tasks; ++k) {
    const int64_t o = k / nb, i0 = (k % nb) * kBlock;
    fn(o * l.len * l.inner + i0, std::min(kBlock, l.inner - i0));
  }
}

template <typename T, bool Log>
void softmax_forward(const T* x, T* y, const DimLayout& l) {
  using A = acc_t<T>;
  for_each_block(l, [&](int64_t off, int64_t n) {
    std::array<A, kBlock> m, s;
    for (int64_t i = 0; i < n; ++i) {
      m[i] = -std::numeric_limits<A>::infinity();
      s[i] = A(0);
    }
    // std::max(m, NaN) keeps m; a NaN in the row still turns the sum, and so the row, into NaN.
    for (int64_t j = 0; j < l.len; ++j) {
      const T* r = x + off + j * l.inner;
      for (int64_t i = 0; i < n; ++i) m[i] = std::max(m[i], static_cast<A>(r[i]));
    }
    for (int64_t j = 0; j < l.len; ++j) {
      const T* r = x + off + j * l.inner;
      for (int64_t i = 0; i < n; ++i) s[i] += std::exp(static_cast<A>(r[i]) - m[i]);
    }
    if constexpr (Log)
      for (int64_t i = 0; i < n; ++i) s[i] = std::log(s[i]);
    for (int64_t j = 0; j < l.len; ++j) {
      const T* r = x + off + j * l.inner;
      T* w = y + off + j * l.inner;
      for (int64_t i = 0; i < n; ++i) {
        const A d = static_cast<A>(r[i]) - m[i];
        if constexpr (Log)
          w[i] = static_cast<T>(d - s[i]);
        else
          w[i] = static_cast<T>(std::exp(d) / s[i]);
      }
    }
  });
}

template <bool Log>
TensorList softmax_cpu(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const SoftmaxArgs a = softmax_args(c, x);
  const int64_t dim = a.dim;
  const DType dt = a.dtype;
  Tensor src = dense(x, dt);  // "converted first": an f32 x with dtype=f16 is rounded, then used
  Tensor out = Tensor::empty(x.sizes(), TensorOptions(dt));
  const DimLayout l = layout_of(x.sizes(), x.dim() == 0 ? -1 : dim);
  visit_floating(dt, c.name(), [&]<typename T>() {
    softmax_forward<T, Log>(static_cast<const T*>(src.data_ptr()), static_cast<T*>(out.data_ptr()), l);
  });
  return {out};
}

// Backward kernels: g, y converted to their promoted dtype; out = Log ? g - exp(y) sum(g)
// : y (g - sum(g y)), sums in acc_t.
template <typename T, bool Log>
void softmax_grad(const T* g, const T* y, T* out, const DimLayout& l) {
  using A = acc_t<T>;
  for_each_block(l, [&](int64_t off, int64_t n) {
    std::array<A, kBlock> s;
    for (int64_t i = 0; i < n; ++i) s[i] = A(0);
    for (int64_t j = 0; j < l.len; ++j) {
      const int64_t r = off + j * l.inner;
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (Log)
          s[i] += static_cast<A>(g[r + i]);
        else
          s[i] += static_cast<A>(g[r + i]) * static_cast<A>(y[r + i]);
      }
    }
    for (int64_t j = 0; j < l.len; ++j) {
      const int64_t r = off + j * l.inner;
      for (int64_t i = 0; i < n; ++i) {
        const A gv = static_cast<A>(g[r + i]), yv = static_cast<A>(y[r + i]);
        if constexpr (Log)
          out[r + i] = static_cast<T>(gv - std::exp(yv) * s[i]);
        else
          out[r + i] = static_cast<T>(yv * (gv - s[i]));
      }
    }
  });
}

template <bool Log>
TensorList softmax_grad_cpu(const OpCall& c) {
  const Tensor& g = c.inputs[0];
  const Tensor& y = c.inputs[1];
  const SoftmaxArgs a = softmax_backward_args(c, g, y);
  const int64_t dim = a.dim;
  const DType dt = a.dtype;
  Tensor gd = dense(g, dt), yd = dense(y, dt);
  Tensor out = Tensor::empty(y.sizes(), TensorOptions(dt));
  const DimLayout l = layout_of(y.sizes(), y.dim() == 0 ? -1 : dim);
  visit_floating(dt, c.name(), [&]<typename T>() {
    softmax_grad<T, Log>(static_cast<const T*>(gd.data_ptr()), static_cast<const T*>(yd.data_ptr()),
                         static_cast<T*>(out.data_ptr()), l);
  });
  return {out};
}

int64_t dim_of(const BackwardContext& c) { return c.attrs.get<int64_t>("dim"); }
Tensor sum_dim(const Tensor& t, int64_t dim) { return sum(t, IntList{dim}, /*keepdim=*/true); }

// ---- softmax_backward(g, y) = y (g - sum(g y)); its own VJP with upstream h:
//   d/dg = softmax_backward(h, y),  d/dy = h (g - sum(g y)) - g sum(h y) ----
TensorList softmax_backward_backward(BackwardContext& c) {
  const Tensor& h = c.grad();
  const int64_t dim = dim_of(c);
  Tensor g = c.input(0), y = c.input(1);
  return {c.needs_input_grad(0) ? softmax_backward(h, y, dim) : Tensor(),
          c.needs_input_grad(1) ? h * (g - sum_dim(g * y, dim)) - g * sum_dim(h * y, dim) : Tensor()};
}
// Samples (the gradient op with respect to both inputs: softmax's double backward). Parity: the
// device walks each row in the CPU's order, but may contract each step of the row sum
// s += g y into an FMA: len = 3 roundings here; 4 leaves room for the sums of 3 terms the
// double backward adds in another order (the bound doubles r for gradients).
const OpSchema& kSoftmaxBackward = define_op("softmax_backward")
                                       .save({0, 1})
                                       .grad(softmax_backward_backward)
                                       .kernel(DeviceType::CPU, softmax_grad_cpu<false>)
                                       .sample("double", {arg({2, 3, 4}), arg({2, 3, 4}, 0.1, 0.9)},
                                               [](const TensorList& x) {
                                                 return TensorList{softmax_backward(x[0], x[1], 1)};
                                               },
                                               SampleChecks{.parity_roundings = 4});

// ---- log_softmax_backward(g, y) = g - exp(y) sum(g); VJP with upstream h:
//   d/dg = h - sum(h exp(y)),  d/dy = -h exp(y) sum(g) ----
TensorList log_softmax_backward_backward(BackwardContext& c) {
  const Tensor& h = c.grad();
  const int64_t dim = dim_of(c);
  Tensor g = c.input(0), e = exp(c.input(1));
  return {c.needs_input_grad(0) ? h - sum_dim(h * e, dim) : Tensor(),
          c.needs_input_grad(1) ? -(h * e * sum_dim(g, dim)) : Tensor()};
}
// Samples (double backward of log_softmax), y in (-2, -0.1) as log-probabilities are. Parity:
// the row sum of g is the same additions in the same order on both; then one exp (4 roundings)
// and g - exp(y) s, which the device may contract into an FMA (1): 5.
const OpSchema& kLogSoftmaxBackward = define_op("log_softmax_backward")
                                          .save({0, 1})
                                          .grad(log_softmax_backward_backward)
                                          .kernel(DeviceType::CPU, softmax_grad_cpu<true>)
                                          .sample("double", {arg({2, 3, 4}), arg({2, 3, 4}, -2.0, -0.1)},
                                                  [](const TensorList& x) {
                                                    return TensorList{log_softmax_backward(x[0], x[1], -1)};
                                                  },
                                                  SampleChecks{.parity_roundings = 5});

// ---- softmax / log_softmax: AMP fp32 unless the caller passed dtype (PyTorch's fp32_set_opt_dtype; docs/AMP.md, "The policies").
// The gradient comes back in the output's dtype; the tape casts it to x's dtype. ----
// Samples: every dim of a 3-d input (so the rows are strided: inner > 1), and a transposed
// (non-contiguous) input. Parity: the device walks each row in the CPU's order (ops/cuda/
// softmax_loss.cu), so the two differ only by their exp/log calls (libdevice vs glibc, 4
// roundings each); an output depends on two of them (its own exp and the row sum's exps; for
// log_softmax the sum's exps and the log): 8 roundings.
constexpr SampleChecks kSoftmaxParity{.parity_roundings = 8};
TensorList softmax_grad_fn(BackwardContext& c) { return {softmax_backward(c.grad(), c.output(0), dim_of(c))}; }
const OpSchema& kSoftmax = define_op("softmax").args({"input"})
                               .policy(AmpPolicy::FP32UnlessDtype)
                               .save({}, {0})
                               .grad(softmax_grad_fn)
                               .kernel(DeviceType::CPU, softmax_cpu<false>)
                               .sample("dim1", {arg({3, 5}, -3, 3)},
                                       [](const TensorList& x) { return TensorList{softmax(x[0], 1)}; },
                                       kSoftmaxParity)
                               .sample("dim0", {arg({2, 3, 4}, -2, 2)},
                                       [](const TensorList& x) { return TensorList{softmax(x[0], 0)}; },
                                       kSoftmaxParity)
                               .sample("dim-1", {arg({2, 3, 4}, -2, 2)},
                                       [](const TensorList& x) { return TensorList{softmax(x[0], -1)}; },
                                       kSoftmaxParity)
                               .sample("non-contiguous", {arg({4, 3}, -2, 2)},
                                       [](const TensorList& x) { return TensorList{softmax(x[0].t(), 1)}; },
                                       kSoftmaxParity);

TensorList log_softmax_grad_fn(BackwardContext& c) {
  return {log_softmax_backward(c.grad(), c.output(0), dim_of(c))};
}
const OpSchema& kLogSoftmax = define_op("log_softmax").args({"input"})
                                  .policy(AmpPolicy::FP32UnlessDtype)
                                  .save({}, {0})
                                  .grad(log_softmax_grad_fn)
                                  .kernel(DeviceType::CPU, softmax_cpu<true>)
                                  .sample("dim1", {arg({3, 5}, -3, 3)},
                                          [](const TensorList& x) { return TensorList{log_softmax(x[0], 1)}; },
                                          kSoftmaxParity)
                                  .sample("dim0", {arg({2, 3, 4}, -2, 2)},
                                          [](const TensorList& x) { return TensorList{log_softmax(x[0], 0)}; },
                                          kSoftmaxParity)
                                  .sample("dim-1", {arg({2, 3, 4}, -2, 2)},
                                          [](const TensorList& x) { return TensorList{log_softmax(x[0], -1)}; },
                                          kSoftmaxParity);

Tensor call_softmax(const OpSchema& op, const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  MT_CHECK(x.defined(), op.name, ": input is undefined");
  Attrs a{{"dim", wrap_dim(dim, x.dim(), op.name.c_str())}};
  if (dtype) a.set("dtype", *dtype);
  return dispatch1(op, {x}, std::move(a));
}

Tensor call_grad(const OpSchema& op, const Tensor& g, const Tensor& y, int64_t dim) {
  MT_CHECK(g.defined() && y.defined(), op.name, ": gradient and output must be defined");
  return dispatch1(op, {g, y}, {{"dim", wrap_dim(dim, y.dim(), op.name.c_str())}});
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype) { return call_softmax(kSoftmax, x, dim, dtype); }
Tensor log_softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  return call_softmax(kLogSoftmax, x, dim, dtype);
}
Tensor softmax_backward(const Tensor& g, const Tensor& y, int64_t dim) { return call_grad(kSoftmaxBackward, g, y, dim); }
Tensor log_softmax_backward(const Tensor& g, const Tensor& y, int64_t dim) {
  return call_grad(kLogSoftmaxBackward, g, y, dim);
}

}  // namespace mixtape
