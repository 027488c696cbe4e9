// tests/cuda_ops/test_softmax_loss_pool_parity.cpp — CUDA vs CPU for softmax, log_softmax, their
// backward ops, nll_loss (+ backward, every reduction, weights, ignore_index, spatial targets),
// cross_entropy (a composite of the two) and the max_pool2d family, per dtype, fresh inputs.
// Tolerances (cuda_test_util.h): softmax rows are walked in the CPU's order on the device, so
// only exp/log differ (k = 2 ulp budget per output, sums of len terms of those: the k bound
// scaled by len for the backward sums); nll and pooling select and add in the CPU's order:
// exact.
#include "cuda_test_util.h"
#include "common/error_of.h"
#if defined(MIXTAPE_WITH_CUDA)
#include "core/cuda/stream.h"  // the emulator-only stream-order tests
#endif

namespace mixtape {
namespace {
using namespace cuda_test;

TEST(CudaSoftmaxParity, ForwardAndBackwardEveryDimAndDtype) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  for (DType dt : kFloatTypes) {
    const Tensor x = random_input(rng, {4, 7, 10}, dt, 0.1, 6.0);
    const Tensor g = random_input(rng, {4, 7, 10}, dt);
    const std::string t = short_name(dt);
    for (int64_t dim : {0, 1, 2, -1}) {
      const std::string what = t + " dim " + std::to_string(dim);
      const Tensor y = softmax(x, dim), ly = log_softmax(x, dim);
      EXPECT_TRUE(approx_k(y, softmax(on_cuda(x), dim), 2, "softmax " + what));
      EXPECT_TRUE(approx_k(ly, log_softmax(on_cuda(x), dim), 2 * 10, "log_softmax " + what));
      EXPECT_TRUE(approx_k(softmax_backward(g, y, dim), softmax_backward(on_cuda(g), on_cuda(y), dim), 10,
                           "softmax_backward " + what));
      EXPECT_TRUE(approx_k(log_softmax_backward(g, ly, dim), log_softmax_backward(on_cuda(g), on_cuda(ly), dim), 2 * 10,
                           "log_softmax_backward " + what));
    }
    // dtype=f32 on a 16-bit input converts first.
    if (is_reduced_float(dt)) {
      EXPECT_TRUE(approx_k(softmax(x, 1, DType::Float32), softmax(on_cuda(x), 1, DType::Float32), 2, "softmax dtype=f32"));
    }
  }
}

TEST(CudaLossParity, NllAndCrossEntropyAreExactOnTheSameLogProbabilities) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  std::uniform_int_distribution<int> cls(0, 5);
  for (DType dt : kFloatTypes) {
    const Tensor logp = log_softmax(random_input(rng, {9, 6, 3}, dt), 1);  // spatial (N, C, S)
    Tensor target = Tensor::empty({9, 3}, TensorOptions(DType::Int64));
    for (int64_t i = 0; i < target.numel(); ++i) set_element(target, i, i % 7 == 3 ? -100 : cls(rng));
    const Tensor w = random_input(rng, {6}, DType::Float32, 0.2, 2.0, true);
    const std::string t = short_name(dt);
    for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
      for (bool weighted : {false, true}) {
        const std::string what = t + " reduction " + std::to_string(int(r)) + (weighted ? " weighted" : "");
        const Tensor wc = weighted ? w : Tensor(), wg = weighted ? on_cuda(w) : Tensor();
        const Tensor l = nll_loss(logp, target, wc, -100, r);
        EXPECT_TRUE(exact(l, nll_loss(on_cuda(logp), on_cuda(target), wg, -100, r), "nll_loss " + what));
        const Tensor g = r == Reduction::None ? random_input(rng, {9, 3}, dt) : random_input(rng, {}, dt);
        EXPECT_TRUE(exact(nll_loss_backward(g, target, wc, -100, r, logp.sizes()),
                          nll_loss_backward(on_cuda(g), on_cuda(target), wg, -100, r, logp.sizes()),
                          "nll_loss_backward " + what));
      }
    }
    // cross_entropy = nll_loss(log_softmax(x)): the log_softmax bound, summed over the batch.
    const Tensor x = random_input(rng, {16, 6}, dt, 0.1, 4.0);
    Tensor tg = Tensor::empty({16}, TensorOptions(DType::Int64));
    for (int64_t i = 0; i < 16; ++i) set_element(tg, i, cls(rng));
    EXPECT_TRUE(approx_k(cross_entropy(x, tg), cross_entropy(on_cuda(x), on_cuda(tg)), 2 * 10 * 16, "cross_entropy " + t));
  }
  // An out-of-range target is a located error on CUDA too, with the CPU's message: found by the
  // device and reported at the next synchronisation (core/cuda/deferred_check.h), once.
  Tensor bad = Tensor::empty({2}, TensorOptions(DType::Int64));
  set_element(bad, 0, 1);
  set_element(bad, 1, 7);
  const Tensor lp = log_softmax(random_input(rng, {2, 4}, DType::Float32), 1);
  Tensor loss;
  const std::string e = ::mixtape::testing::error_of([&] {
    loss = nll_loss(on_cuda(lp), on_cuda(bad));
    loss.to(Device::CPU());
  });
  EXPECT_NE(e.find("nll_loss: target 7 at position [1] is out of bounds: expected a class in [0, 4) or "
                   "ignore_index -100"),
            std::string::npos)
      << e;
  if (!selfcheck()) {  // the CPU stands in for the device in the self-check: it throws at the call
    EXPECT_NE(e.find("(found on the device, reported at the next synchronisation)"), std::string::npos) << e;
    EXPECT_NO_THROW(loss.to(Device::CPU()));
    // The bad target counted as ignored, so the value is the good one's: -lp[0, 1] (mean of one).
    EXPECT_EQ(loss.to(Device::CPU()).item<float>(), -lp.select(0, 0).select(0, 1).item<float>());
  }
}

