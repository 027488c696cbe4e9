// ops/creation.cpp — factories and in-place writes.
//   fill_(t, value), copy_(dst, src), add_(t, other, alpha), mul_(t, other): in place, input 0 is
//   written; they are dispatcher ops (so they trace and run on every device) marked in_place.
//   full_like(t, value): a new tensor; not differentiable.
#include "ops/creation.h"

#include <cmath>

#include "ops/cpu/elementwise.h"
#include "ops/inplace_args.h"
#include "ops/op_def.h"

namespace mixtape {

void check_copy_args(const char* op, const Tensor& dst, const Tensor& src) {
  broadcast_shapes(dst.sizes(), src.sizes(), op);
  MT_CHECK(static_cast<int64_t>(src.dim()) <= dst.dim(), op, ": source ", src.describe(),
           " cannot be broadcast to destination ", dst.describe());
}

void check_inplace_result(const char* op, const Tensor& self, const Tensor& other) {
  DType r = result_type(self, other);
  bool ok = r == self.dtype() || (is_floating(self.dtype()) && is_floating(r)) ||
            (is_integral(self.dtype()) && is_integral(r));
  MT_CHECK(ok, op, ": result type ", dtype_name(r), " can't be cast to the desired output type ",
           dtype_name(self.dtype()), " (self ", self.describe(), ", other ", other.describe(), ")");
  IntList b = broadcast_shapes(self.sizes(), other.sizes(), op);
  MT_CHECK(b == self.sizes(), op, ": output with shape ", shape_str(self.sizes()),
           " doesn't match the broadcast shape ", shape_str(b));
}

namespace {

void fill_cpu_raw(const Tensor& t, double value) {
  visit_dtype_with_float8(t.dtype(), "fill_", [&]<typename T>() {
    T v;
    if constexpr (is_narrow_float_v<T>)
      v = T(static_cast<float>(value));
    else
      v = static_cast<T>(value);
    cpu::strided_loop<1>(t.sizes(), {{static_cast<char*>(t.data_ptr())}, {cpu::broadcast_byte_strides(t, t.sizes())}},
                         [&](std::array<char*, 1> p, std::array<int64_t, 1> s, int64_t n) {
                           for (int64_t i = 0; i < n; ++i) std::memcpy(p[0] + i * s[0], &v, sizeof(T));
                         });
  });
}

TensorList fill_cpu(const OpCall& c) {
  fill_cpu_raw(c.inputs[0], c.attrs.get<double>("value"));
  return {c.inputs[0]};
}
// Samples of the in-place ops write into a copy of their first input and return it.
Tensor written_copy(const Tensor& x) { return x.detach().clone(); }
const OpSchema& kFill = define_op("fill_").in_place().kernel(DeviceType::CPU, fill_cpu).sample(
    "0.1", {arg({3, 7})},
    [](const TensorList& x) {
      Tensor t = written_copy(x[0]);
      return TensorList{fill_(t, 0.1)};
    },
    no_gradcheck());

TensorList full_like_cpu(const OpCall& c) {
  Tensor out = Tensor::empty(c.inputs[0].sizes(), TensorOptions(c.inputs[0].dtype()));
  fill_cpu_raw(out, c.attrs.get<double>("value"));
  return {out};
}
const OpSchema& kFullLike = define_op("full_like")
                                 .not_differentiable()
                                 .kernel(DeviceType::CPU, full_like_cpu)
                                 .sample("-2.5", {arg({3, 7})}, {{"value", -2.5}}, no_gradcheck());

TensorList copy_cpu(const OpCall& c) {
  const Tensor& dst = c.inputs[0];
  const Tensor& src = c.inputs[1];
  check_copy_args(c.name(), dst, src);
  cpu::copy_into(dst, src);
  return {dst};
}
const OpSchema& kCopy = define_op("copy_").in_place().kernel(DeviceType::CPU, copy_cpu).sample(
    "broadcast-into-strided", {arg({8, 6}), arg({8})},
    [](const TensorList& x) {
      Tensor dst = written_copy(x[0]).t();  // (6, 8), strided
      return TensorList{copy_(dst, x[1])};
    },
    no_gradcheck());

// In-place a op= b: computed out of place in the promoted dtype, then written back with one
// rounding; same-dtype operands take a direct loop. Checks in ops/inplace_args.h.
TensorList add_inplace_cpu(const OpCall& c) {
  const Tensor& self = c.inputs[0];
  Tensor other = c.inputs[1];
  check_inplace_result(c.name(), self, other);
  double alpha = c.attrs.get<double>("alpha");
  if (alpha != 1.0) other = mul(other, alpha);
  Tensor r = add(self.detach(), other.detach());
  cpu::copy_into(self, r);
  return {self};
}
const OpSchema& kAddInplace = define_op("add_").in_place().kernel(DeviceType::CPU, add_inplace_cpu).sample(
    "alpha-broadcast", {arg({4, 9}), arg({9})},
    [](const TensorList& x) {
      Tensor t = written_copy(x[0]);
      return TensorList{add_(t, x[1], 0.5)};
    },
    no_gradcheck());

TensorList mul_inplace_cpu(const OpCall& c) {
  const Tensor& self = c.inputs[0];
  check_inplace_result(c.name(), self, c.inputs[1]);
  Tensor r = mul(self.detach(), c.inputs[1].detach());
  cpu::copy_into(self, r);
  return {self};
}
const OpSchema& kMulInplace = define_op("mul_").in_place().kernel(DeviceType::CPU, mul_inplace_cpu).sample(
    "broadcast", {arg({4, 9}), arg({9})},
    [](const TensorList& x) {
      Tensor t = written_copy(x[0]);
      return TensorList{mul_(t, x[1])};
    },
    no_gradcheck());

// Random fills: element i uses words of the Philox stream at (seed, offset) — independent of
// how the loop is split.
TensorList rand_cpu(const OpCall& c) {
  const Tensor& t = c.inputs[0];
  auto seed = static_cast<uint64_t>(c.attrs.get<int64_t>("seed"));
  auto offset = static_cast<uint64_t>(c.attrs.get<int64_t>("offset"));
  bool normal = c.attrs.get<bool>("normal");
  MT_CHECK(t.is_contiguous(), c.name(), ": expected a contiguous tensor");
  int64_t n = t.numel();
  visit_floating(t.dtype(), c.name(), [&]<typename T>() {
    T* p = static_cast<T*>(t.data_ptr());
#pragma omp parallel for if (n >= cpu::kParallelGrain) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      double v = normal ? normal_from_words(philox_word(seed, offset, 2 * uint64_t(i)),
                                            philox_word(seed, offset, 2 * uint64_t(i) + 1))
                        : double(uniform_from_bits(philox_word(seed, offset, uint64_t(i))));
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
        p[i] = T(static_cast<float>(v));
      else
        p[i] = static_cast<T>(v);
    }
  });
  return {t};
}
// The same seed gives the same Philox words on every device: rand is bit-identical, randn within
// the rounding of its transcendentals.
const OpSchema& kRandFill = define_op("random_fill_").in_place().kernel(DeviceType::CPU, rand_cpu).sample(
    "uniform-normal", {arg({1000})},
    [](const TensorList& x) {
      const TensorOptions opts = TensorOptions(x[0].dtype()).with_device(x[0].device());
      Generator g(20261202);
      Tensor u = rand({1000}, opts, &g);
      return TensorList{u, randn({1000}, opts, &g)};
    },
    no_gradcheck());

