// tests/cuda_ops/test_reduce_gemm_parity.cpp — CUDA vs CPU for the reductions (sum, mean, max,
// amax, argmax) and the GEMMs (matmul, linear), per dtype, on fresh random inputs. Max-type
// reductions are exact (a selection, no arithmetic). Sums and GEMMs differ by summation order:
// the bound of cuda_test_util.h, 2 (n - 1) u(acc) sum|terms| + 2 u(storage) |result|, evaluated
// per output element from the CPU inputs in f64.
#include "core/profiler.h"
#include "cuda_test_util.h"

namespace mixtape {
namespace {
using namespace cuda_test;

// The accumulator the CPU's reduce_acc uses: f32 for 16-bit, f64 for f32/f64.
double reduce_acc_roundoff(DType dt) { return is_reduced_float(dt) ? std::ldexp(1.0, -24) : std::ldexp(1.0, -53); }

// Per-element bound for a sum over `dims` of x (as a CPU f64 tensor): 2 (n-1) u sum|x| + 2 u_s |s|.
Tensor sum_bound(const Tensor& x, const IntList& dims, bool keepdim, bool is_mean, DType out_dt) {
  const Tensor xd = to_dtype(x, DType::Float64);
  const Tensor abs_sum = sum(abs(xd), dims, keepdim);
  const double n = static_cast<double>(x.numel()) / static_cast<double>(std::max<int64_t>(abs_sum.numel(), 1));
  const Tensor s = is_mean ? mean(xd, dims, keepdim) : sum(xd, dims, keepdim);
  const double scale = is_mean ? 1.0 / n : 1.0;
  return abs_sum * (2 * (n - 1) * reduce_acc_roundoff(x.dtype()) * scale) +
         abs(s) * (2 * unit_roundoff(out_dt)) + 1e-300;
}

TEST(CudaReduceParity, SumAndMeanOverDims) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  for (DType dt : kFloatTypes) {
    Tensor x = random_input(rng, {6, 5, 130}, dt);
    Tensor xs = random_input(rng, {130, 5, 6}, dt).permute({2, 1, 0});  // strided (6, 5, 130)
    const Tensor xc = on_cuda(x), xsc = on_cuda(xs);
    const std::string t = short_name(dt);
    for (const IntList& dims : {IntList{}, IntList{2}, IntList{0}, IntList{0, 2}, IntList{-1, 1}}) {
      for (bool keepdim : {false, true}) {
        const std::string what = t + " dims " + shape_str(dims) + (keepdim ? " keepdim" : "");
        EXPECT_TRUE(within(sum(x, dims, keepdim), sum(xc, dims, keepdim), sum_bound(x, dims, keepdim, false, dt),
                           "sum " + what));
        EXPECT_TRUE(within(sum(xs, dims, keepdim), sum(xsc, dims, keepdim), sum_bound(xs, dims, keepdim, false, dt),
                           "sum strided " + what));
        EXPECT_TRUE(within(mean(x, dims, keepdim), mean(xc, dims, keepdim), sum_bound(x, dims, keepdim, true, dt),
                           "mean " + what));
      }
    }
    // sum(f16, dtype=f32) accumulates the 16-bit values as f32 and returns f32.
    if (is_reduced_float(dt)) {
      EXPECT_TRUE(within(sum(x, {2}, false, DType::Float32), sum(xc, {2}, false, DType::Float32),
                         sum_bound(x, {2}, false, false, DType::Float32), "sum dtype=f32 " + t));
    }
  }
  // Integer sums are exact (i64 accumulator).
  Tensor i = random_input(rng, {7, 300}, DType::Int32, 1, 1000);
  EXPECT_TRUE(exact(sum(i, {1}), sum(on_cuda(i), {1}), "sum i32"));
  EXPECT_TRUE(exact(sum(i), sum(on_cuda(i)), "sum i32 all"));
}

TEST(CudaReduceParity, MaxAmaxArgmaxAreExactWithNaNFirst) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64, DType::Int32, DType::Int64}) {
    // Few distinct values so ties are common (the first index must win on both backends).
    Tensor x = random_input(rng, {5, 4, 300}, dt, 1, 4);
    if (is_floating(dt)) x = to_dtype(to_dtype(to_dtype(x, DType::Float32) * 2.0, DType::Int32), dt);
    if (is_floating(dt)) {  // a few NaNs, two in one run
      set_element(x, 17, std::nan(""));
      set_element(x, 250, std::nan(""));
      set_element(x, 900 + 11, std::nan(""));
    }
    const Tensor xc = on_cuda(x);
    const std::string t = short_name(dt);
    for (int64_t d : {0, 1, 2, -1}) {
      auto [v, i] = max(x, d, false);
      auto [vc, ic] = max(xc, d, false);
      EXPECT_TRUE(exact(v, vc, "max values " + t + " dim " + std::to_string(d)));
      EXPECT_TRUE(exact(i, ic, "max indices " + t + " dim " + std::to_string(d)));
      EXPECT_TRUE(exact(argmax(x, d, true), argmax(xc, d, true), "argmax " + t + " dim " + std::to_string(d)));
      EXPECT_TRUE(exact(amax(x, d, true), amax(xc, d, true), "amax " + t + " dim " + std::to_string(d)));
    }
    EXPECT_TRUE(exact(argmax(x), argmax(xc), "argmax all " + t));
    EXPECT_TRUE(exact(amax(x, IntList{0, 2}), amax(xc, IntList{0, 2}), "amax dims {0,2} " + t));
  }
}

