// tests/cuda_ops/test_pointwise_parity.cpp — CUDA vs CPU for every pointwise, activation, cast and
// creation op, per dtype, on fresh random inputs (seed printed), including broadcast, strided
// (transposed) and wrapped-number operands. Tolerances from cuda_test_util.h: exact where both
// backends perform the same single IEEE operation; otherwise the transcendental/FMA bound.
// Every case skips (with the reason) when no GPU is usable.
// Why these unary and binary cases are not derived from the ops' samples
// (tests/cuda_ops/test_sample_parity.cpp runs every op's samples, these ops' included): each is
// held to a tighter bound than a sample can declare, on inputs no sample has. (eq is derived: its
// "some-equal" sample's bool outputs are compared exactly, broadcast and signed zeros included.)
//   - 17 are bit-exact (k = 0: neg, abs, sign, relu, pow 2/3/-1, leaky_relu, clamp, clamp_lo, add,
//     sub, mul, div, relu_grad, leaky_relu_grad, clamp_grad); a sample's parity bound on floating
//     outputs is never exact (parity_roundings 0 still allows 2 u(storage), and several ops' r = 0
//     samples, sums among them, need that).
//   - The other 11 allow k ulp of the compute type; a sample's r roundings allow 16 r u(acc) in
//     FP32 and FP64 but 64 r u(acc) in FP16 and BF16 (its tensor-core factor 4), so no one r is as
//     tight as k in every dtype (r = k/4 would be 4x tighter than k in FP32: a new claim).
//   - The inputs: 37x65 and transposed 3-D views, values up to 4 (0.05 up for log, sqrt and the
//     fractional powers), pow exponents 3, 0.5, -1 and 1.7 (own code paths); the samples are a
//     few elements in (-1, 1), dense but for relu's and add's.
// Deriving them needs a bit-exact parity check and a per-dtype budget in SampleChecks
// (core/op_sample.h).
#include <functional>

#include "core/profiler.h"
#include "cuda_test_util.h"

namespace mixtape {
namespace {
using namespace cuda_test;

// The transcendental/FMA bound of cuda_test_util.h with k ulp of the compute type.
::testing::AssertionResult approx(const Tensor& cpu, const Tensor& cuda, int k, const std::string& what) {
  const DType dt = cpu.dtype();
  const double rtol = 2 * unit_roundoff(dt) + 16 * k * acc_roundoff(dt);
  const double atol = 16 * k * acc_roundoff(dt) + (is_reduced_float(dt) ? 2 * unit_roundoff(dt) * 1e-3 : 0.0);
  return close(cpu, cuda, atol, rtol, what);
}

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> fn;
  int k;          // 0: exact; else ulp budget of the compute type (cuda_test_util.h)
  bool positive;  // inputs > 0 (log, sqrt, fractional pow)
};

std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, 0, false},
      {"abs", [](const Tensor& x) { return abs(x); }, 0, false},
      {"sign", [](const Tensor& x) { return sign(x); }, 0, false},
      {"relu", [](const Tensor& x) { return relu(x); }, 0, false},
      {"exp", [](const Tensor& x) { return exp(x); }, 1, false},
      {"log", [](const Tensor& x) { return log(x); }, 1, true},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, 1, true},  // sqrt is correctly rounded on both; k=1 margin
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, 2, false},
      {"tanh", [](const Tensor& x) { return tanh(x); }, 1, false},
      {"pow2", [](const Tensor& x) { return pow(x, 2.0); }, 0, false},
      {"pow3", [](const Tensor& x) { return pow(x, 3.0); }, 0, false},
      {"pow_half", [](const Tensor& x) { return pow(x, 0.5); }, 1, true},
      {"pow_neg1", [](const Tensor& x) { return pow(x, -1.0); }, 0, false},
      {"pow_1_7", [](const Tensor& x) { return pow(x, 1.7); }, 2, true},
      {"gelu", [](const Tensor& x) { return gelu(x); }, 3, false},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, 4, false},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.1); }, 0, false},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.5, 1.0); }, 0, false},
      {"clamp_lo", [](const Tensor& x) { return clamp(x, 0.3, std::nullopt); }, 0, false},
  };
}

