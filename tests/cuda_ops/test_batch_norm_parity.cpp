// tests/cuda_ops/test_batch_norm_parity.cpp — the CUDA batch_norm kernels (ops/cuda/batch_norm.cu:
// per-(channel, chunk) f64 partials combined in a fixed order, channel tensors read and written in
// their own dtype) against the CPU op, which is the reference: every x dtype with f32 and f16
// parameters, training and eval, with and without weight/bias/running statistics, shapes with
// one chunk and with several (the last one shorter), M = 2; bit-equal reruns; a large mean with a
// tiny variance; mixed dtypes and strided channel tensors; and the launches per call.
// Tolerances (cuda_test_util.h's notation; M values per channel, u64 = 2^-53):
//   f64 statistics and sums in another order: |d mean| <= 2 M u64 max|x| (Higham 4.4 over the
//     sums, divided by M), the variance's positive terms relative 2 M u64: stat_rel = 4 M u64;
//     sums of the backward <= 2 (M - 1) u64 sum|terms|, taken as 2 M u64 M max|term|. For f32
//     and 16-bit x the CPU sums in float partials of at most 32 terms flushed into f64
//     (docs/CPU.md "Reductions"), ~31 f32 roundings more: |d mean| + 32 u32 max|x - shift| <=
//     64 u32 max|x|, the variance + 40 u32 relative (stat_rel), the backward's sums + 34 u32 M
//     max|term| (a term g (x - shift) rounds twice more). Rounded to
//     a stored dtype (f32 outputs, 16-bit running statistics) one more rounding may differ:
//     2 u(that dtype) relative.
//   out = x scale + shift and grad_x = ka g + kb x + kd in acc_t, one contraction each (FMA on the
//     GPU): 64 u(acc) (x 10 for grad_x) absolute at values O(10), 2 u(storage) + 16 u(acc)
//     relative, plus what the f64 coefficients carry from the statistics (16 stat_rel O(10)).
//     grad_x's absolute part grows with its largest |ka g| + |kb x| + |kd| past 10 (M = 2 with
//     two close values: found on an H200, 1 ulp of terms of 1839 against a bound for 10).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>

#include "core/profiler.h"
#include "cuda_test_util.h"
#include "models/nn.h"
#if defined(MIXTAPE_WITH_CUDA)
#include "ops/cuda/batch_norm_kernels.h"
#endif