// Deferred checks (core/cuda/deferred_check.h) in the situations that could lose or garble them:
// a check whose stream is destroyed before anyone synchronises; cuda::synchronize() with no
// device; an input changed after the call (the message shows the value the kernel saw); the
// backward ops on their own (nll_loss_backward, scatter_add via gather's backward).
TEST(CudaLossParity, DeferredChecksAreReportedOnceWithTheValueTheKernelSaw) {
  MT_REQUIRE_CUDA();
#if defined(MIXTAPE_WITH_CUDA)
  if (selfcheck()) GTEST_SKIP() << "the CPU reports at the call: nothing is deferred";
  const Tensor lp = on_cuda(log_softmax(randn({1, 3}, TensorOptions(DType::Float32)), 1));
  Tensor bad = Tensor::empty({1}, TensorOptions(DType::Int64));
  set_element(bad, 0, 5);
  Tensor target = on_cuda(bad);
  // The uploads went to the legacy default stream, which a non-blocking stream does not wait for
  // (and a copy from pageable memory may return before its DMA is done): finish them first.
  cuda::synchronize();
  using ::mixtape::testing::error_of;
  {  // the stream is gone before the read
    Tensor loss;
    {
      cuda::OwnedStream stream;
      cuda::StreamGuard guard(stream.get());
      loss = nll_loss(lp, target);
    }
    const std::string e = error_of([&] { loss.to(Device::CPU()); });
    EXPECT_NE(e.find("nll_loss: target 5 at position [0] is out of bounds"), std::string::npos) << e;
  }
  {  // cuda::synchronize() reports; the value is the one the kernel saw, not the input's later one
    Tensor t = target.clone();
    const Tensor loss = nll_loss(lp, t);
    fill_(t, 7.0);
    const std::string e = error_of([] { cuda::synchronize(); });
    EXPECT_NE(e.find("nll_loss: target 5 at position [0] is out of bounds"), std::string::npos) << e;
    EXPECT_NO_THROW(cuda::synchronize()) << "reported once";
  }
  {  // nll_loss_backward on its own
    const Tensor g = nll_loss_backward(on_cuda(ones({}, TensorOptions(DType::Float32))), target, Tensor(), -100,
                                       Reduction::Mean, {1, 3});
    const std::string e = error_of([&] { g.to(Device::CPU()); });
    EXPECT_NE(e.find("nll_loss_backward: target 5 at position [0] is out of bounds"), std::string::npos) << e;
  }
  {  // scatter_add (gather's backward) on its own
    Tensor idx = Tensor::empty({2}, TensorOptions(DType::Int64));
    set_element(idx, 0, 1);
    set_element(idx, 1, 4);
    const Tensor out = scatter_add_into_zeros(on_cuda(ones({2}, TensorOptions(DType::Float32))), 0, on_cuda(idx), {3});
    const std::string e = error_of([&] { out.to(Device::CPU()); });
    EXPECT_NE(e.find("scatter_add: index 4 is out of bounds for dimension 0 with size 3 (at index position 1)"),
              std::string::npos)
        << e;
  }
#endif
}

