// tests/cuda_ops/test_loss_norm_parity.cpp — CUDA vs CPU for mse_loss, binary_cross_entropy (+
// backward), binary_cross_entropy_with_logits and layer_norm, per dtype and reduction, fresh inputs.
// Tolerances (cuda_test_util.h): per-element terms use log/log1p/exp (k = 3 transcendental
// calls: the approx bound with k = 12 ulp of acc); reductions add an f64 sum in another order
// (negligible beside the final rounding: 2 u(storage)); mse and the bce gradient are + - * /
// only, with one possible FMA contraction: k = 1. layer_norm statistics are walked in the CPU's
// order in f64 with the CPU's roundings (no FMA): bit-identical; its output is one contraction plus
// the affine: k = 4.
#include "cuda_test_util.h"
#include "common/error_of.h"

namespace mixtape {
namespace {
using namespace cuda_test;

TEST(CudaLossParity, MseBceAndBceWithLogitsEveryReduction) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  for (DType dt : kFloatTypes) {
    const std::string t = short_name(dt);
    const Tensor x = random_input(rng, {6, 17}, dt), y = random_input(rng, {6, 17}, dt);
    const Tensor p = random_input(rng, {6, 17}, dt, 0.02, 0.98, true), tg = random_input(rng, {6, 17}, dt, 0.0, 1.0, true);
    const Tensor w = random_input(rng, {17}, DType::Float32, 0.2, 2.0, true), pw = random_input(rng, {17}, DType::Float32, 0.5, 3.0, true);
    for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
      const std::string what = t + " reduction " + std::to_string(int(r));
      const double kn = r == Reduction::None ? 1 : 102;  // a sum of 102 terms: each term's bound, summed
      EXPECT_TRUE(approx_k(mse_loss(x, y, r), mse_loss(on_cuda(x), on_cuda(y), r), 1 * kn, "mse_loss " + what));
      EXPECT_TRUE(approx_k(binary_cross_entropy(p, tg, w, r), binary_cross_entropy(on_cuda(p), on_cuda(tg), on_cuda(w), r),
                           12 * kn, "binary_cross_entropy " + what));
      const Tensor g = r == Reduction::None ? random_input(rng, {6, 17}, dt) : random_input(rng, {}, dt);
      EXPECT_TRUE(approx_k(binary_cross_entropy_backward(g, p, tg, w, r),
                           binary_cross_entropy_backward(on_cuda(g), on_cuda(p), on_cuda(tg), on_cuda(w), r), 2,
                           "binary_cross_entropy_backward " + what));
      EXPECT_TRUE(approx_k(binary_cross_entropy_with_logits(x, tg, w, pw, r),
                           binary_cross_entropy_with_logits(on_cuda(x), on_cuda(tg), on_cuda(w), on_cuda(pw), r), 12 * kn,
                           "binary_cross_entropy_with_logits " + what));
    }
  }
  // Probabilities outside [0, 1] are a located error on CUDA too, with the CPU's message, reported
  // at the next synchronisation (core/cuda/deferred_check.h).
  Tensor bad = random_input(rng, {4}, DType::Float32, 0.1, 0.9, true);
  set_element(bad, 2, 1.5);
  Tensor loss;
  const std::string e = ::mixtape::testing::error_of([&] {
    loss = binary_cross_entropy(on_cuda(bad), on_cuda(bad * 0.0));
    loss.to(Device::CPU());
  });
  EXPECT_NE(e.find("binary_cross_entropy: all elements of input should be between 0 and 1 (probabilities; use "
                   "binary_cross_entropy_with_logits for logits), got 1.5 at position [2]"),
            std::string::npos)
      << e;
  if (!selfcheck()) {
    EXPECT_NE(e.find("(found on the device, reported at the next synchronisation)"), std::string::npos) << e;
    EXPECT_NO_THROW(loss.to(Device::CPU()));
  }
}

TEST(CudaNormParity, LayerNormOutputsAndStatistics) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  for (DType dt : kFloatTypes) {
    const DType pd = dt == DType::Float64 ? DType::Float64 : DType::Float32;
    const Tensor x = random_input(rng, {3, 4, 5, 6}, dt);
    const Tensor w = random_input(rng, {5, 6}, pd), b = random_input(rng, {5, 6}, pd);
    const Attrs a{{"normalized_shape", IntList{5, 6}}, {"eps", 1e-5}};
    for (bool affine : {false, true}) {
      const TensorList c = dispatch(*find_op("layer_norm"), {x, affine ? w : Tensor(), affine ? b : Tensor()}, a);
      const TensorList g = dispatch(*find_op("layer_norm"),
                                    {on_cuda(x), affine ? on_cuda(w) : Tensor(), affine ? on_cuda(b) : Tensor()}, a);
      const std::string what = std::string(short_name(dt)) + (affine ? " affine" : "");
      EXPECT_TRUE(approx_k(c[0], g[0], 4 * 10, "layer_norm out " + what));
      // Bit-identical: found 1 ulp apart in f64 on an H200 when nvcc fused the variance's d * d + q.
      EXPECT_TRUE(exact(c[1], g[1], "layer_norm mean " + what));
      EXPECT_TRUE(exact(c[2], g[2], "layer_norm rstd " + what));
    }
    // Its backward is written with ops, so a CUDA graph runs it on the GPU: compare input grads.
    Tensor xc = x.clone().requires_grad_(), xg = on_cuda(x).detach().requires_grad_();
    const Tensor gy = random_input(rng, x.sizes(), dt);
    layer_norm(xc, {5, 6}, w, b).backward(gy);
    layer_norm(xg, {5, 6}, on_cuda(w), on_cuda(b)).backward(on_cuda(gy));
    EXPECT_TRUE(approx_k(xc.grad(), xg.grad(), 4 * 30 * 10, std::string("layer_norm backward ") + short_name(dt)));
  }
}

}  // namespace
}  // namespace mixtape