namespace mixtape {
namespace {
using namespace cuda_test;

constexpr double kU64 = 0x1p-53, kU32 = 0x1p-24;

struct Shape {
  IntList sizes;
  const char* why;
};
const Shape kShapes[] = {
    {{2, 3}, "M = 2"},
    {{3, 5, 7, 11}, "S = 77, not a divisor of the block; one chunk"},
    {{4099, 2}, "S = 1, M = 4099: 3 chunks, the last shorter"},
    {{5, 3, 37, 43}, "S = 1591 > the block, M = 7955: 4 chunks, the last shorter"},
};

int64_t values_per_channel(const IntList& s) {
  int64_t m = s[0];
  for (size_t d = 2; d < s.size(); ++d) m *= s[d];
  return m;
}

TensorList bn_call(const TensorList& in, bool training, double eps = 1e-5) {
  return dispatch(*find_op("batch_norm"), in, {{"training", training}, {"momentum", 0.1}, {"eps", eps}});
}
TensorList bn_backward_call(const TensorList& in, bool training) {
  return dispatch(*find_op("batch_norm_backward"), in, {{"training", training}, {"eps", 1e-5}});
}
Tensor on_cuda_or_none(const Tensor& t) { return t.defined() ? on_cuda(t) : Tensor(); }

// The largest |ka g| + |kb x| + |kd| over the elements of grad_x = ka g + kb x + kd (per channel, from
// the CPU's statistics and sums; kb = kd = 0 in eval): the size of the values the tolerance's
// "O(10)" stands for. Two close values of a channel (M = 2) give a tiny variance, so a large invstd,
// large coefficients and terms that cancel: there the tolerance grows with them.
double grad_x_term_bound(const Tensor& x, const Tensor& gy, const Tensor& w, const Tensor& mean, const Tensor& invstd,
                         const Tensor& sum_gxhat, const Tensor& sum_g, bool training) {
  const int64_t C = x.size(1), n = x.numel(), S = n / (x.size(0) * C), M = n / C;
  const Tensor xc = x.contiguous(), gc = gy.contiguous();
  double bound = 0;
  for (int64_t c = 0; c < C; ++c) {
    const double is = get_element(invstd, c), ka = (w.defined() ? get_element(w, c) : 1.0) * is;
    const double kb = training ? -ka * is * get_element(sum_gxhat, c) / double(M) : 0.0;
    const double kd = training ? -ka * get_element(sum_g, c) / double(M) - kb * get_element(mean, c) : 0.0;
    for (int64_t i = c * S; i < n; i += C * S) {
      for (int64_t s = i; s < i + S; ++s) {
        bound = std::max(bound, std::fabs(ka * get_element(gc, s)) + std::fabs(kb * get_element(xc, s)) + std::fabs(kd));
      }
    }
  }
  return bound;
}
Tensor clone_or_none(const Tensor& t) { return t.defined() ? t.clone() : Tensor(); }

#if defined(MIXTAPE_WITH_CUDA)
// The shapes above cover what they say: the partition is a function of the shape only.
TEST(CudaBatchNorm, ShapesCoverOneAndSeveralChunks) {
  EXPECT_EQ(cuda::bn_partition({2, 3, 1}).chunks, 1);
  EXPECT_EQ(cuda::bn_partition({3, 5, 77}).chunks, 1);
  const cuda::BnPartition a = cuda::bn_partition({4099, 2, 1});
  EXPECT_EQ(a.chunks, 3);
  EXPECT_LT((a.chunks - 1) * a.len, 4099);
  EXPECT_NE(a.chunks * a.len, 4099);
  const cuda::BnPartition b = cuda::bn_partition({5, 3, 37 * 43});
  EXPECT_EQ(b.chunks, 4);
  EXPECT_NE(b.chunks * b.len, 7955);
  // ResNet-20 at batch 128: 16 channels of 128 x 32 x 32 values get 64 chunks (1024 blocks).
  EXPECT_EQ(cuda::bn_partition({128, 16, 1024}).chunks, 64);
}
#endif

TEST(CudaBatchNorm, ParityEveryDtypeParameterDtypeModeAndShape) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  struct Mode {
    bool training, affine, track;
  };
  const Mode modes[] = {{true, true, true},  {true, true, false}, {true, false, true},
                        {true, false, false}, {false, true, true}, {false, false, true}};
  for (DType dt : kFloatTypes) {
    std::vector<DType> pds{DType::Float32, DType::Float16};
    if (dt == DType::Float64) pds.push_back(DType::Float64);
    const DType sd = dt == DType::Float64 ? DType::Float64 : DType::Float32;
    const double ua = acc_roundoff(dt), us = unit_roundoff(dt);
    for (DType pd : pds) {
      for (const Shape& shape : kShapes) {
        const int64_t C = shape.sizes[1], M = values_per_channel(shape.sizes);
        const double stat_rel = 4 * M * kU64 + (dt == DType::Float64 ? 0.0 : 40 * kU32);
        const double mean_atol = 2 * M * kU64 * 3.0 + (dt == DType::Float64 ? 0.0 : 64 * kU32 * 3.0);
        const Tensor x = random_input(rng, shape.sizes, dt, 0.1, 3.0);
        const Tensor w = random_input(rng, {C}, pd, 0.25, 2.0), b = random_input(rng, {C}, pd);
        for (const Mode& m : modes) {
          const std::string what = std::string(short_name(dt)) + " x, " + short_name(pd) + " parameters, " +
                                   shape.why + (m.training ? ", training" : ", eval") +
                                   (m.affine ? ", affine" : "") + (m.track ? ", running stats" : "");
          SCOPED_TRACE(what);
          const Tensor W = m.affine ? w : Tensor(), B = m.affine ? b : Tensor();
          Tensor rm, rv;
          if (m.track) {
            rm = random_input(rng, {C}, pd);
            rv = random_input(rng, {C}, pd, 0.5, 2.0, true);
          }
          Tensor rm_c = clone_or_none(rm), rv_c = clone_or_none(rv);
          Tensor rm_g = on_cuda_or_none(rm), rv_g = on_cuda_or_none(rv);
          const TensorList c = bn_call({x, rm_c, rv_c, W, B}, m.training);
          const TensorList g =
              bn_call({on_cuda(x), rm_g, rv_g, on_cuda_or_none(W), on_cuda_or_none(B)}, m.training);
          EXPECT_TRUE(close(c[0], g[0], 64 * ua + 16 * stat_rel * 10, 2 * us + 16 * ua, "out"));
          EXPECT_TRUE(close(c[1], g[1], mean_atol, 2 * unit_roundoff(sd), "save_mean"));
          EXPECT_TRUE(close(c[2], g[2], 0.0, 2 * unit_roundoff(sd) + stat_rel, "save_invstd"));
          if (m.track) {
            EXPECT_EQ(on_cpu(rm_g).dtype(), pd);
            EXPECT_TRUE(close(rm_c, rm_g, mean_atol, 2 * unit_roundoff(pd), "running_mean"));
            EXPECT_TRUE(close(rv_c, rv_g, 0.0, 2 * unit_roundoff(pd) + stat_rel, "running_var"));
          }

          // The backward from the CPU's statistics on both devices (its own inputs).
          const Tensor gy = random_input(rng, x.sizes(), dt);
          const TensorList bc = bn_backward_call({gy, x, W, c[1], c[2]}, m.training);
          const TensorList bg = bn_backward_call(
              {on_cuda(gy), on_cuda(x), on_cuda_or_none(W), on_cuda(c[1]), on_cuda(c[2])}, m.training);
          const double terms = grad_x_term_bound(x, gy, W, c[1], c[2], bc[1], bc[2], m.training);
          const double gx_atol = (640 * ua + 16 * stat_rel * 10) * std::max(1.0, terms / 10);
          EXPECT_TRUE(close(bc[0], bg[0], gx_atol, 2 * us + 16 * ua, "grad_x"));
          // |terms| <= 2 (g) and 2 * 6 * invstd (<= 1 / sqrt(min var), var >= ~0.3 here) <= 24.
          const double sum_atol = (2 * M * kU64 + (dt == DType::Float64 ? 0.0 : 34 * kU32)) * M * 24.0 + 1e-300;
          EXPECT_TRUE(close(bc[1], bg[1], sum_atol, 2 * unit_roundoff(sd), "sum_gxhat"));
          EXPECT_TRUE(close(bc[2], bg[2], sum_atol, 2 * unit_roundoff(sd), "sum_g"));
        }
      }
    }
  }
}

// Weight, bias and running statistics each in another dtype and the running statistics strided
// views: read in place and written back in place, the elements between them untouched.
TEST(CudaBatchNorm, MixedDtypesAndStridedChannelTensors) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  const int64_t C = 6;
  const Tensor x = random_input(rng, {4, C, 5, 3}, DType::Float16, 0.1, 3.0);
  const Tensor w_base = random_input(rng, {2 * C}, DType::BFloat16, 0.25, 2.0);
  const Tensor w = slice(w_base, 0, 0, 2 * C, 2), w_g = slice(on_cuda(w_base), 0, 0, 2 * C, 2);
  const Tensor b = random_input(rng, {C}, DType::Float64);
  const Tensor rm_base = random_input(rng, {3 * C}, DType::Float16);
  const Tensor rv_base = random_input(rng, {2 * C}, DType::Float32, 0.5, 2.0, true);
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "eval");
    Tensor rm_bc = rm_base.clone(), rv_bc = rv_base.clone();
    Tensor rm_bg = on_cuda(rm_base), rv_bg = on_cuda(rv_base);
    auto rm_of = [&](const Tensor& base) { return slice(base, 0, 1, 3 * C, 3); };
    auto rv_of = [&](const Tensor& base) { return slice(base, 0, 0, 2 * C, 2); };
    const TensorList c = bn_call({x, rm_of(rm_bc), rv_of(rv_bc), w, b}, training);
    const TensorList g = bn_call({on_cuda(x), rm_of(rm_bg), rv_of(rv_bg), w_g, on_cuda(b)}, training);
    const double stat_rel = 4 * 60 * kU64 + 40 * kU32;  // f16 x: the CPU's float partials
    EXPECT_TRUE(close(c[0], g[0], 64 * 0x1p-24 + 16 * stat_rel * 10, 2 * 0x1p-11 + 16 * 0x1p-24, "out"));
    EXPECT_TRUE(close(c[1], g[1], 64 * kU32 * 3.0, 2 * 0x1p-24, "save_mean"));
    EXPECT_TRUE(close(c[2], g[2], 0.0, 2 * 0x1p-24 + stat_rel, "save_invstd"));
    // The whole bases: the strided elements updated alike, the others bit-equal to before.
    EXPECT_TRUE(close(rm_bc, rm_bg, 64 * kU32 * 3.0, 2 * 0x1p-11, "running_mean base"));
    EXPECT_TRUE(close(rv_bc, rv_bg, 0.0, 2 * 0x1p-24 + stat_rel, "running_var base"));
    const Tensor rm_after = on_cpu(rm_bg);
    for (int64_t i = 0; i < 3 * C; i += 3) {  // elements 0 and 2 of each triple: outside the view
      EXPECT_EQ(get_element(rm_after, i), get_element(rm_base, i)) << "running_mean base [" << i << "]";
      EXPECT_EQ(get_element(rm_after, i + 2), get_element(rm_base, i + 2)) << "running_mean base [" << i + 2 << "]";
    }
    const Tensor rv_after = on_cpu(rv_bg);
    for (int64_t i = 1; i < 2 * C; i += 2)
      EXPECT_EQ(get_element(rv_after, i), get_element(rv_base, i)) << "running_var base [" << i << "]";
  }
}