// The training step's loss never stops the host to look at its targets: cross_entropy forward and
// backward add no host wait (the CUDA emulator's host_waits(); its streams keep stream order
// only, and the work goes to a blocking stream so a wait on the legacy stream shows too).
TEST(CudaLossParity, CrossEntropyDoesNotSynchroniseTheHost) {
  MT_REQUIRE_EMULATED_STREAM_ORDER();
#if defined(MIXTAPE_CUDA_EMULATOR)
  const Tensor x = on_cuda(randn({8, 10}, TensorOptions(DType::Float32)));
  const Tensor t = on_cuda(arange(8, TensorOptions(DType::Int64)));
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  {
    cuda::StreamGuard guard(stream);
    Tensor xg = (x * 2.0).detach();
    xg.requires_grad_(true);
    const uint64_t before = cuda_emulator::host_waits();
    Tensor loss = cross_entropy(xg, t);
    loss.backward();
    EXPECT_EQ(cuda_emulator::host_waits(), before) << "cross_entropy waited for the device";
    EXPECT_NEAR(loss.to(Device::CPU()).item<float>(),
                cross_entropy(x.to(Device::CPU()) * 2.0, t.to(Device::CPU())).item<float>(), 1e-5);
  }
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
#endif
}

TEST(CudaPoolParity, MaxPoolForwardIndicesAndBothBackwardsAreExact) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  struct Win {
    IntList k, s, p, d;
    bool ceil;
  };
  const Win wins[] = {{{2, 2}, {2, 2}, {0, 0}, {1, 1}, false},  // SmallCNN's
                      {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true},   // overlapping, padded, ceil_mode
                      {{3, 2}, {1, 2}, {1, 0}, {2, 1}, false}}; // dilated, rectangular
  for (DType dt : kFloatTypes) {
    // Few distinct values: ties decide the argmax (the first in scan order must win on both).
    Tensor x = to_dtype(to_dtype(to_dtype(random_input(rng, {2, 3, 11, 9}, DType::Float32, 0, 4), DType::Int32),
                                 DType::Float32),
                        dt);
    set_element(x, 40, std::nan(""));
    const std::string t = short_name(dt);
    for (const Win& w : wins) {
      const std::string what = t + " k" + shape_str(w.k) + " s" + shape_str(w.s);
      const Tensor y = max_pool2d(x, w.k, w.s, w.p, w.d, w.ceil);
      EXPECT_TRUE(exact(y, max_pool2d(on_cuda(x), w.k, w.s, w.p, w.d, w.ceil), "max_pool2d " + what));
      auto [yi, idx] = max_pool2d_with_indices(x, w.k, w.s, w.p, w.d, w.ceil);
      auto [yig, idxg] = max_pool2d_with_indices(on_cuda(x), w.k, w.s, w.p, w.d, w.ceil);
      EXPECT_TRUE(exact(yi, yig, "max_pool2d_with_indices values " + what));
      EXPECT_TRUE(exact(idx, idxg, "max_pool2d_with_indices indices " + what));
      const Tensor g = random_input(rng, y.sizes(), dt);
      EXPECT_TRUE(exact(max_pool2d_backward(g, idx, x.sizes()), max_pool2d_backward(on_cuda(g), on_cuda(idx), x.sizes()),
                        "max_pool2d_backward " + what));
      // max_pool2d's own backward (the argmax found again in the input) through autograd.
      Tensor xc = x.clone().requires_grad_(), xg = on_cuda(x).detach().requires_grad_();
      max_pool2d(xc, w.k, w.s, w.p, w.d, w.ceil).backward(g);
      max_pool2d(xg, w.k, w.s, w.p, w.d, w.ceil).backward(on_cuda(g));
      EXPECT_TRUE(exact(xc.grad(), xg.grad(), "max_pool2d input backward " + what));
    }
  }
}