// Per-element GEMM bound: c k u(acc) (|A| @ |B|) + 2 u(storage) |C|, with c = 2 for the two
// round-to-nearest sums of cuda_test_util.h (f32 SGEMM, f64 DGEMM), and c = 8 for 16-bit
// operands on tensor cores, whose FP32 accumulation is not round-to-nearest throughout (measured
// truncation in the alignment of addends, Fasi et al., "Numerical behavior of NVIDIA tensor
// cores", PeerJ CS 2021: up to twice RN's unit roundoff per addition), with a further factor 2
// of margin for split-K partial sums.
double gemm_factor(DType dt) { return is_reduced_float(dt) ? 8.0 : 2.0; }
Tensor gemm_bound(const Tensor& a, const Tensor& b, const Tensor& c_cpu, DType dt) {
  const int64_t k = a.size(-1);
  const double u = dt == DType::Float64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  const Tensor aa = abs(to_dtype(a, DType::Float64)), ab = abs(to_dtype(b, DType::Float64));
  return matmul(aa, ab) * (gemm_factor(dt) * static_cast<double>(k) * u) +
         abs(to_dtype(c_cpu, DType::Float64)) * (2 * unit_roundoff(dt)) + 1e-300;
}

TEST(CudaGemmParity, MatmulShapesLayoutsAndDtypes) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  for (DType dt : kFloatTypes) {
    const std::string t = short_name(dt);
    struct Case {
      Tensor a, b;
      const char* what;
    };
    std::vector<Case> cases;
    cases.push_back({random_input(rng, {33, 70}, dt), random_input(rng, {70, 17}, dt), "2-D"});
    cases.push_back({random_input(rng, {70, 33}, dt).t(), random_input(rng, {17, 70}, dt).t(), "transposed"});
    cases.push_back({random_input(rng, {3, 9, 40}, dt), random_input(rng, {3, 40, 11}, dt), "batched"});
    cases.push_back({random_input(rng, {2, 3, 9, 40}, dt), random_input(rng, {40, 11}, dt), "broadcast b"});
    cases.push_back({random_input(rng, {4, 1, 9, 40}, dt), random_input(rng, {1, 3, 40, 11}, dt), "broadcast both"});
    cases.push_back({random_input(rng, {6, 40, 9}, dt).transpose(1, 2), random_input(rng, {6, 40, 5}, dt),
                     "batched transposed a"});
    for (const Case& c : cases) {
      const Tensor want = matmul(c.a, c.b);
      const Tensor got = matmul(on_cuda(c.a), on_cuda(c.b));
      EXPECT_TRUE(within(want, got, gemm_bound(c.a, c.b, want, dt), "matmul " + t + " " + c.what));
    }
  }
}