// The partition and every order depend on the shape only (the emulator also shuffles the order
// in which a block's threads run at every launch): two runs give the same bits.
TEST(CudaBatchNorm, TwoRunsAreBitEqual) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  for (DType dt : {DType::Float32, DType::Float16}) {
    SCOPED_TRACE(short_name(dt));
    const Tensor x = on_cuda(random_input(rng, {6, 4, 29, 31}, dt, 0.1, 3.0));  // M = 5394: 3 chunks
    const Tensor gy = on_cuda(random_input(rng, x.sizes(), dt));
    const Tensor w = on_cuda(random_input(rng, {4}, DType::Float32, 0.25, 2.0));
    const Tensor b = on_cuda(random_input(rng, {4}, DType::Float32));
    const Tensor rm0 = random_input(rng, {4}, DType::Float32), rv0 = random_input(rng, {4}, DType::Float32, 0.5, 2, true);
    TensorList runs[2];
    for (TensorList& r : runs) {
      Tensor rm = on_cuda(rm0), rv = on_cuda(rv0);
      const TensorList f = bn_call({x, rm, rv, w, b}, true);
      const TensorList bw = bn_backward_call({gy, x, w, f[1], f[2]}, true);
      r = {f[0], f[1], f[2], rm, rv, bw[0], bw[1], bw[2]};
    }
    const char* names[] = {"out", "save_mean", "save_invstd", "running_mean", "running_var", "grad_x", "sum_gxhat",
                           "sum_g"};
    for (size_t i = 0; i < runs[0].size(); ++i) EXPECT_TRUE(exact(on_cpu(runs[0][i]), runs[1][i], names[i]));
  }
}