// The tap codes max_pool2d keeps (ops/max_pool_taps.h's formats: 2-bit codes packed per output
// row where a window has at most 4 taps and none is empty, else a byte or Int32 per output) are
// the CPU's, byte for byte, and both gradient ops read them as the CPU does: ties, NaN, padding,
// widths whose last code byte is partial (OW % 4 != 0) and under 4, windows of 1, 2, 3, 4, 6 and
// 272 taps, a window that can lie wholly in padding.
TEST(CudaPoolParity, MaxPoolTapCodesAndTheirGradientOpsAreTheCpus) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  struct Win {
    IntList size, k, s, p, d;
    bool ceil;
  };
  const Win wins[] = {{{2, 3, 8, 14}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, false},  // OW 7
                      {{1, 2, 5, 7}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, true},    // OW 4, clipped last window
                      {{1, 2, 4, 4}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, false},   // OW 2
                      {{1, 2, 5, 9}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, false},   // padding, overlap: OW 10
                      {{1, 2, 3, 5}, {1, 1}, {1, 1}, {0, 0}, {1, 1}, false},
                      {{1, 2, 4, 9}, {1, 2}, {1, 2}, {0, 1}, {1, 1}, false},
                      {{1, 2, 6, 3}, {2, 1}, {2, 1}, {0, 0}, {1, 1}, true},
                      {{1, 2, 3, 8}, {1, 3}, {1, 2}, {0, 1}, {1, 1}, false},
                      {{1, 2, 1, 3}, {2, 2}, {1, 1}, {1, 1}, {2, 2}, false},   // empty windows: a byte each
                      {{1, 2, 9, 8}, {3, 2}, {2, 3}, {1, 1}, {2, 1}, true},
                      {{1, 1, 20, 21}, {16, 17}, {2, 3}, {0, 0}, {1, 1}, false}};  // Int32
  for (DType dt : kFloatTypes)
    for (const Win& w : wins) {
      Tensor x = to_dtype(to_dtype(random_input(rng, w.size, DType::Float32, 0, 4), DType::Int32), dt);
      set_element(x, 1, std::nan(""));
      const Attrs window{{"kernel_size", w.k}, {"stride", w.s}, {"padding", w.p}, {"dilation", w.d},
                         {"ceil_mode", w.ceil}};
      const std::string what = std::string(short_name(dt)) + " " + shape_str(w.size) + " k" + shape_str(w.k);
      const TensorList cpu = dispatch(*find_op("max_pool2d"), {x}, window);
      const TensorList dev = dispatch(*find_op("max_pool2d"), {on_cuda(x)}, window);
      EXPECT_TRUE(exact(cpu[0], dev[0], "max_pool2d values " + what));
      EXPECT_TRUE(exact(cpu[1], dev[1], "max_pool2d tap codes " + what));
      Attrs battrs = window;
      battrs.set("input_size", w.size);
      const Tensor g = random_input(rng, cpu[0].sizes(), dt);
      EXPECT_TRUE(exact(dispatch1(*find_op("max_pool2d_tap_backward"), {g, cpu[1]}, battrs),
                        dispatch1(*find_op("max_pool2d_tap_backward"), {on_cuda(g), dev[1]}, battrs),
                        "max_pool2d_tap_backward " + what));
      const Tensor G = random_input(rng, w.size, dt);
      EXPECT_TRUE(exact(dispatch1(*find_op("max_pool2d_tap_gather"), {G, cpu[1]}, window),
                        dispatch1(*find_op("max_pool2d_tap_gather"), {on_cuda(G), dev[1]}, window),
                        "max_pool2d_tap_gather " + what));
    }
}