TEST(CudaPointwiseParity, UnaryOpsEveryFloatDtype) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  for (const UnaryCase& c : unary_cases()) {
    for (DType dt : kFloatTypes) {
      // Dense, and a transposed (strided) view of a 3-D tensor.
      Tensor x = random_input(rng, {37, 65}, dt, 0.05, 4.0, c.positive);
      Tensor xt = random_input(rng, {6, 9, 13}, dt, 0.05, 4.0, c.positive).transpose(0, 2);
      for (const Tensor& in : {x, xt}) {
        const Tensor want = c.fn(in), got = c.fn(on_cuda(in));
        const std::string what = std::string(c.name) + " " + short_name(dt) + " " + shape_str(in.sizes());
        if (c.k == 0)
          EXPECT_TRUE(exact(want, got, what));
        else
          EXPECT_TRUE(approx(want, got, c.k, what));
      }
    }
  }
}

TEST(CudaPointwiseParity, IntegerUnaryOps) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  for (DType dt : {DType::Int32, DType::Int64, DType::UInt8}) {
    Tensor x = random_input(rng, {5, 33}, dt, 1, 100);
    EXPECT_TRUE(exact(abs(x), abs(on_cuda(x)), std::string("abs ") + short_name(dt)));
    EXPECT_TRUE(exact(sign(x), sign(on_cuda(x)), std::string("sign ") + short_name(dt)));
    EXPECT_TRUE(exact(clamp(x, 10, 60), clamp(on_cuda(x), 10, 60), std::string("clamp ") + short_name(dt)));
    if (dt != DType::UInt8) {
      EXPECT_TRUE(exact(neg(x), neg(on_cuda(x)), std::string("neg ") + short_name(dt)));
    }
    // exp of an integer computes in f32, as the CPU.
    EXPECT_TRUE(approx(exp(x * 0.0 + 1.0), exp(on_cuda(x) * 0.0 + 1.0), 1, "exp(int)"));
  }
}

struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> fn;
  int k;
};

TEST(CudaPointwiseParity, BinaryOpsBroadcastStridedAndMixed) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  const std::vector<BinaryCase> cases = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, 0},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, 0},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, 0},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, 0},
      {"relu_grad", [](const Tensor& a, const Tensor& b) { return relu_grad(a, b); }, 0},
      {"gelu_grad", [](const Tensor& a, const Tensor& b) { return gelu_grad(a, b, false); }, 6},
      {"gelu_grad_tanh", [](const Tensor& a, const Tensor& b) { return gelu_grad(a, b, true); }, 8},
      {"leaky_relu_grad", [](const Tensor& a, const Tensor& b) { return leaky_relu_grad(a, b, 0.2); }, 0},
      {"clamp_grad", [](const Tensor& a, const Tensor& b) { return clamp_grad(a, b, -0.5, 0.7); }, 0},
  };
  for (const BinaryCase& c : cases) {
    for (DType dt : kFloatTypes) {
      Tensor a = random_input(rng, {4, 1, 29}, dt);
      Tensor b = random_input(rng, {7, 29}, dt);                                   // broadcast
      Tensor at = random_input(rng, {29, 7}, dt).t();                              // strided (7, 29)
      Tensor same = random_input(rng, {7, 29}, dt);
      const std::string tag = std::string(c.name) + " " + short_name(dt);
      auto check = [&](const Tensor& x, const Tensor& y, const char* layout) {
        const Tensor want = c.fn(x, y), got = c.fn(on_cuda(x), on_cuda(y));
        if (c.k == 0)
          EXPECT_TRUE(exact(want, got, tag + " " + layout));
        else
          EXPECT_TRUE(approx(want, got, c.k, tag + " " + layout));
      };
      check(a, b, "broadcast");
      check(at, same, "strided");
      check(same, same, "aliased");  // x - x = 0
    }
  }
  // Mixed dtypes promote as on the CPU (f16 + f32 -> f32, bf16 * f16 -> f32, int + f16 -> f16).
  Tensor h = random_input(rng, {3, 17}, DType::Float16), f = random_input(rng, {3, 17}, DType::Float32);
  Tensor bf = random_input(rng, {3, 17}, DType::BFloat16), i = random_input(rng, {3, 17}, DType::Int32, 1, 9);
  EXPECT_TRUE(exact(add(h, f), add(on_cuda(h), on_cuda(f)), "f16 + f32"));
  EXPECT_TRUE(exact(mul(bf, h), mul(on_cuda(bf), on_cuda(h)), "bf16 * f16"));
  EXPECT_TRUE(exact(add(i, h), add(on_cuda(i), on_cuda(h)), "i32 + f16"));
  EXPECT_TRUE(exact(div(i, i), div(on_cuda(i), on_cuda(i)), "i32 / i32 -> f32"));
  EXPECT_TRUE(exact(add(i, i), add(on_cuda(i), on_cuda(i)), "i32 + i32"));
}

