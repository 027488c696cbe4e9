// ops/normalization.cpp — batch_norm (+ its backward op) and layer_norm: definition, AMP
// policy, backward and CPU kernel, each block in one place.
//
// batch_norm(x (N, C, *), running_mean (C)?, running_var (C)?, weight (C)?, bias (C)?,
//            num_batches_tracked (i64, one element)?)
//   -> out (x's shape and dtype), save_mean (C), save_invstd (C)   [the last two internal]
//   AMP None: x may be f16/bf16 with f32 parameters and statistics (docs/amp-behaviours.md behaviour 4).
//   Training updates the running statistics, and adds 1 to the batch counter when given, in the
//   kernel, in place: below autograd, so the write is never recorded, and the kernel bumps their
//   version counters (a CUDA kernel must do the same; there the counter costs no launch of its
//   own). Backward: the batch_norm_backward op (a kernel), whose own backward is written with
//   ops (double backward, PyTorch's batchnorm_double_backward, re-derived in
//   bn_double_backward below) and recomputes the batch statistics from x with ops, so a third
//   derivative is right as well.
// layer_norm(x (*, normalized_shape), weight?, bias?) -> out, mean, rstd  [last two internal,
//   shape (*, 1, ..., 1)]. AMP FP32. Backward written with ops from the saved statistics; the
//   statistics outputs are differentiable (d mean / dx = 1/M, d rstd / dx = -rstd^2 xhat / M),
//   which is what makes the ops-written backward differentiable again.
//
// Numerics: layer_norm's statistics accumulate in f64 (two passes: mean, then the sum of squared
// deviations, so no cancellation); batch_norm's in 32 lanes per row, float partials of at most
// 32 terms flushed into f64 (ops/cpu/row_lane_sum.h, which its AVX-512 kernels for f32 and BF16
// follow bit for bit; f64 again where a float sum overflows, meets inf or NaN, or the squares may
// have underflowed), the variance by the corrected two-pass formula (channel_moments);
// 16-bit rows are widened in blocks (F16C); the elementwise transforms run in acc_t<T> from
// per-channel coefficients computed in f64, and round once on store. Statistics outputs are f64
// for f64 x, else f32.
#include "ops/normalization.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "ops/cpu/batch_norm_avx512.h"
#include "ops/cpu/kernel_table.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/row_lane_sum.h"
#include "ops/normalization_args.h"
#include "ops/normalization_functors.h"
#include "ops/op_def.h"
#include "ops/threads.h"