Tensor random_tensor(const IntList& sizes, TensorOptions opts, Generator* gen, bool normal) {
  MT_CHECK(is_floating(opts.dtype), normal ? "randn" : "rand", ": expected a floating dtype, got ",
           dtype_name(opts.dtype));
  Tensor t = Tensor::empty(sizes, opts.with_requires_grad(false));
  Generator& g = gen ? *gen : default_generator();
  uint64_t words = static_cast<uint64_t>(t.numel()) * (normal ? 2 : 1);
  auto r = g.reserve(words);
  dispatch(kRandFill, {t},
           {{"seed", static_cast<int64_t>(r.seed)}, {"offset", static_cast<int64_t>(r.offset)}, {"normal", normal}});
  if (opts.requires_grad) t.requires_grad_(true);
  return t;
}

}  // namespace

Tensor empty(const IntList& sizes, TensorOptions opts) { return Tensor::empty(sizes, opts); }

Tensor full(const IntList& sizes, const Scalar& value, TensorOptions opts) {
  Tensor t = Tensor::empty(sizes, opts.with_requires_grad(false));
  fill_(t, value);
  if (opts.requires_grad) t.requires_grad_(true);
  return t;
}
Tensor zeros(const IntList& sizes, TensorOptions opts) { return full(sizes, 0.0, opts); }
Tensor ones(const IntList& sizes, TensorOptions opts) { return full(sizes, 1.0, opts); }
Tensor full_like(const Tensor& t, const Scalar& value) {
  return dispatch1(kFullLike, {t}, {{"value", value.to_double()}});
}
Tensor zeros_like(const Tensor& t) { return full_like(t, 0.0); }
Tensor ones_like(const Tensor& t) { return full_like(t, 1.0); }