// Codes made by hand that are no tap of their window (code 3 of a 1x3 window: the CPU refuses
// them) give nothing on the device: no gradient, a gathered 0, never another pixel's value.
TEST(CudaPoolParity, MaxPoolTapCodesOutsideTheWindowGiveNothingOnTheDevice) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "the CPU refuses these codes (SavedState.MaxPoolTapOpsRefuseACodeOutsideTheWindow)";
  const Attrs window{{"kernel_size", IntList{1, 3}}, {"stride", IntList{1, 2}}, {"padding", IntList{0, 1}},
                     {"dilation", IntList{1, 1}}, {"ceil_mode", false}};
  Attrs battrs = window;
  battrs.set("input_size", IntList{1, 1, 2, 8});
  const Tensor taps = on_cuda(full({1, 1, 2, 1}, 0xFF, TensorOptions(DType::UInt8)));  // code 3 for all (2, 4)
  const Tensor gx = dispatch1(*find_op("max_pool2d_tap_backward"), {on_cuda(ones({1, 1, 2, 4})), taps}, battrs);
  EXPECT_TRUE(exact(zeros({1, 1, 2, 8}), gx, "max_pool2d_tap_backward of codes outside the window"));
  const Tensor y = dispatch1(*find_op("max_pool2d_tap_gather"), {on_cuda(ones({1, 1, 2, 8})), taps}, window);
  EXPECT_TRUE(exact(zeros({1, 1, 2, 4}), y, "max_pool2d_tap_gather of codes outside the window"));
}

// Mean pooling: window sums in acc_t in the CPU's order, one division, one rounding: exact; the
// backward gathers in the CPU's accumulation order: exact too.
TEST(CudaPoolParity, AvgAndAdaptiveAvgPoolAndTheirBackwardsAreExact) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  for (DType dt : kFloatTypes) {
    const Tensor x = random_input(rng, {2, 3, 11, 10}, dt);
    const std::string t = short_name(dt);
    struct Win {
      IntList k, s, p;
      bool ceil, include_pad;
    };
    for (const Win& w : {Win{{2, 2}, {2, 2}, {0, 0}, false, true}, Win{{3, 3}, {2, 2}, {1, 1}, true, true},
                         Win{{3, 2}, {1, 2}, {1, 1}, true, false}}) {
      const std::string what = t + " k" + shape_str(w.k) + " s" + shape_str(w.s) + " p" + shape_str(w.p);
      const Tensor y = avg_pool2d(x, w.k, w.s, w.p, w.ceil, w.include_pad);
      EXPECT_TRUE(exact(y, avg_pool2d(on_cuda(x), w.k, w.s, w.p, w.ceil, w.include_pad), "avg_pool2d " + what));
      const Tensor g = random_input(rng, y.sizes(), dt);
      EXPECT_TRUE(exact(avg_pool2d_backward(g, x.sizes(), w.k, w.s, w.p, w.ceil, w.include_pad),
                        avg_pool2d_backward(on_cuda(g), x.sizes(), w.k, w.s, w.p, w.ceil, w.include_pad),
                        "avg_pool2d_backward " + what));
    }
    for (const IntList& out : {IntList{1, 1}, IntList{4, 3}, IntList{11, 10}}) {
      const Tensor y = adaptive_avg_pool2d(x, out);
      EXPECT_TRUE(exact(y, adaptive_avg_pool2d(on_cuda(x), out), "adaptive_avg_pool2d " + t + shape_str(out)));
      const Tensor g = random_input(rng, y.sizes(), dt);
      EXPECT_TRUE(exact(adaptive_avg_pool2d_backward(g, x.sizes()), adaptive_avg_pool2d_backward(on_cuda(g), x.sizes()),
                        "adaptive_avg_pool2d_backward " + t + shape_str(out)));
    }
  }
}

}  // namespace
}  // namespace mixtape