// x = 1e4 + 1e-3 noise in f32: E x^2 - (E x)^2 would lose every digit of the variance (x^2 ~ 1e8
// summed in f64 carries absolute errors ~1e-5 against a variance ~1e-6); chunk sums, squared
// deviations from each chunk's mean and the exact combination keep it as the CPU's two passes
// do. eps = 0 so the variance alone decides invstd.
TEST(CudaBatchNorm, LargeMeanTinyVarianceKeepsItsDigits) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  std::uniform_real_distribution<double> noise(-1.0, 1.0);
  const IntList shape{8, 3, 33, 31};  // M = 8184: 4 chunks
  Tensor x = Tensor::empty(shape, TensorOptions(DType::Float32));
  for (int64_t i = 0; i < x.numel(); ++i) set_element(x, i, static_cast<double>(static_cast<float>(1e4 + 1e-3 * noise(rng))));
  Tensor rm_c = zeros({3}), rv_c = ones({3});
  Tensor rm_g = on_cuda(rm_c), rv_g = on_cuda(rv_c);
  const TensorList c = bn_call({x, rm_c, rv_c, Tensor(), Tensor()}, true, 0.0);
  const TensorList g = bn_call({on_cuda(x), rm_g, rv_g, Tensor(), Tensor()}, true, 0.0);
  const double stat_rel = 4 * 8184 * kU64;
  // The variance is that of the f32 values (spaced 2^-10 apart near 1e4), ~5e-7: invstd ~1400.
  for (double v : c[2].to_vector<double>()) EXPECT_GT(v, 300.0);
  EXPECT_TRUE(close(c[1], g[1], 0.0, 2 * 0x1p-24, "save_mean"));
  EXPECT_TRUE(close(c[2], g[2], 0.0, 2 * 0x1p-24 + stat_rel, "save_invstd"));
  EXPECT_TRUE(close(rv_c, rv_g, 0.0, 2 * 0x1p-24 + stat_rel, "running_var"));
  // out = (x - mean) invstd: x scale ~1.4e7 and shift cancel to O(1) in f32, so the absolute
  // error is a few ulps of 1.4e7 (2 ulp of scale and of shift: 2^-24 (4 * 1.4e7)).
  EXPECT_TRUE(close(c[0], g[0], 4 * 1.5e7 * 0x1p-24 * 2, 0.0, "out"));
}

