// tests/cuda_ops/test_conv_norm_dropout_parity.cpp — CUDA vs CPU for conv2d and its two gradient
// ops (cuDNN), batch_norm and batch_norm_backward, and dropout, per dtype, fresh inputs.
// Tolerances:
//   conv: a sum of K products per output (K = C/G kH kW, N OH OW for the weight grad, O/G kH kW
//     for the input grad); cuDNN may pick Winograd/FFT/implicit-GEMM algorithms whose error is a
//     small multiple of the plain sum's 2 K u(acc) sum|terms| (Higham 4.4): bound used
//     c K u(acc) (|x| * |w|) + 4 u(storage) (|y| + |b|) with c = 8, and c = 32 for 16-bit
//     operands (tensor-core FP32 accumulation is not round-to-nearest throughout: see
//     test_reduce_gemm_parity.cpp's gemm_factor), the last term also covering the second
//     rounding of a 16-bit conv + bias on CUDA (conv_cudnn.cpp says why).
//   batch_norm: the GPU sums in f64; the CPU, for f32 and 16-bit x, in float partials of at most
//     32 terms flushed into f64 (docs/CPU.md "Reductions"): its sums carry up to ~31 f32
//     roundings of the sum of their terms' magnitudes (the mean: atol 64 u(f32) max|x|; the
//     variance: rtol 40 u(f32); the backward's sums: atol 34 u(f32) sum|terms|), plus one f32 ulp
//     either way for the rounding to f32 (rtol 2 u(f32)); for f64 x both sum in f64 in another
//     order. The transform x a + b is one contraction (FMA on the GPU), values O(10) here: atol
//     64 u(acc), rtol 2 u(storage) + 16 u(acc).
//   dropout: the same Philox words decide the same elements, one multiply: exact.
#include "common/error_of.h"
#include "cuda_test_util.h"
#if defined(MIXTAPE_CUDA_EMULATOR)
#include <cudnn.h>
#endif