TEST(CudaPointwiseParity, WrappedNumbersStayInTheComputeType) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  for (DType dt : kFloatTypes) {
    Tensor x = random_input(rng, {11, 13}, dt);
    Tensor xc = on_cuda(x);
    const std::string t = short_name(dt);
    // 0.1 is not a 16-bit number: f16 * 0.1 multiplies by 0.1f on both backends.
    EXPECT_TRUE(exact(x * 0.1, xc * 0.1, t + " x * 0.1"));
    EXPECT_TRUE(exact(0.1 * x, 0.1 * xc, t + " 0.1 * x"));
    EXPECT_TRUE(exact(1.0 - x, 1.0 - xc, t + " 1 - x"));
    EXPECT_TRUE(exact(x / 3.0, xc / 3.0, t + " x / 3"));
    EXPECT_TRUE(exact(3.0 / x, 3.0 / xc, t + " 3 / x"));
    EXPECT_TRUE(exact(x + 1e-3, xc + 1e-3, t + " x + 1e-3"));
  }
}

TEST(CudaPointwiseParity, WhereCastsCopiesAndFills) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  const DType all[] = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64,
                       DType::Int32,   DType::Int64,   DType::UInt8,    DType::Bool};
  for (DType from : all) {
    Tensor x = random_input(rng, {9, 21}, from, 0.3, 300.0);
    if (from == DType::UInt8) x = random_input(rng, {9, 21}, from, 1, 250);
    for (DType to : all) {
      if (is_floating(from) && !is_floating(to) && to != DType::Bool && to != DType::Int64 && to != DType::Int32)
        continue;  // float -> u8 of negative values is undefined behaviour in C++ (both backends)
      EXPECT_TRUE(exact(to_dtype(x, to), to_dtype(on_cuda(x), to),
                        std::string("to_dtype ") + short_name(from) + " -> " + short_name(to)));
    }
    // clone of a strided view; copy_ with broadcast into a strided destination.
    Tensor v = x.t();
    EXPECT_TRUE(exact(clone(v), clone(on_cuda(v)), std::string("clone ") + short_name(from)));
  }
  for (DType dt : kFloatTypes) {
    Tensor cond = random_input(rng, {6, 1, 10}, DType::Bool);
    Tensor a = random_input(rng, {5, 10}, dt), b = random_input(rng, {6, 5, 1}, DType::Float32);
    EXPECT_TRUE(exact(where(cond, a, b), where(on_cuda(cond), on_cuda(a), on_cuda(b)), "where broadcast/promote"));
    EXPECT_TRUE(exact(where(cond, a, wrapped_scalar(0.0)), where(on_cuda(cond), on_cuda(a), wrapped_scalar(0.0)),
                      "where with a wrapped 0"));

    const Tensor base = random_input(rng, {8, 6}, dt);
    Tensor dst_cpu = base.clone().t();  // strided destination (6, 8)
    Tensor dst_gpu = on_cuda(base).t();
    Tensor src = random_input(rng, {8}, DType::Float32);
    copy_(dst_cpu, src);
    copy_(dst_gpu, on_cuda(src));
    EXPECT_TRUE(exact(dst_cpu.contiguous(), dst_gpu, std::string("copy_ broadcast ") + short_name(dt)));

    Tensor f_cpu = Tensor::empty({3, 7}, TensorOptions(dt));
    Tensor f_gpu = Tensor::empty({3, 7}, TensorOptions(dt).with_device(gpu()));
    fill_(f_cpu, 0.1);
    fill_(f_gpu, 0.1);
    EXPECT_TRUE(exact(f_cpu, f_gpu, std::string("fill_ 0.1 ") + short_name(dt)));
    EXPECT_TRUE(exact(full_like(f_cpu, -2.5), full_like(f_gpu, -2.5), "full_like"));

    Tensor s_cpu = random_input(rng, {4, 9}, dt), o = random_input(rng, {9}, dt);
    Tensor s_gpu = on_cuda(s_cpu);
    add_(s_cpu, o, 0.5);
    add_(s_gpu, on_cuda(o), 0.5);
    EXPECT_TRUE(exact(s_cpu, s_gpu, std::string("add_ alpha ") + short_name(dt)));
    mul_(s_cpu, o);
    mul_(s_gpu, on_cuda(o));
    EXPECT_TRUE(exact(s_cpu, s_gpu, std::string("mul_ ") + short_name(dt)));
  }
}