// Launches per call, counted by the profiler: forward training 3 (partials, finalize, affine),
// eval 2, backward 3, one more to cast a grad_out of another dtype or to copy a strided x; and
// nn::BatchNorm2d's training forward adds none for its batch counter.
TEST(CudaBatchNorm, LaunchesPerCall) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "the CPU standing in for the device launches no kernels";
  std::mt19937_64 rng(fresh_seed());
  const Tensor x = on_cuda(random_input(rng, {4, 3, 5, 5}, DType::Float32));
  const Tensor x16 = on_cuda(random_input(rng, {4, 3, 5, 5}, DType::Float16));
  const Tensor w = on_cuda(random_input(rng, {3}, DType::Float32, 0.5, 2.0)), b = on_cuda(random_input(rng, {3}, DType::Float32));
  Tensor rm = on_cuda(zeros({3})), rv = on_cuda(ones({3}));
  Tensor counter = on_cuda(zeros({}, TensorOptions(DType::Int64)));
  auto launches = [](const std::function<void()>& fn) {
    profiler::Profile on;
    fn();
    return profiler::report().total_launches();
  };
  TensorList f;
  EXPECT_EQ(launches([&] { f = bn_call({x, rm, rv, w, b, counter}, true); }), 3) << "training, counted";
  EXPECT_EQ(launches([&] { bn_call({x16, rm, rv, w, b}, true); }), 3) << "training, f16 x, f32 parameters";
  EXPECT_EQ(launches([&] { bn_call({x, Tensor(), Tensor(), Tensor(), Tensor()}, true); }), 3) << "training, bare";
  EXPECT_EQ(launches([&] { bn_call({x, rm, rv, w, b}, false); }), 2) << "eval";
  EXPECT_EQ(launches([&] { bn_call({x.transpose(2, 3), rm, rv, w, b}, true); }), 4) << "strided x: one copy";
  const Tensor gy = on_cuda(random_input(rng, x.sizes(), DType::Float32));
  EXPECT_EQ(launches([&] { bn_backward_call({gy, x, w, f[1], f[2]}, true); }), 3) << "backward";
  EXPECT_EQ(launches([&] { bn_backward_call({gy, x, w, f[1], f[2]}, false); }), 3) << "backward, eval";
  const Tensor gy16 = gy.to(DType::Float16);
  EXPECT_EQ(launches([&] { bn_backward_call({gy16, x, w, f[1], f[2]}, true); }), 4)
      << "backward, grad_out cast to x's dtype";
  EXPECT_EQ(counter.item<int64_t>(), 1);

  nn::BatchNorm2d bn(3);
  bn.to(gpu());
  const uint32_t version = bn.num_batches_tracked.version();
  EXPECT_EQ(launches([&] { bn(x); }), 3) << "nn::BatchNorm2d training forward, batch counter included";
  EXPECT_EQ(launches([&] { bn(x); }), 3);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);
  EXPECT_EQ(bn.num_batches_tracked.version(), version + 2);
  bn.eval();
  EXPECT_EQ(launches([&] { bn(x); }), 2) << "nn::BatchNorm2d eval forward";
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);
}