TEST(CudaGemmParity, LinearWithAndWithoutBias) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  for (DType dt : kFloatTypes) {
    const std::string t = short_name(dt);
    Tensor x = random_input(rng, {4, 5, 48}, dt), w = random_input(rng, {24, 48}, dt), b = random_input(rng, {24}, dt);
    // Bound: the GEMM bound of x2 @ w^T, plus |b| in the same sum (the bias is the first term).
    const Tensor x2 = x.reshape({20, 48});
    for (bool with_bias : {false, true}) {
      const Tensor bias = with_bias ? b : Tensor();
      const Tensor want = linear(x, w, bias), got = linear(on_cuda(x), on_cuda(w), with_bias ? on_cuda(b) : Tensor());
      Tensor bound = gemm_bound(x2, w.t(), want.reshape({20, 24}), dt).reshape({4, 5, 24});
      if (with_bias) bound = bound + abs(to_dtype(b, DType::Float64)) * (gemm_factor(dt) * 49 * std::ldexp(1.0, -24));
      EXPECT_TRUE(within(want, got, bound, "linear " + t + (with_bias ? " bias" : " no bias")));
    }
    // 1-D input and a transposed weight view.
    Tensor v = random_input(rng, {48}, dt), wt = random_input(rng, {48, 24}, dt).t();
    EXPECT_TRUE(within(linear(v, wt, b), linear(on_cuda(v), on_cuda(wt), on_cuda(b)),
                       gemm_bound(v.reshape({1, 48}), wt.t(), linear(v, wt, b).reshape({1, 24}), dt).reshape({24}) +
                           abs(to_dtype(b, DType::Float64)) * (gemm_factor(dt) * 49 * std::ldexp(1.0, -24)),
                       "linear 1-D " + t));
  }
}

// Backward of matmul/linear/sum on the device (their formulas are other ops), f64 gradcheck.
// A 16-bit linear with a bias is one bias copy and one GEMM that adds the bias in f32 and rounds
// once to the output (a 16-bit bias is exact in f32): 1 launch and 1 cuBLAS call, no f32 buffer
// and cast. Integer inputs make every product sum exact in any order, so the expected values
// are known independently: RNE(acc + bias), whose one rounding differs from rounding acc first
// wherever acc is not representable in the 16-bit type (most sums here are).
TEST(CudaGemmParity, SixteenBitLinearAddsTheBiasInTheGemmAndRoundsOnce) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  std::uniform_int_distribution<int> small(-16, 16), half_steps(-8, 8);
  const int64_t rows = 6, in = 16, out_f = 5;
  std::vector<double> xv(rows * in), wv(out_f * in), bv(out_f);
  for (double& v : xv) v = small(rng);
  for (double& v : wv) v = small(rng);
  for (double& v : bv) v = half_steps(rng) + 0.5;  // .5: a tie or an odd step after most sums
  std::vector<double> want(rows * out_f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out_f; ++o) {
      double acc = 0;
      for (int64_t k = 0; k < in; ++k) acc += xv[r * in + k] * wv[o * in + k];
      want[r * out_f + o] = acc + bv[o];  // exact in f32: |acc| <= 4096
    }
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    const Tensor x = tensor(xv, {rows, in}).to(dt), w = tensor(wv, {out_f, in}).to(dt), b = tensor(bv, {out_f}).to(dt);
    const Tensor expected = tensor(want, {rows, out_f}).to(DType::Float32).to(dt);  // the one rounding
    const Tensor xg = on_cuda(x), wg = on_cuda(w), bg = on_cuda(b);
    Tensor got;
    profiler::Report r;
    {
      profiler::Profile on;
      got = linear(xg, wg, bg);
      r = profiler::report();
    }
    EXPECT_TRUE(exact(expected, got, std::string("linear with bias ") + short_name(dt)));
    EXPECT_TRUE(exact(expected, linear(x, w, b), std::string("CPU linear with bias ") + short_name(dt)));
    if (!selfcheck()) {
      EXPECT_EQ(r.total_launches(), 1) << short_name(dt) << ": the bias copy, nothing else";
      EXPECT_EQ(r.total_library_calls(), 1) << short_name(dt);
    }
  }
}

TEST(CudaGemmParity, GradcheckLinearMatmulSumThroughCudaF64) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  Tensor x = random_input(rng, {2, 3, 4}, DType::Float64).requires_grad_();
  Tensor w = random_input(rng, {5, 4}, DType::Float64).requires_grad_();
  Tensor b = random_input(rng, {5}, DType::Float64).requires_grad_();
  Tensor m = random_input(rng, {5, 2}, DType::Float64).requires_grad_();
  auto fn = [](const TensorList& in) -> TensorList {
    const Device g = gpu();
    Tensor y = linear(in[0].to(g), in[1].to(g), in[2].to(g));  // (2, 3, 5)
    Tensor z = matmul(y, in[3].to(g));                          // (2, 3, 2)
    auto [mx, idx] = max(z, 1, false);
    return {(mean(z, {0}) + amax(z, int64_t{0}, false)).to(Device::CPU()), sum(mx).to(Device::CPU())};
  };
  auto r = autograd::gradcheck(fn, {x, w, b, m});
  EXPECT_TRUE(r.ok) << r.report;
}

}  // namespace
}  // namespace mixtape