// add_ and mul_ write straight into self — one launch — when that is the same arithmetic as the
// out-of-place op plus write-back: the op computes in self's dtype, self is contiguous, and the
// other operand is a wrapped number, memory self does not touch, or self itself. Otherwise they
// compute out of place and copy back (a shifted view of self's own memory must read the old
// values, as on the CPU). Every case equals the CPU bit for bit.
TEST(CudaPointwiseParity, InPlaceAddAndMulWriteIntoSelfInOneLaunchWhenThatIsTheSameArithmetic) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "the CPU standing in for the device launches no kernels";
  std::mt19937_64 rng(fresh_seed());
  auto launches = [](const std::function<void()>& fn) {
    profiler::Profile on;
    fn();
    return profiler::report().total_launches();
  };
  struct Case {
    const char* what;
    int64_t expected_launches;
    std::function<void(Tensor& self, const Tensor& other)> op;  // on self's and other's device
    DType self_dt, other_dt;
    IntList other_shape;
  };
  const Case cases[] = {
      {"add_ f32, other broadcast", 1, [](Tensor& s, const Tensor& o) { add_(s, o); }, DType::Float32, DType::Float32, {9}},
      {"mul_ f16", 1, [](Tensor& s, const Tensor& o) { mul_(s, o); }, DType::Float16, DType::Float16, {4, 9}},
      {"add_ bf16, an f32 wrapped number", 1, [](Tensor& s, const Tensor&) { add_(s, wrapped_scalar(0.3)); },
       DType::BFloat16, DType::Float32, {9}},
      {"mul_ i64 by a scalar", 1, [](Tensor& s, const Tensor&) { mul_(s, Scalar(3)); }, DType::Int64, DType::Int64, {9}},
      {"add_ f32, alpha: mul, then add", 2, [](Tensor& s, const Tensor& o) { add_(s, o, 0.5); }, DType::Float32,
       DType::Float32, {9}},
      {"add_ self to itself", 1, [](Tensor& s, const Tensor&) { add_(s, s); }, DType::Float32, DType::Float32, {9}},
      {"add_ f16 += f32: computed in f32 (cast, add, write-back)", 3, [](Tensor& s, const Tensor& o) { add_(s, o); },
       DType::Float16, DType::Float32, {4, 9}},
      {"mul_ into a transposed self: out of place", 2, [](Tensor& s, const Tensor& o) {
         Tensor t = s.t();
         mul_(t, o);
       }, DType::Float32, DType::Float32, {4}},
      {"add_ of a shifted view of self's memory: out of place", 2, [](Tensor& s, const Tensor&) {
         Tensor flat = s.view({36});
         Tensor head = flat.narrow(0, 0, 30), tail = flat.narrow(0, 6, 30);
         add_(head, tail);
       }, DType::Float32, DType::Float32, {9}},
  };
  for (const Case& c : cases) {
    Tensor self_cpu = random_input(rng, {4, 9}, c.self_dt, 0.25, 2.0);
    const Tensor other_cpu = random_input(rng, c.other_shape, c.other_dt, 0.25, 2.0);
    Tensor self_gpu = on_cuda(self_cpu);
    const Tensor other_gpu = on_cuda(other_cpu);
    c.op(self_cpu, other_cpu);
    EXPECT_EQ(launches([&] { c.op(self_gpu, other_gpu); }), c.expected_launches) << c.what;
    EXPECT_TRUE(exact(self_cpu, self_gpu, c.what));
  }
}