// Backward through autograd launches batch_norm_backward's 3 kernels and nothing else: the
// statistics outputs receive no gradient, and their zeros are not materialised (the backward
// never reads them: OpSchema::backward_ignores_output_grads). The gradients are the ones the
// backward op gives when called directly, bit for bit.
TEST(CudaBatchNorm, BackwardThroughAutogradLaunchesNoZeroFillsForTheStatistics) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "the CPU standing in for the device launches no kernels";
  std::mt19937_64 rng(fresh_seed());
  Tensor x = on_cuda(random_input(rng, {4, 3, 5, 5}, DType::Float32)).requires_grad_();
  Tensor w = on_cuda(random_input(rng, {3}, DType::Float32, 0.5, 2.0)).requires_grad_();
  Tensor b = on_cuda(random_input(rng, {3}, DType::Float32)).requires_grad_();
  Tensor rm = on_cuda(zeros({3})), rv = on_cuda(ones({3}));
  const Tensor gy = on_cuda(random_input(rng, x.sizes(), DType::Float32));
  const TensorList f = bn_call({x, rm, rv, w, b}, true);
  int64_t launches = 0, fills = 0;
  {
    profiler::Profile on;
    f[0].backward(gy);
    const profiler::Report r = profiler::report();
    launches = r.total_launches();
    for (const profiler::OpRecord& op : r.ops) fills += op.op == "fill_" ? op.calls : 0;
  }
  EXPECT_EQ(fills, 0) << "zeros materialised for the statistics' gradients";
  EXPECT_EQ(launches, 3) << "batch_norm_backward's partials, finalize and grad_input";
  autograd::NoGradGuard no_grad;
  const TensorList direct = bn_backward_call({gy, x.detach(), w.detach(), f[1].detach(), f[2].detach()}, true);
  EXPECT_TRUE(exact(on_cpu(direct[0]), x.grad(), "grad_input"));
  EXPECT_TRUE(exact(on_cpu(direct[1]), w.grad(), "grad_weight"));
  EXPECT_TRUE(exact(on_cpu(direct[2]), b.grad(), "grad_bias"));
}

// The batch counter on the device: counted by a training call only, from whatever it holds.
TEST(CudaBatchNorm, BatchCounterCountsTrainingCallsOnTheDevice) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  const Tensor x = on_cuda(random_input(rng, {4, 3, 2, 2}, DType::Float16));
  Tensor rm = on_cuda(zeros({3})), rv = on_cuda(ones({3}));
  Tensor counter = on_cuda(full({}, 41, TensorOptions(DType::Int64)));
  bn_call({x, rm, rv, Tensor(), Tensor(), counter}, true);
  EXPECT_EQ(counter.item<int64_t>(), 42);
  bn_call({x, rm, rv, Tensor(), Tensor(), counter}, false);
  EXPECT_EQ(counter.item<int64_t>(), 42) << "eval does not count";
  bn_call({x, Tensor(), Tensor(), Tensor(), Tensor(), counter}, true);
  EXPECT_EQ(counter.item<int64_t>(), 43) << "a training call counts, running statistics or not";
  if (!selfcheck()) {
    Tensor host_counter = zeros({}, TensorOptions(DType::Int64));
    bool refused = false;
    try {
      bn_call({x, rm, rv, Tensor(), Tensor(), host_counter}, true);
    } catch (const std::exception& e) {
      refused = std::string(e.what()).find("same device") != std::string::npos;
      EXPECT_TRUE(refused) << e.what();
    }
    EXPECT_TRUE(refused) << "a host counter with a device x is refused, not written";
    EXPECT_EQ(host_counter.item<int64_t>(), 0);
  }
}

}  // namespace
}  // namespace mixtape