namespace mixtape {

DType norm_stat_dtype(DType x) { return x == DType::Float64 ? DType::Float64 : DType::Float32; }

namespace {

void check_bn_input(const char* op, const Tensor& x) {
  MT_CHECK(x.defined() && x.dim() >= 2, op, ": expected input of shape (N, C) or (N, C, *), got ",
           x.defined() ? x.describe() : std::string("an undefined tensor"));
  MT_CHECK(is_floating(x.dtype()), op, ": expected a floating input (f16, bf16, f32, f64), got ", x.describe());
}
void check_channel_param(const char* op, const char* what, const Tensor& t, int64_t C) {
  if (!t.defined()) return;
  MT_CHECK(t.dim() == 1 && t.size(0) == C, op, ": ", what, " must have shape [", C, "] (C = input.size(1)), got ",
           t.describe());
  MT_CHECK(is_floating(t.dtype()), op, ": ", what, " must be floating, got ", t.describe());
}
ChannelView channel_view(const Tensor& x) {
  int64_t S = 1;
  for (int64_t d = 2; d < x.dim(); ++d) S *= x.size(d);
  return {x.size(0), x.size(1), S};
}

}  // namespace

ChannelView check_batch_norm_args(const char* op, const Tensor& x, const Tensor& rm, const Tensor& rv, const Tensor& w,
                                  const Tensor& b, bool training, double eps, const Tensor& num_batches_tracked) {
  check_bn_input(op, x);
  const ChannelView v = channel_view(x);
  check_channel_param(op, "running_mean", rm, v.C);
  check_channel_param(op, "running_var", rv, v.C);
  check_channel_param(op, "weight", w, v.C);
  check_channel_param(op, "bias", b, v.C);
  MT_CHECK(rm.defined() == rv.defined(), op, ": running_mean and running_var must both be given or both be "
           "undefined, got ", rm.defined() ? "only running_mean" : "only running_var");
  MT_CHECK(training || rm.defined(), op, ": running_mean and running_var must be defined in evaluation mode "
           "(training=false), got undefined tensors");
  MT_CHECK(!training || v.M() > 1, op, ": expected more than 1 value per channel when training, got input ",
           x.describe());
  MT_CHECK(eps >= 0, op, ": eps must be non-negative, got ", eps);
  const Tensor& nbt = num_batches_tracked;
  MT_CHECK(!nbt.defined() || (nbt.dtype() == DType::Int64 && nbt.numel() == 1), op,
           ": num_batches_tracked must be an i64 tensor of one element, got ", nbt.describe());
  return v;
}

ChannelView check_batch_norm_backward_args(const char* op, const Tensor& grad_out, const Tensor& x, const Tensor& w,
                                           const Tensor& save_mean, const Tensor& save_invstd, bool training) {
  check_bn_input(op, x);
  const ChannelView v = channel_view(x);
  MT_CHECK(grad_out.sizes() == x.sizes(), op, ": grad_out must have the input's shape ", shape_str(x.sizes()),
           ", got ", grad_out.describe());
  check_channel_param(op, "weight", w, v.C);
  check_channel_param(op, "save_mean", save_mean, v.C);
  check_channel_param(op, "save_invstd", save_invstd, v.C);
  MT_CHECK(save_mean.defined() && save_invstd.defined(), op, ": save_mean and save_invstd are required");
  MT_CHECK(!training || v.M() > 1, op, ": expected more than 1 value per channel when training, got input ",
           x.describe());
  return v;
}

LayerNormRows check_layer_norm_args(const char* op, const Tensor& x, const Tensor& w, const Tensor& b,
                                    const IntList& ns, double eps) {
  const auto k = static_cast<int64_t>(ns.size());
  MT_CHECK(k >= 1, op, ": normalized_shape must have at least one dim, got ", shape_str(ns));
  MT_CHECK(is_floating(x.dtype()), op, ": expected a floating input (f16, bf16, f32, f64), got ", x.describe());
  bool match = x.dim() >= k;
  for (int64_t d = 0; match && d < k; ++d) match = x.size(x.dim() - k + d) == ns[static_cast<size_t>(d)];
  MT_CHECK(match, op, ": input must end with normalized_shape ", shape_str(ns), ", i.e. have shape (*, ",
           shape_str(ns).substr(1, shape_str(ns).size() - 2), "), got ", x.describe());
  for (const auto& [t, what] : {std::pair{&w, "weight"}, std::pair{&b, "bias"}}) {
    if (!t->defined()) continue;
    MT_CHECK(t->sizes() == ns, op, ": ", what, " must have normalized_shape ", shape_str(ns), ", got ",
             t->describe());
    MT_CHECK(is_floating(t->dtype()), op, ": ", what, " must be floating, got ", t->describe());
  }
  MT_CHECK(eps >= 0, op, ": eps must be non-negative, got ", eps);
  LayerNormRows r{1, numel_of(ns), {}};  // M == 0: every statistic is 0/0 = NaN, as PyTorch's
  for (int64_t d = 0; d < x.dim() - k; ++d) {
    r.stat_shape.push_back(x.size(d));
    r.rows *= x.size(d);
  }
  for (int64_t d = 0; d < k; ++d) r.stat_shape.push_back(1);
  return r;
}

namespace {

// t as a contiguous tensor of dtype dt; not recorded by autograd (kernels only).
Tensor contiguous_as(const Tensor& t, DType dt) {
  Tensor c = cpu::cast_to(t.detach(), dt);
  return c.is_contiguous() ? c : clone(c);
}

// Values of a (C) parameter as doubles; `fallback` everywhere when t is undefined.
std::vector<double> channel_values(const Tensor& t, int64_t C, double fallback) {
  if (!t.defined()) return std::vector<double>(static_cast<size_t>(C), fallback);
  Tensor d = contiguous_as(t, DType::Float64);
  const double* p = d.data_ptr<double>();
  return std::vector<double>(p, p + C);
}

Tensor from_doubles(const std::vector<double>& v, const IntList& sizes, DType dt) {
  Tensor d = Tensor::empty(sizes, TensorOptions(DType::Float64));
  std::copy(v.begin(), v.end(), d.data_ptr<double>());
  return cpu::cast_to(d, dt);
}

bool saved(const BackwardContext& c, size_t i) {
  return i < c.saved_inputs.size() && (c.saved_inputs[i].defined() || c.saved_inputs[i].released());
}

// ---- batch_norm ----
// The same over two rows of one length, piece by piece: f(a, b, n) (cpu::for_each_widened); one
// row passed twice (ra == rb: the variance's pass) is widened once.
template <typename T, typename F>
void widened2(const T* ra, const T* rb, int64_t n, F&& f) {
  if constexpr (cpu::is_16bit_v<T>) {
    float ba[cpu::kBlock], bb[cpu::kBlock];
    for (int64_t i = 0; i < n; i += cpu::kBlock) {
      const int64_t m = std::min(cpu::kBlock, n - i);
      cpu::load_block<T>(reinterpret_cast<const char*>(ra + i), sizeof(T), m, ba);
      if (ra == rb) {
        f(ba, ba, m);
        continue;
      }
      cpu::load_block<T>(reinterpret_cast<const char*>(rb + i), sizeof(T), m, bb);
      f(ba, bb, m);
    }
  } else {
    f(ra, rb, n);
  }
}

// ---- batch norm's kernel lists: op.pass batch_norm.fwd (statistics and affine rows) and
// batch_norm.bwd (gradient sums and rows), one list per dtype, first entry that applies runs ----
//   f32, bf16   avx512 (ops/cpu/batch_norm_avx512.h) · generic
//   f64, f16    generic
// avx512 computes the generic loops' bits (its header's invariant), about 2x faster a call on
// ResNet-8's layers (docs/CPU.md), at every shape: no threshold, only the ISA decides.
template <typename T>
constexpr bool kBnAvx512Type = std::is_same_v<T, float> || std::is_same_v<T, BFloat16>;
struct BnProblem {
  const ChannelView& v;
  DType dt;
};
const char* bn_avx512_declines(const BnProblem&) {
  return cpu::batch_norm_avx512_available() ? nullptr : "no AVX-512 F/BW/VL (isa_avx512)";
}
using BnEntry = cpu::FixedKernelEntry<BnProblem>;
const BnEntry kBnVector[] = {{"avx512", bn_avx512_declines}, {"generic", nullptr}};  // f32, bf16
const BnEntry kBnGeneric[] = {{"generic", nullptr}};                                  // f64, f16
const bool kBnRegistered = cpu::register_kernel_list("batch_norm.fwd", kBnVector) &&
                           cpu::register_kernel_list("batch_norm.bwd", kBnVector);
// True when the call runs on avx512; traces the choice.
template <typename T>
bool bn_avx512(const char* op_pass, const ChannelView& v, DType dt) {
  const BnProblem p{v, dt};
  const cpu::KernelPick k =
      kBnAvx512Type<T> ? cpu::choose_kernel(op_pass, kBnVector, p) : cpu::choose_kernel(op_pass, kBnGeneric, p);
  cpu::trace_kernel_choice(
      op_pass,
      [&] {
        return std::string(dtype_short(dt)) + " N=" + std::to_string(v.N) + " C=" + std::to_string(v.C) +
               " S=" + std::to_string(v.S) + cpu::isa_tag();
      },
      k.name, k.skipped);
  return kBnAvx512Type<T> && k.index == 0;
}

// Runs channel(c) for every channel c and row(r) for every row r = (n, c) after its channel. Where
// the channels alone keep every thread busy (C at least the thread count, and a multiple of it or
// at least four times it), each thread takes whole channels and runs a channel's rows right after
// it, so the values channel(c) read come from cache the second time (a 28x28 channel of a batch
// of 128 is 200 KB in BF16); otherwise all channels, then all rows, each loop split on its own.
// row(r) depends only on channel(r % C)'s results, so both orders give the same bits.
template <typename Channel, typename Row>
void channels_then_rows(const ChannelView& v, bool parallel, Channel&& channel, Row&& row) {
  const int64_t threads = get_num_threads();
  if (v.C >= threads && (v.C % threads == 0 || v.C >= 4 * threads)) {
#pragma omp parallel for if (parallel) schedule(static)
    for (int64_t c = 0; c < v.C; ++c) {
      channel(c);
      for (int64_t n = 0; n < v.N; ++n) row(n * v.C + c);
    }
    return;
  }
#pragma omp parallel for if (parallel && v.C > 1) schedule(static)
  for (int64_t c = 0; c < v.C; ++c) channel(c);
  const int64_t rows = v.N * v.C;
#pragma omp parallel for if (parallel && rows > 1) schedule(static)
  for (int64_t r = 0; r < rows; ++r) row(r);
}

// Sums over channel c's values (rows n = 0..N-1 of S values) in RowLaneSum<P>'s order:
// channel_sum returns sum f(x); channel_sums2 reads two tensors of x's layout (a, b) and writes
// sum f0(a, b) -> *s0 and sum f1(a, b) -> *s1 (the f over P values).
template <typename P, typename T, typename F>
double channel_sum(const T* px, const ChannelView& v, int64_t c, F&& f) {
  using A = acc_t<T>;
  cpu::RowLaneSum<P> s;
  for (int64_t n = 0; n < v.N; ++n) {
    cpu::for_each_widened(px + (n * v.C + c) * v.S, 1, v.S, [&](const A* xv, int64_t m) {
      s.add(m, [&](int64_t j) { return f(static_cast<P>(xv[j])); });
    });
    s.end_row();
  }
  return s.total();
}
template <typename P, typename T, typename F0, typename F1>
void channel_sums2(const T* pa, const T* pb, const ChannelView& v, int64_t c, F0&& f0, F1&& f1, double* s0,
                   double* s1) {
  using A = acc_t<T>;
  cpu::RowLaneSum<P> r0, r1;
  for (int64_t n = 0; n < v.N; ++n) {
    const int64_t o = (n * v.C + c) * v.S;
    widened2(pa + o, pb + o, v.S, [&](const A* av, const A* bv, int64_t m) {
      r0.add(m, [&](int64_t j) { return f0(static_cast<P>(av[j]), static_cast<P>(bv[j])); });
      r1.add(m, [&](int64_t j) { return f1(static_cast<P>(av[j]), static_cast<P>(bv[j])); });
    });
    r0.end_row();
    r1.end_row();
  }
  *s0 = r0.total();
  *s1 = r1.total();
}

// A channel's mean and sum of squared deviations q, from two passes whose terms are P (acc_t<T>:
// float below f64) in RowLaneSum<P>'s order: the first sums x for an estimate mu1 of the mean; the
// second sums d = x - shift and d^2, shift = mu1 in P, and mean = shift + sum d / M,
// q = sum d^2 - (sum d)^2 / M (the corrected two-pass formula: the estimate's error, up to ~31
// float roundings of the mean, cancels, so a large mean with a small spread keeps its digits). A
// float partial that overflows (|x - shift| past ~1e19, sums near 3e38) or meets inf or NaN
// makes a sum non-finite, and squares below 2^-126 lose bits: in either case (the second seen as
// sum d^2 < M 2^-100, so that squares lost to underflow could weigh 2^-26 of it at most; an eps of
// 0 makes the variance itself count) the channel is summed again with f64 terms and partials,
// which give what f64 can. `vec`: the f32/BF16 AVX-512 kernels.
struct Moments {
  double mean, q;
};
template <typename P, typename T>
constexpr bool kBnKernels = std::is_same_v<P, float> && kBnAvx512Type<T>;

template <typename P, typename T>
Moments channel_moments(const T* px, const ChannelView& v, int64_t c, bool vec) {
  const auto M = static_cast<double>(v.M());
  const T* first = px + c * v.S;
  const bool kernels = kBnKernels<P, T> && vec;
  double s1 = 0, sd = 0, sd2 = 0;
  if (kernels) {
    if constexpr (kBnKernels<P, T>) s1 = cpu::bn_sum_avx512(first, v.N, v.C * v.S, v.S);
  } else {
    s1 = channel_sum<P>(px, v, c, [](P x) { return x; });
  }
  const auto shift = static_cast<P>(s1 / M);
  if (kernels) {
    if constexpr (kBnKernels<P, T>) cpu::bn_dev_sums_avx512(first, v.N, v.C * v.S, v.S, shift, &sd, &sd2);
  } else {
    channel_sums2<P>(
        px, px, v, c, [shift](P x, P) { return x - shift; },
        [shift](P x, P) {
          const P d = x - shift;
          return d * d;
        },
        &sd, &sd2);
  }
  if constexpr (std::is_same_v<P, float>)
    if (!std::isfinite(s1) || !std::isfinite(sd) || !std::isfinite(sd2) || sd2 < M * 0x1p-100)
      return channel_moments<double>(px, v, c, false);
  const double q = sd2 - sd * sd / M;
  return {static_cast<double>(shift) + sd / M, q < 0 ? 0.0 : q};
}

// The backward's sums over channel c: sum g and sum g (x - mean), the second as sum g d with
// d = x - shift, shift = mean in P, plus (shift - mean) sum g; with f64 terms where a float sum
// is not finite, as above, or where products g d below 2^-126 may have lost bits (seen as
// |sum g d| < M 2^-100: also true of an all-zero gradient, which then costs one more pass).
template <typename P, typename T>
std::pair<double, double> channel_grad_sums(const T* pg, const T* px, const ChannelView& v, int64_t c, double mean,
                                            bool vec) {
  const auto shift = static_cast<P>(mean);
  double sg = 0, sgd = 0;
  if (kBnKernels<P, T> && vec) {
    if constexpr (kBnKernels<P, T>)
      cpu::bn_grad_sums_avx512(pg + c * v.S, px + c * v.S, v.N, v.C * v.S, v.S, shift, &sg, &sgd);
  } else {
    channel_sums2<P>(
        pg, px, v, c, [](P g, P) { return g; }, [shift](P g, P x) { return g * (x - shift); }, &sg, &sgd);
  }
  if constexpr (std::is_same_v<P, float>)
    if (!std::isfinite(sg) || !std::isfinite(sgd) || std::fabs(sgd) < static_cast<double>(v.M()) * 0x1p-100)
      return channel_grad_sums<double>(pg, px, v, c, mean, false);
  const double delta = static_cast<double>(shift) - mean;
  return {sg, delta == 0 ? sgd : sgd + delta * sg};
}

// inputs: x, running_mean, running_var, weight, bias, num_batches_tracked; attrs: training,
// momentum, eps
TensorList batch_norm_cpu(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& rm = call.inputs[1];
  const Tensor& rv = call.inputs[2];
  const Tensor& w = call.inputs[3];
  const Tensor& b = call.inputs[4];
  const Tensor counter = call.inputs.size() > 5 ? call.inputs[5] : Tensor();
  const bool training = call.attrs.get<bool>("training");
  const double momentum = call.attrs.get<double>("momentum");
  const double eps = call.attrs.get<double>("eps");
  const ChannelView v = check_batch_norm_args(call.name(), x, rm, rv, w, b, training, eps, counter);

  const auto C = static_cast<size_t>(v.C);
  const Tensor xc = contiguous_as(x, x.dtype());
  std::vector<double> mean(C), var(C), var_unbiased(C);
  if (!training) {
    mean = channel_values(rm, v.C, 0.0);
    var = channel_values(rv, v.C, 1.0);
  }
  std::vector<double> invstd(C), scale(C), shift(C);
  const std::vector<double> wv = channel_values(w, v.C, 1.0), bv = channel_values(b, v.C, 0.0);
  Tensor out = Tensor::empty(x.sizes(), TensorOptions(x.dtype()));
  visit_floating(x.dtype(), call.name(), [&]<typename T>() {
    using A = acc_t<T>;
    const T* px = static_cast<const T*>(xc.data_ptr());
    T* po = static_cast<T*>(out.data_ptr());
    const bool vec = bn_avx512<T>("batch_norm.fwd", v, x.dtype());
    const auto M = static_cast<double>(v.M());
    // Channel c's batch statistics (training).
    auto statistics = [&](int64_t c) {
      const Moments m = channel_moments<A>(px, v, c, vec);
      const auto ci = static_cast<size_t>(c);
      mean[ci] = m.mean;
      var[ci] = m.q / M;
      var_unbiased[ci] = m.q / static_cast<double>(v.M() - 1);
    };
    auto coefficients = [&](int64_t c) {
      const auto ci = static_cast<size_t>(c);
      const fn::BnCoefficients k = fn::bn_coefficients(mean[ci], var[ci], wv[ci], bv[ci], eps);
      invstd[ci] = k.invstd;
      scale[ci] = k.scale;
      shift[ci] = k.shift;
    };
    // Row r = (n, c) of out = x * scale[c] + shift[c], in acc_t<T>, rounded once.
    auto affine_row = [&](int64_t r) {
      const auto c = static_cast<size_t>(r % v.C);
      const A a = static_cast<A>(scale[c]), b = static_cast<A>(shift[c]);
      T* orow = po + r * v.S;
      if constexpr (kBnAvx512Type<T>)
        if (vec) {
          cpu::bn_affine_row_avx512(px + r * v.S, v.S, a, b, orow);
          return;
        }
      int64_t done = 0;
      cpu::for_each_widened(px + r * v.S, 1, v.S, [&](const A* xv, int64_t n) {
        cpu::store_each(orow + done, n, [&](int64_t i) { return xv[i] * a + b; });
        done += n;
      });
    };
    channels_then_rows(
        v, x.numel() >= cpu::kParallelGrain,
        [&](int64_t c) {
          if (training) statistics(c);
          coefficients(c);
        },
        affine_row);
  });

  if (training && rm.defined()) {
    // running = (1 - m) running + m batch; an in-place write below autograd: bump the versions
    // so a saved copy of a running statistic can tell it was overwritten.
    std::vector<double> rmv = channel_values(rm, v.C, 0.0), rvv = channel_values(rv, v.C, 0.0);
    for (size_t c = 0; c < C; ++c) {
      rmv[c] = fn::bn_running(rmv[c], mean[c], momentum);
      rvv[c] = fn::bn_running(rvv[c], var_unbiased[c], momentum);
    }
    cpu::copy_into(rm, from_doubles(rmv, {v.C}, DType::Float64));
    cpu::copy_into(rv, from_doubles(rvv, {v.C}, DType::Float64));
    rm.bump_version();
    rv.bump_version();
  }
  if (training && counter.defined()) {  // the same in-place write, for the batch counter
    ++*static_cast<int64_t*>(counter.data_ptr());
    counter.bump_version();
  }
  const DType sd = norm_stat_dtype(x.dtype());
  return {out, from_doubles(mean, {v.C}, sd), from_doubles(invstd, {v.C}, sd)};
}

// inputs: grad_out, x, weight, save_mean, save_invstd; attrs: training, eps
TensorList batch_norm_backward_cpu(const OpCall& call) {
  const Tensor& x = call.inputs[1];
  const Tensor& w = call.inputs[2];
  const bool training = call.attrs.get<bool>("training");
  const ChannelView v =
      check_batch_norm_backward_args(call.name(), call.inputs[0], x, w, call.inputs[3], call.inputs[4], training);

  const auto C = static_cast<size_t>(v.C);
  const Tensor xc = contiguous_as(x, x.dtype());
  const Tensor gc = contiguous_as(call.inputs[0], x.dtype());
  const std::vector<double> mean = channel_values(call.inputs[3], v.C, 0.0);
  const std::vector<double> invstd = channel_values(call.inputs[4], v.C, 1.0);
  const std::vector<double> wv = channel_values(w, v.C, 1.0);
  std::vector<double> sum_g(C), sum_gxhat(C);
  std::vector<double> ka(C), kb(C), kd(C);  // grad_x = ka * g + kb * x + kd, per channel
  Tensor gx = Tensor::empty(x.sizes(), TensorOptions(x.dtype()));
  visit_floating(x.dtype(), call.name(), [&]<typename T>() {
    using A = acc_t<T>;
    const T* px = static_cast<const T*>(xc.data_ptr());
    const T* pg = static_cast<const T*>(gc.data_ptr());
    T* po = static_cast<T*>(gx.data_ptr());
    const bool vec = bn_avx512<T>("batch_norm.bwd", v, x.dtype());
    const auto M = static_cast<double>(v.M());
    // Channel c's sums, then its coefficients, each from channel c's values alone.
    auto channel_sums = [&](int64_t c) {
      const auto ci = static_cast<size_t>(c);
      const double mu = mean[ci];
      const auto [g_sum, gx_sum] = channel_grad_sums<A>(pg, px, v, c, mu, vec);
      sum_g[ci] = g_sum;
      sum_gxhat[ci] = gx_sum * invstd[ci];
      const fn::BnGradCoefficients k =
          fn::bn_grad_coefficients(wv[ci], invstd[ci], mean[ci], sum_g[ci], sum_gxhat[ci], M, training);
      ka[ci] = k.ka;
      kb[ci] = k.kb;
      kd[ci] = k.kd;
    };
    // Row r = (n, c) of grad_x from channel c's coefficients.
    auto grad_row = [&](int64_t r) {
      const auto c = static_cast<size_t>(r % v.C);
      const A a = static_cast<A>(ka[c]), bx = static_cast<A>(kb[c]), d = static_cast<A>(kd[c]);
      const int64_t o = r * v.S;
      if constexpr (kBnAvx512Type<T>)
        if (vec) {
          cpu::bn_grad_row_avx512(pg + o, px + o, v.S, a, bx, d, po + o);
          return;
        }
      int64_t done = 0;
      widened2(pg + o, px + o, v.S, [&](const A* gv, const A* xv, int64_t m) {
        cpu::store_each(po + o + done, m, [&](int64_t j) { return a * gv[j] + bx * xv[j] + d; });
        done += m;
      });
    };
    channels_then_rows(v, x.numel() >= cpu::kParallelGrain, channel_sums, grad_row);
  });
  const DType sd = norm_stat_dtype(x.dtype());
  return {gx, from_doubles(sum_gxhat, {v.C}, sd), from_doubles(sum_g, {v.C}, sd)};
}

// Double backward. With sigma = invstd, xhat = (x - mu) sigma, means over the M values of a
// channel (E), gO = grad_out, and the incoming gradients ggI (x's shape), ggW, ggB (C):
//   grad_x = ka gO + ..., so L = sum(ggI grad_x) + ggW . sum(gO xhat) + ggB . sum(gO).
// training (mu, sigma functions of x):
//   dL/dgO = gamma sigma (ggI - E ggI - xhat E[ggI xhat]) + ggW xhat + ggB
//   dL/dgamma = sum(ggI sigma (gO - E gO - xhat m)),               m = E[gO xhat]
//   dL/dx = -gamma sigma^2 [xhat (p - 3 m q) + q (gO - E gO) + m (ggI - E ggI)]
//           + ggW sigma (gO - E gO - xhat m),       p = E[ggI gO] - E gO E ggI, q = E[ggI xhat]
// eval (mu, sigma constants): dL/dgO = gamma sigma ggI + ggW xhat + ggB,
//   dL/dgamma = sum(ggI gO sigma), dL/dx = ggW sigma gO.
// (The training terms are PyTorch's batchnorm_double_backward, re-derived term by term.)
TensorList batch_norm_backward_backward(BackwardContext& c) {
  const bool training = c.attrs.get<bool>("training");
  const double eps = c.attrs.get<double>("eps");
  const bool has_w = saved(c, 2);
  const Tensor x_in = c.input(1);
  const DType sd = norm_stat_dtype(x_in.dtype());
  const Tensor x = to_dtype(x_in, sd);
  const Tensor gO = to_dtype(c.input(0), sd);
  const Tensor ggI = to_dtype(c.grad(0), sd);
  const int64_t C = x.size(1);
  IntList red{0}, bshape{1, C};
  for (int64_t d = 2; d < x.dim(); ++d) {
    red.push_back(d);
    bshape.push_back(1);
  }
  auto chan = [&](const Tensor& t) { return to_dtype(t, sd).reshape(bshape); };
  auto E = [&](const Tensor& t) { return mean(t, red, true); };
  auto per_channel = [&](const Tensor& t) { return sum(t, red, false); };
  const Tensor ggW = chan(c.grad(1)), ggB = chan(c.grad(2));
  const Tensor gamma = has_w ? chan(c.input(2)) : Tensor();
  auto times_gamma = [&](const Tensor& t) { return has_w ? t * gamma : t; };

  Tensor mu, sigma;
  if (training) {
    mu = E(x);
    const Tensor xm = x - mu;
    sigma = pow(E(xm * xm) + eps, -0.5);
  } else {
    mu = chan(c.input(3).detach());
    sigma = chan(c.input(4).detach());
  }
  const Tensor xhat = (x - mu) * sigma;

  Tensor d_gO, d_x, d_w;
  if (training) {
    const Tensor gO_mean = E(gO), ggI_mean = E(ggI);
    const Tensor m = E(gO * xhat);
    const Tensor gO_proj = gO - gO_mean - xhat * m;  // gO - E gO - xhat E[gO xhat]
    if (c.needs_input_grad(0))
      d_gO = times_gamma((ggI - ggI_mean - xhat * E(ggI * xhat)) * sigma) + xhat * ggW + ggB;
    if (c.needs_input_grad(1)) {
      const Tensor p = E(ggI * gO) - gO_mean * ggI_mean;
      const Tensor q = E(ggI * xhat);
      const Tensor inner = xhat * (p - m * q * 3.0) + q * (gO - gO_mean) + m * (ggI - ggI_mean);
      d_x = times_gamma(-(inner * sigma * sigma)) + ggW * sigma * gO_proj;
    }
    if (has_w && c.needs_input_grad(2)) d_w = per_channel(ggI * sigma * gO_proj);
  } else {
    if (c.needs_input_grad(0)) d_gO = times_gamma(ggI * sigma) + xhat * ggW + ggB;
    if (c.needs_input_grad(1)) d_x = ggW * sigma * gO;
    if (has_w && c.needs_input_grad(2)) d_w = per_channel(ggI * gO * sigma);
  }
  return {d_gO, d_x, d_w, Tensor(), Tensor()};
}

// Samples: batch_norm_backward differentiated directly (double backward). Inputs g, x, then the
// weight when `affine`, then (eval) the running mean and variance (constants). In training the
// statistics are computed from x inside the call, as the forward computes them, so the finite
// differences see the same dependence on x that the analytic total derivative includes.
// Parity: the device sums each channel's M = N L values (sum g, sum g (x - mean)) in another
// order (chunk partials, each a block tree; the CPU sums in lanes), and the training statistics
// come from mean ops (the same): M roundings; plus the pow of the invstd the call computes (4): M + 4.
TensorList bnb_sample(const TensorList& in, bool training, bool affine) {
  const Tensor &g = in[0], &x = in[1];
  const Tensor w = affine ? in[2] : Tensor();
  const double eps = 1e-5;
  IntList red{0};
  for (int64_t d = 2; d < x.dim(); ++d) red.push_back(d);
  Tensor m, invstd;
  if (training) {
    m = mean(x, red, false);
    Tensor xm = x - mean(x, red, true);
    invstd = pow(mean(xm * xm, red, false) + eps, -0.5);
  } else {
    const size_t s = affine ? 3 : 2;
    m = in[s];
    invstd = pow(in[s + 1] + eps, -0.5);
  }
  auto [gx, gw, gb] = batch_norm_backward(g, x, w, m, invstd, training, eps);
  return {gx, gw, gb};
}
const OpSchema& kBatchNormBackward =
    define_op("batch_norm_backward")
        .save({0, 1, 2, 3, 4})
        .grad(batch_norm_backward_backward)
        .kernel(DeviceType::CPU, batch_norm_backward_cpu)
        .sample("train-NCL", {arg({3, 2, 2}), arg({3, 2, 2}), arg({2}, 0.5, 2)},
                [](const TensorList& x) { return bnb_sample(x, true, true); }, sums_of(6 + 4))
        .sample("train-NC-noaffine", {arg({4, 3}), arg({4, 3})},
                [](const TensorList& x) { return bnb_sample(x, true, false); }, sums_of(4 + 4))
        .sample("eval-NCL",
                {arg({3, 2, 2}), arg({3, 2, 2}), arg({2}, 0.5, 2), arg({2}, -0.5, 0.5).constant(),
                 arg({2}, 0.5, 2.0).constant()},
                [](const TensorList& x) { return bnb_sample(x, false, true); }, sums_of(6 + 4));

TensorList batch_norm_backward_op_call(const Tensor& g, const Tensor& x, const Tensor& w, const Tensor& mean,
                                       const Tensor& invstd, bool training, double eps) {
  return dispatch(kBatchNormBackward, {g, x, w, mean, invstd}, {{"training", training}, {"eps", eps}});
}

TensorList batch_norm_backward_fn(BackwardContext& c) {
  const bool has_w = saved(c, 3);
  TensorList r = batch_norm_backward_op_call(c.grad(0), c.input(0), has_w ? c.input(3) : Tensor(), c.output(1),
                                             c.output(2), c.attrs.get<bool>("training"), c.attrs.get<double>("eps"));
  // Gradients reaching the statistics outputs are ignored: they never leave batch_norm()
  // (batch_norm_backward's own backward returns none for them).
  TensorList grads{c.needs_input_grad(0) ? r[0] : Tensor(), Tensor(), Tensor(),
                   has_w && c.needs_input_grad(3) ? r[1] : Tensor(), c.needs_input_grad(4) ? r[2] : Tensor()};
  grads.resize(c.num_inputs());  // none for the batch counter (an i64 input, when given)
  return grads;
}
// Samples: inputs x, then weight (0.5, 2) and bias when `affine`, then the running mean and
// variance when `track` (constants, cloned by the call: a training call updates its copies in
// place, so every evaluation starts from the same statistics; training's output does not depend
// on them). Parity: the device sums each channel's M = N S values in another order (chunk
// partials, each a block tree; the CPU sums in lanes), for the statistics in training and for
// the weight and bias gradients in both modes (batch_norm_backward): M roundings; the affine
// transform is one contraction, covered by them.
// `counted`: with a fresh batch counter (the sixth input) on x's device as well.
TensorList bn_sample(const TensorList& in, bool training, bool affine, bool track, bool counted = false) {
  size_t i = 1;
  Tensor w, b, rm, rv, counter;
  if (affine) {
    w = in[i++];
    b = in[i++];
  }
  if (track) {
    rm = clone(in[i++]);
    rv = clone(in[i++]);
  }
  if (counted) counter = zeros({}, TensorOptions(DType::Int64).with_device(in[0].device()));
  return {batch_norm(in[0], rm, rv, w, b, training, 0.1, 1e-5, counter)};
}
SampleArg bn_running_mean(int64_t c) { return arg({c}, -0.5, 0.5).constant(); }
SampleArg bn_running_var(int64_t c) { return arg({c}, 0.5, 2.0).constant(); }
const OpSchema& kBatchNorm =
    define_op("batch_norm")
        .args({"input", "running_mean", "running_var", "weight", "bias", "num_batches_tracked"})
        .save({0, 3}, {1, 2})
        .grad(batch_norm_backward_fn)
        .backward_ignores_output_grads({1, 2})
        .kernel(DeviceType::CPU, batch_norm_cpu)
        .sample("train-affine-NC", {arg({6, 3}), arg({3}, 0.5, 2), arg({3}), bn_running_mean(3), bn_running_var(3)},
                [](const TensorList& x) { return bn_sample(x, true, true, true); }, sums_of(6))
        .sample("train-affine-NCHW",
                {arg({2, 3, 2, 2}), arg({3}, 0.5, 2), arg({3}), bn_running_mean(3), bn_running_var(3)},
                [](const TensorList& x) { return bn_sample(x, true, true, true); }, sums_of(8))
        .sample("train-affine-NCHW-counted",
                {arg({2, 3, 2, 2}), arg({3}, 0.5, 2), arg({3}), bn_running_mean(3), bn_running_var(3)},
                [](const TensorList& x) { return bn_sample(x, true, true, true, true); }, sums_of(8))
        .sample("train-noaffine-NCHW", {arg({2, 3, 2, 2}), bn_running_mean(3), bn_running_var(3)},
                [](const TensorList& x) { return bn_sample(x, true, false, true); }, sums_of(8))
        .sample("train-noaffine-NC-untracked", {arg({5, 2})},
                [](const TensorList& x) { return bn_sample(x, true, false, false); }, sums_of(5))
        .sample("eval-affine-NCHW",
                {arg({2, 3, 2, 2}), arg({3}, 0.5, 2), arg({3}), bn_running_mean(3), bn_running_var(3)},
                [](const TensorList& x) { return bn_sample(x, false, true, true); }, sums_of(8))
        .sample("eval-noaffine-NC", {arg({4, 3}), bn_running_mean(3), bn_running_var(3)},
                [](const TensorList& x) { return bn_sample(x, false, false, true); }, sums_of(4));

// ---- layer_norm ----
// inputs: x, weight, bias; attrs: normalized_shape, eps
TensorList layer_norm_cpu(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& w = call.inputs[1];
  const Tensor& b = call.inputs[2];
  const IntList ns = call.attrs.get<IntList>("normalized_shape");
  const double eps = call.attrs.get<double>("eps");
  const LayerNormRows lr = check_layer_norm_args(call.name(), x, w, b, ns, eps);
  const int64_t M = lr.M, rows = lr.rows;
  const IntList& stat_shape = lr.stat_shape;
  const DType sd = norm_stat_dtype(x.dtype());
  Tensor out = Tensor::empty(x.sizes(), TensorOptions(x.dtype()));
  Tensor mean_t = Tensor::empty(stat_shape, TensorOptions(sd)), rstd_t = Tensor::empty(stat_shape, TensorOptions(sd));
  const Tensor xc = contiguous_as(x, x.dtype());
  std::vector<double> mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
  visit_floating(x.dtype(), call.name(), [&]<typename T>() {
    using A = acc_t<T>;
    const Tensor wc = w.defined() ? contiguous_as(w, dtype_v<A>) : Tensor();
    const Tensor bc = b.defined() ? contiguous_as(b, dtype_v<A>) : Tensor();
    const A* pw = wc.defined() ? static_cast<const A*>(wc.data_ptr()) : nullptr;
    const A* pb = bc.defined() ? static_cast<const A*>(bc.data_ptr()) : nullptr;
    const T* px = static_cast<const T*>(xc.data_ptr());
    T* po = static_cast<T*>(out.data_ptr());
#pragma omp parallel for if (x.numel() >= cpu::kParallelGrain && rows > 1) schedule(static)
    for (int64_t r = 0; r < rows; ++r)
      fn::layer_norm_row<T>(px + r * M, pw, pb, M, eps, po + r * M, mean[static_cast<size_t>(r)],
                            rstd[static_cast<size_t>(r)]);
  });
  cpu::copy_into(mean_t, from_doubles(mean, stat_shape, DType::Float64));
  cpu::copy_into(rstd_t, from_doubles(rstd, stat_shape, DType::Float64));
  return {out, mean_t, rstd_t};
}

// True when t is known to be all zeros (a CPU tensor holding only zeros); the engine fills
// the gradient of an unused output with zeros, and skipping its terms saves passes over x.
bool known_zero(const Tensor& t) {
  if (!t.device().is_cpu()) return false;
  const Tensor d = contiguous_as(t, DType::Float64);
  const double* p = d.data_ptr<double>();
  for (int64_t i = 0; i < d.numel(); ++i)
    if (p[i] != 0.0) return false;
  return true;
}

// xhat = (x - mean) rstd, gy = g w:
//   dx = rstd (gy - E gy - xhat E[gy xhat]) + (g_mean - g_rstd rstd^2 xhat) / M
//   dw = sum over the leading dims of g xhat, db = sum of g.
// Computed in f32 for 16-bit x (the engine casts each gradient back to its input's dtype).
TensorList layer_norm_backward(BackwardContext& c) {
  const IntList ns = c.attrs.get<IntList>("normalized_shape");
  const Tensor x_in = c.input(0);
  const DType sd = norm_stat_dtype(x_in.dtype());
  const Tensor x = to_dtype(x_in, sd), g = to_dtype(c.grad(0), sd);
  const Tensor mu = c.output(1), rstd = c.output(2);
  const auto k = static_cast<int64_t>(ns.size());
  const int64_t lead = x.dim() - k;
  IntList norm_dims, lead_dims;
  for (int64_t d = 0; d < x.dim(); ++d) (d < lead ? lead_dims : norm_dims).push_back(d);
  const Tensor xhat = (x - mu) * rstd;
  auto sum_lead = [&](const Tensor& t) { return lead > 0 ? sum(t, lead_dims, false) : t; };

  Tensor dx, dw, db;
  if (c.needs_input_grad(0)) {
    const Tensor gy = saved(c, 1) ? g * to_dtype(c.input(1), sd) : g;
    dx = (gy - mean(gy, norm_dims, true) - xhat * mean(gy * xhat, norm_dims, true)) * rstd;
    const Tensor& g_mean = c.grad(1);
    const Tensor& g_rstd = c.grad(2);
    if (!known_zero(g_mean) || !known_zero(g_rstd)) {
      const auto M = static_cast<double>(numel_of(ns));
      dx = dx + (to_dtype(g_mean, sd) - to_dtype(g_rstd, sd) * rstd * rstd * xhat) / M;
    }
  }
  if (saved(c, 1) && c.needs_input_grad(1)) dw = sum_lead(g * xhat);
  if (c.needs_input_grad(2)) db = sum_lead(g);
  return {dx, dw, db};
}
// Samples: weight in (0.5, 2). Parity: the device walks each row in the CPU's order (one thread
// per row, the same functor) but may contract the M steps of the sum of squares into FMAs (M
// roundings of the f64 statistics, visible in f64 results only) and the two affine steps
// x scale + shift and y w + b (2): M + 2. The backward (written with ops) sums over M and over
// the rows in another order on the device, within the doubled bound of gradients.
const OpSchema& kLayerNorm =
    define_op("layer_norm")
        .args({"input", "weight", "bias"})
        .policy(AmpPolicy::FP32)
        .save({0, 1}, {1, 2})
        .grad(layer_norm_backward)
        .kernel(DeviceType::CPU, layer_norm_cpu)
        .sample("1-dim-affine", {arg({3, 4}), arg({4}, 0.5, 2), arg({4})},
                [](const TensorList& x) { return TensorList{layer_norm(x[0], {4}, x[1], x[2])}; }, sums_of(4 + 2))
        .sample("1-dim-noaffine", {arg({2, 3, 5})},
                [](const TensorList& x) { return TensorList{layer_norm(x[0], {5})}; }, sums_of(5 + 2))
        .sample("2-dims-affine", {arg({2, 3, 4}), arg({3, 4}, 0.5, 2), arg({3, 4})},
                [](const TensorList& x) { return TensorList{layer_norm(x[0], {3, 4}, x[1], x[2])}; },
                sums_of(12 + 2))
        // No leading dims: one row; the constant factor weights its outputs differently.
        .sample("2-dims-noaffine-no-lead", {arg({3, 4}), arg({3, 4}).constant()},
                [](const TensorList& x) { return TensorList{layer_norm(x[0], {3, 4}) * x[1]}; }, sums_of(12 + 2));

}  // namespace

Tensor batch_norm(const Tensor& x, Tensor running_mean, Tensor running_var, const Tensor& weight, const Tensor& bias,
                  bool training, double momentum, double eps, Tensor num_batches_tracked) {
  MT_CHECK(x.defined(), "batch_norm: input is an undefined tensor");
  TensorList in{x, running_mean, running_var, weight, bias};
  if (num_batches_tracked.defined()) in.push_back(num_batches_tracked);
  return dispatch(kBatchNorm, in, {{"training", training}, {"momentum", momentum}, {"eps", eps}})[0];
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                                                       const Tensor& save_mean, const Tensor& save_invstd,
                                                       bool training, double eps) {
  MT_CHECK(grad_out.defined() && x.defined(), "batch_norm_backward: grad_out and input must be defined");
  TensorList r = batch_norm_backward_op_call(grad_out, x, weight, save_mean, save_invstd, training, eps);
  return {r[0], r[1], r[2]};
}

Tensor layer_norm(const Tensor& x, IntList normalized_shape, const Tensor& weight, const Tensor& bias, double eps) {
  MT_CHECK(x.defined(), "layer_norm: input is an undefined tensor");
  return dispatch(kLayerNorm, {x, weight, bias}, {{"normalized_shape", normalized_shape}, {"eps", eps}})[0];
}

}  // namespace mixtape