TEST(CudaPointwiseParity, RandomFillsFollowThePhiloxStream) {
  MT_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  for (DType dt : kFloatTypes) {
    Generator g_cpu(seed), g_gpu(seed);
    const Tensor u_cpu = rand({1000}, TensorOptions(dt), &g_cpu);
    const Tensor u_gpu = rand({1000}, TensorOptions(dt).with_device(gpu()), &g_gpu);
    // uniform: 24 random bits scaled by 2^-24 (exact), then one rounding: bit-identical.
    EXPECT_TRUE(exact(u_cpu, u_gpu, std::string("rand ") + short_name(dt)));
    const Tensor n_cpu = randn({1000}, TensorOptions(dt), &g_cpu);
    const Tensor n_gpu = randn({1000}, TensorOptions(dt).with_device(gpu()), &g_gpu);
    // Box–Muller in double: log/cos/sqrt each within 1-2 ulp (f64) on both sides, then rounding
    // to dt: 2 u(dt) |x| + a few f64 ulp.
    EXPECT_TRUE(close(n_cpu, n_gpu, 1e-12, 2 * unit_roundoff(dt) + 1e-13, std::string("randn ") + short_name(dt)));
  }
}

// Backward formulas are written with ops, so a CUDA graph exercises the CUDA kernels of the
// backward too; Float64 gradcheck through to_device (the inputs are CPU leaves, the ops run on
// the GPU) checks them against central differences.
TEST(CudaPointwiseParity, GradcheckThroughCudaF64) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  Tensor x = random_input(rng, {3, 5}, DType::Float64, 0.2, 1.5).requires_grad_();
  Tensor y = random_input(rng, {5}, DType::Float64, 0.2, 1.5).requires_grad_();
  auto fn = [](const TensorList& in) -> TensorList {
    Tensor a = in[0].to(gpu()), b = in[1].to(gpu());
    Tensor r = gelu(a) * sigmoid(b) + tanh(a / b) - leaky_relu(a - b, 0.1) * exp(b * 0.3) + pow(a, 2.0) +
               clamp(a * 2.0, -1.0, 1.5) + sqrt(abs(b) + 1.0) + log(abs(a) + 0.5);
    return {sum(r, {1}).to(Device::CPU())};
  };
  auto r = autograd::gradcheck(fn, {x, y});
  EXPECT_TRUE(r.ok) << r.report;
}

}  // namespace
}  // namespace mixtape