Tensor arange(const Scalar& end, TensorOptions opts) { return arange(0, end, 1, opts); }
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step) {
  bool fl = start.is_floating() || end.is_floating() || step.is_floating();
  return arange(start, end, step, TensorOptions(fl ? kDefaultFloat : DType::Int64));
}
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, TensorOptions opts) {
  double s = start.to_double(), e = end.to_double(), st = step.to_double();
  MT_CHECK(st != 0 && std::isfinite(s) && std::isfinite(e) && std::isfinite(st), "arange: need finite start/end and a "
           "non-zero step, got start=", s, " end=", e, " step=", st);
  MT_CHECK((e - s) / st >= 0, "arange: upper bound and lower bound inconsistent with step sign (start=", s, ", end=", e,
           ", step=", st, ")");
  auto n = static_cast<int64_t>(std::ceil((e - s) / st));
  Tensor t = Tensor::empty({n}, opts.with_device(Device::CPU()).with_requires_grad(false));
  for (int64_t i = 0; i < n; ++i) set_element(t, i, s + static_cast<double>(i) * st);
  t = to_device(t, opts.device);
  if (opts.requires_grad) t.requires_grad_(true);
  return t;
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions opts) {
  MT_CHECK(steps >= 0, "linspace: number of steps must be non-negative, got ", steps);
  Tensor t = Tensor::empty({steps}, opts.with_device(Device::CPU()).with_requires_grad(false));
  double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  // Symmetric evaluation (as PyTorch) so the last value is exactly `end`.
  int64_t half = steps / 2;
  for (int64_t i = 0; i < steps; ++i)
    set_element(t, i, i < half ? start + step * static_cast<double>(i) : end - step * static_cast<double>(steps - 1 - i));
  t = to_device(t, opts.device);
  if (opts.requires_grad) t.requires_grad_(true);
  return t;
}

Tensor rand(const IntList& sizes, TensorOptions opts, Generator* gen) { return random_tensor(sizes, opts, gen, false); }
Tensor randn(const IntList& sizes, TensorOptions opts, Generator* gen) { return random_tensor(sizes, opts, gen, true); }

Tensor& fill_(Tensor& t, const Scalar& value) {
  dispatch(kFill, {t}, {{"value", value.to_double()}});
  return t;
}
Tensor& zero_(Tensor& t) { return fill_(t, 0.0); }
Tensor& copy_(Tensor& dst, const Tensor& src) {
  // Between devices: move src to dst's device first (to_device), then copy there.
  if (src.defined() && dst.defined() && !src.is_wrapped_number() && src.device() != dst.device()) {
    dispatch(kCopy, {dst, to_device(src, dst.device())});
    return dst;
  }
  dispatch(kCopy, {dst, src});
  return dst;
}
Tensor& add_(Tensor& t, const Tensor& other, const Scalar& alpha) {
  dispatch(kAddInplace, {t, other}, {{"alpha", alpha.to_double()}});
  return t;
}
Tensor& mul_(Tensor& t, const Tensor& other) {
  dispatch(kMulInplace, {t, other});
  return t;
}
Tensor& mul_(Tensor& t, const Scalar& other) { return mul_(t, wrapped_scalar(other)); }

}  // namespace mixtape