namespace mixtape {
namespace {
using namespace cuda_test;

Tensor f64(const Tensor& t) { return to_dtype(t, DType::Float64); }

TEST(CudaConvParity, ForwardInputGradWeightGradEveryDtypeAndGeometry) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  struct Geo {
    IntList x, w, stride, padding, dilation;
    int64_t groups;
  };
  const Geo geos[] = {{{4, 3, 12, 12}, {8, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
                      {{2, 4, 11, 9}, {6, 2, 3, 2}, {2, 1}, {1, 0}, {1, 2}, 2},
                      {{3, 8, 7, 7}, {16, 8, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1}};
  for (DType dt : kFloatTypes) {
    const double us = unit_roundoff(dt);
    const double u = (dt == DType::Float64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24)) * (is_reduced_float(dt) ? 4 : 1);
    for (const Geo& g : geos) {
      const std::string what = std::string(short_name(dt)) + " x" + shape_str(g.x) + " w" + shape_str(g.w);
      const Tensor x = random_input(rng, g.x, dt), w = random_input(rng, g.w, dt), b = random_input(rng, {g.w[0]}, dt);
      const Tensor y = conv2d(x, w, b, g.stride, g.padding, g.dilation, g.groups);
      const double K = static_cast<double>(g.w[1] * g.w[2] * g.w[3]);
      const Tensor ay = conv2d(abs(f64(x)), abs(f64(w)), Tensor(), g.stride, g.padding, g.dilation, g.groups);
      const Tensor bound = ay * (8 * K * u) + (abs(f64(y)) + abs(f64(b)).reshape({1, g.w[0], 1, 1})) * (4 * us) + 1e-300;
      EXPECT_TRUE(within(y, conv2d(on_cuda(x), on_cuda(w), on_cuda(b), g.stride, g.padding, g.dilation, g.groups), bound,
                         "conv2d " + what));

      const Tensor gy = random_input(rng, y.sizes(), dt);
      const Tensor gx = conv2d_input_grad(gy, w, x.sizes(), g.stride, g.padding, g.dilation, g.groups);
      const double Ki = static_cast<double>(g.w[0] / g.groups * g.w[2] * g.w[3]);
      const Tensor agx = conv2d_input_grad(abs(f64(gy)), abs(f64(w)), x.sizes(), g.stride, g.padding, g.dilation, g.groups);
      EXPECT_TRUE(within(gx, conv2d_input_grad(on_cuda(gy), on_cuda(w), x.sizes(), g.stride, g.padding, g.dilation, g.groups),
                         agx * (8 * Ki * u) + abs(f64(gx)) * (4 * us) + 1e-300, "conv2d_input_grad " + what));

      const Tensor gw = conv2d_weight_grad(x, gy, w.sizes(), g.stride, g.padding, g.dilation, g.groups);
      const double Kw = static_cast<double>(y.size(0) * y.size(2) * y.size(3));
      const Tensor agw = conv2d_weight_grad(abs(f64(x)), abs(f64(gy)), w.sizes(), g.stride, g.padding, g.dilation, g.groups);
      EXPECT_TRUE(within(gw, conv2d_weight_grad(on_cuda(x), on_cuda(gy), w.sizes(), g.stride, g.padding, g.dilation, g.groups),
                         agw * (8 * Kw * u) + abs(f64(gw)) * (4 * us) + 1e-300, "conv2d_weight_grad " + what));
    }
  }
}

// How conv_cudnn.cpp picks among cuDNN's ranked suggestions (emulator only: its knobs rank the
// non-deterministic backward algorithms first, as cuDNN may, and report another math type than
// the descriptor's). Deterministic algorithms by default, the heuristics' first with
// set_cudnn_deterministic(false); every call runs with the math type its suggestion was ranked
// under; with TF32 off an f32 conv takes no suggestion that converts to TF32.
TEST(CudaConvAlgorithm, DeterministicByDefaultAndRunWithTheSuggestedMathType) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "cuDNN's choices exist on the device side only";
#if !defined(MIXTAPE_CUDA_EMULATOR)
  GTEST_SKIP() << "needs the CUDA emulator's cuDNN knobs";
#else
  namespace emu = cuda_emulator;
  struct Knobs {  // restored whatever the test does
    Knobs() {
      emu::cudnn_rank_nondeterministic_first(true);
      emu::cudnn_report_math(CUDNN_FMA_MATH);
    }
    ~Knobs() {
      emu::cudnn_rank_nondeterministic_first(false);
      emu::cudnn_report_math(-1);
      cuda::set_cudnn_deterministic(true);
    }
  } knobs;
  ASSERT_TRUE(cuda::cudnn_deterministic()) << "deterministic is the default";
  // Shapes no other test uses: the algorithm cache holds no earlier choice for them.
  auto run = [](DType dt) {
    const Tensor x = on_cuda(randn({1, 3, 7, 9}).to(dt)).requires_grad_(true);
    const Tensor w = on_cuda(randn({5, 3, 3, 3}).to(dt)).requires_grad_(true);
    conv2d(x, w, Tensor(), {1, 1}, {1, 1}, {1, 1}, 1).sum().backward();
    cuda::synchronize();
  };
  run(DType::Float16);
  EXPECT_EQ(emu::cudnn_last_run(1).algo, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
  EXPECT_EQ(emu::cudnn_last_run(2).algo, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
  for (int direction = 0; direction < 3; ++direction)
    EXPECT_EQ(emu::cudnn_last_run(direction).math, CUDNN_FMA_MATH)
        << "direction " << direction << " ran with the descriptor's math type, not its suggestion's";
  cuda::set_cudnn_deterministic(false);
  run(DType::Float16);
  EXPECT_EQ(emu::cudnn_last_run(1).algo, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0);
  EXPECT_EQ(emu::cudnn_last_run(2).algo, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0);
  cuda::set_cudnn_deterministic(true);
  // FP32 with TF32 off (the default): only CUDNN_FMA_MATH suggestions run (DEFAULT and TENSOR_OP
  // math may use TF32 on sm80+; ALLOW_CONVERSION converts FP32 down to FP16/BF16).
  for (cudnnMathType_t m : {CUDNN_DEFAULT_MATH, CUDNN_TENSOR_OP_MATH, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION}) {
    emu::cudnn_report_math(m);
    try {
      run(DType::Float32);
      ADD_FAILURE() << "an f32 conv ran a suggestion of math type " << int(m) << " with TF32 off";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("conv2d: cuDNN offered no algorithm that succeeds within a 1024 MiB "
                                           "workspace, is deterministic"),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("computes in exact FP32"), std::string::npos) << e.what();
    }
  }
  emu::cudnn_report_math(CUDNN_FMA_MATH);
  EXPECT_NO_THROW(run(DType::Float32));
  EXPECT_EQ(emu::cudnn_last_run(0).math, CUDNN_FMA_MATH);
#endif
}

// cuDNN's descriptors take int strides: an operand of more than 2^31 - 1 elements is refused with
// the op and the shapes named (not handed to cuDNN, which would index it wrongly). The input is a
// broadcast view of one element, so nothing of that size is allocated before the check.
TEST(CudaConvParity, OperandsOfMoreThanIntMaxElementsAreRefused) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "the CPU conv has no int limit: it would compute the 2^32-element conv";
  const Tensor x = on_cuda(randn({1, 1, 1, 1})).expand({65536, 64, 32, 32});  // 2^32 elements, each dim small
  const Tensor w = on_cuda(randn({8, 64, 3, 3}));
  const std::string e = ::mixtape::testing::error_of([&] { (void)conv2d(x, w, Tensor(), {1, 1}, {1, 1}, {1, 1}, 1); });
  EXPECT_NE(e.find("conv2d: cuDNN indexes a tensor with int strides, and an operand has 4294967296 elements"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("Split the batch"), std::string::npos) << e;
}

TEST(CudaNormParity, BatchNormTrainingEvalAndBackward) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  for (DType dt : kFloatTypes) {
    const DType pd = dt == DType::Float64 ? DType::Float64 : DType::Float32;  // AMP: 16-bit x, f32 parameters
    const double ua = dt == DType::Float64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24), us = unit_roundoff(dt);
    const double ustat = unit_roundoff(pd);
    // f64 x: both devices sum in f64, in another order, |d mean| <= n u max|x| over the n = 6*4*3
    // values of a channel (max|x| = 3 below), and the variance's terms likewise. f32 and 16-bit x:
    // the CPU's float partials (above), then rounded to f32 on both (2 ulps).
    const bool f64 = pd == DType::Float64;
    const double u32 = std::ldexp(1.0, -24);
    const double stat_atol = f64 ? 72 * ua * 3.0 : 64 * u32 * 3.0;
    const double stat_rtol = 2 * ustat + (f64 ? 72 * ua : 40 * u32);
    const std::string t = short_name(dt);
    const Tensor x = random_input(rng, {6, 5, 4, 3}, dt, 0.1, 3.0);
    const Tensor w = random_input(rng, {5}, pd, 0.25, 2.0), b = random_input(rng, {5}, pd);
    for (bool training : {true, false}) {
      Tensor rm_c = random_input(rng, {5}, pd), rv_c = random_input(rng, {5}, pd, 0.5, 2.0, true);
      Tensor rm_g = on_cuda(rm_c), rv_g = on_cuda(rv_c);
      rm_c = rm_c.clone();
      rv_c = rv_c.clone();
      const Attrs a{{"training", training}, {"momentum", 0.1}, {"eps", 1e-5}};
      const TensorList c = dispatch(*find_op("batch_norm"), {x, rm_c, rv_c, w, b}, a);
      const TensorList g = dispatch(*find_op("batch_norm"), {on_cuda(x), rm_g, rv_g, on_cuda(w), on_cuda(b)}, a);
      const std::string what = t + (training ? " training" : " eval");
      EXPECT_TRUE(close(c[0], g[0], 64 * ua, 2 * us + 16 * ua, "batch_norm out " + what));
      EXPECT_TRUE(close(c[1], g[1], stat_atol, stat_rtol, "batch_norm save_mean " + what));
      EXPECT_TRUE(close(c[2], g[2], stat_atol, stat_rtol, "batch_norm save_invstd " + what));
      EXPECT_TRUE(close(rm_c, rm_g, stat_atol, stat_rtol, "running_mean " + what));
      EXPECT_TRUE(close(rv_c, rv_g, stat_atol, stat_rtol, "running_var " + what));

      const Tensor gy = random_input(rng, x.sizes(), dt);
      const Attrs ab{{"training", training}, {"eps", 1e-5}};
      const TensorList bc = dispatch(*find_op("batch_norm_backward"), {gy, x, w, c[1], c[2]}, ab);
      const TensorList bg =
          dispatch(*find_op("batch_norm_backward"), {on_cuda(gy), on_cuda(x), on_cuda(w), on_cuda(c[1]), on_cuda(c[2])}, ab);
      EXPECT_TRUE(close(bc[0], bg[0], 64 * ua * 10, 2 * us + 16 * ua, "batch_norm_backward grad_x " + what));
      // sum g and sum g (x - mean) invstd over a channel: every channel's terms are bounded by all of them.
      const double max_invstd = c[2].to(DType::Float64).flatten().amax(0).item<double>();
      const double abs_g = gy.to(DType::Float64).abs().sum().item<double>();
      const double abs_gx = (gy.to(DType::Float64).abs() * (x.to(DType::Float64).abs() + 3.0)).sum().item<double>() * max_invstd;
      EXPECT_TRUE(close(bc[1], bg[1], f64 ? 1e-12 : 34 * u32 * abs_gx, 2 * ustat + 1e-12, "batch_norm_backward sum_gxhat " + what));
      EXPECT_TRUE(close(bc[2], bg[2], f64 ? 1e-12 : 34 * u32 * abs_g, 2 * ustat + 1e-12, "batch_norm_backward sum_g " + what));
    }
  }
}

TEST(CudaDropoutParity, SameGeneratorStateDropsTheSameElements) {
  MT_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  for (DType dt : kFloatTypes) {
    const Tensor x = random_input(rng, {7, 333}, dt);
    for (double p : {0.1, 0.5, 0.9, 1.0}) {
      Generator gc(seed), gg(seed);
      const Tensor yc = dropout(x, p, true, &gc), yg = dropout(on_cuda(x), p, true, &gg);
      EXPECT_TRUE(exact(yc, yg, std::string("dropout ") + short_name(dt) + " p=" + std::to_string(p)));
      // The backward (g * mask * scale, written with ops) through autograd on both devices.
      Tensor xc = x.clone().requires_grad_(), xg = on_cuda(x).detach().requires_grad_();
      Generator hc(seed + 1), hg(seed + 1);
      const Tensor g = random_input(rng, x.sizes(), dt);
      dropout(xc, p, true, &hc).backward(g);
      dropout(xg, p, true, &hg).backward(on_cuda(g));
      EXPECT_TRUE(exact(xc.grad(), xg.grad(), std::string("dropout backward ") + short_name(dt)));
    }
  }
}

}  // namespace
}  // namespace mixtape

namespace mixtape {
namespace {
using namespace cuda_test;

// Float64 gradcheck of the CNN ops running on the device (inputs are CPU leaves moved to the GPU
// inside the function, so every forward and backward op of the chain runs there): conv2d (both
// gradient ops), batch_norm (+ backward), max_pool2d, avg_pool2d, adaptive_avg_pool2d,
// layer_norm, log_softmax, nll_loss, cat, index_select.
TEST(CudaGradcheck, CnnChainThroughCudaF64) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  Tensor x = random_input(rng, {2, 2, 6, 6}, DType::Float64, 0.1, 1.0).requires_grad_();
  Tensor w = random_input(rng, {3, 2, 3, 3}, DType::Float64, 0.1, 1.0).requires_grad_();
  Tensor b = random_input(rng, {3}, DType::Float64, 0.1, 1.0).requires_grad_();
  Tensor gamma = random_input(rng, {3}, DType::Float64, 0.5, 1.5).requires_grad_();
  Tensor target = Tensor::empty({2}, TensorOptions(DType::Int64));
  set_element(target, 0, 1);
  set_element(target, 1, 4);
  Tensor sel = Tensor::empty({2}, TensorOptions(DType::Int64));
  set_element(sel, 0, 2);
  set_element(sel, 1, 0);
  auto fn = [&](const TensorList& in) -> TensorList {
    const Device g = gpu();
    Tensor h = conv2d(in[0].to(g), in[1].to(g), in[2].to(g), {1, 1}, {1, 1});        // (2, 3, 6, 6)
    h = batch_norm(h, Tensor(), Tensor(), in[3].to(g), Tensor(), true);
    Tensor p = max_pool2d(h, {2, 2});                                                   // (2, 3, 3, 3)
    Tensor q = avg_pool2d(h, {3, 3}, {2, 2}, {1, 1});                                   // (2, 3, 3, 3)
    Tensor r = cat({p, q}, 1);                                                          // (2, 6, 3, 3)
    r = index_select(r, 1, sel.to(g)) + adaptive_avg_pool2d(r, {1, 1}).narrow(1, 0, 2); // (2, 2, 3, 3)
    Tensor f = layer_norm(r.reshape({2, 18}), {18});
    Tensor logits = f.narrow(1, 0, 5);
    return {nll_loss(log_softmax(logits, 1), target.to(g)).to(Device::CPU())};
  };
  auto r = autograd::gradcheck(fn, {x, w, b, gamma});
  EXPECT_TRUE(r.ok) << r.report;
}

}  // namespace
}  // namespace mixtape
