// tests/ops/test_saved_state.cpp — what relu and max_pool2d keep for backward: relu a bit mask
// (ops/relu_mask.h), max_pool2d a tap code per output (ops/max_pool_taps.h). The bytes kept, and
// that the gradients from them are the bits of the gradients from the full tensors (relu_grad on
// the output; max_pool2d_backward on PyTorch's indices), ties, NaN, zeros and padding included.
// Their samples (gradcheck, double backward, 16-bit, CUDA parity) are with the op definitions.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/bit_equal.h"
#include "common/error_of.h"
#include "mixtape/mixtape.h"
#include "ops/cpu/isa.h"
#include "ops/cpu/steering.h"
#include "ops/relu_mask.h"

namespace mixtape::testing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Values with every special relu and max pooling care about: +-0, NaN, +-inf, ties (a few small
// integers repeat), tiny values that round to 0 in 16 bits.
Tensor specials(int64_t n, uint64_t seed) {
  Generator g(seed);
  Tensor r = randn({n}, {}, &g);
  Tensor out = Tensor::empty({n}, TensorOptions(DType::Float64));
  const double pick[] = {0.0, -0.0, kNaN, kInf, -kInf, 1.0, -1.0, 2.0, 1e-30, -1e-30};
  for (int64_t i = 0; i < n; ++i) {
    const double v = get_element(r, i);
    set_element(out, i, i % 3 == 0 ? pick[(i / 3) % 10] : std::round(v * 2.0));
  }
  return out;
}

// The bytes the allocator holds after `fn` ran and its temporaries went, beyond before.
template <typename Fn>
int64_t kept_by(Fn&& fn) {
  const int64_t before = memory_stats().current_bytes;
  Tensor keep = fn();
  return memory_stats().current_bytes - before;
}

TEST(SavedState, ReluKeepsOneBitPerElementNotItsOutput) {
  for (DType dt : {DType::Float32, DType::BFloat16}) {
    Tensor x = randn({64, 1000}).to(dt).requires_grad_();
    const int64_t out_bytes = x.numel() * static_cast<int64_t>(element_size(dt));
    // The sum keeps nothing of relu's output: what stays is relu's saved state (and the scalar).
    const int64_t kept = kept_by([&] { return relu(x).sum(); });
    EXPECT_LE(kept, x.numel() / 8 + 256) << dtype_name(dt) << ": " << kept << " bytes kept, the output is "
                                         << out_bytes;
  }
  autograd::NoGradGuard no_grad;  // not recorded: no mask at all
  Tensor x = randn({64, 1000}).requires_grad_();
  EXPECT_LE(kept_by([&] { return relu(x).sum(); }), 256);
}

TEST(SavedState, ReluMaskGradIsReluGradBitForBit) {
  for (DType dt : {DType::Float32, DType::BFloat16, DType::Float16, DType::Float64}) {
    for (int64_t n : {1, 7, 8, 9, 4099}) {
      const Tensor x = specials(n, 11 + n).to(dt), g = specials(n, 12 + n).to(dt);
      const Tensor mask = relu_mask_of(x);
      ASSERT_EQ(mask.dtype(), DType::UInt8);
      ASSERT_EQ(mask.numel(), (n + 7) / 8);
      EXPECT_TRUE(bit_equal(relu_mask_grad(g, mask), relu_grad(g, relu(x)))) << dtype_name(dt) << " n=" << n;
    }
    // A strided grad and a strided input: the mask follows the row-major order of the output.
    const Tensor x = specials(35, 3).to(dt).reshape({5, 7}).t(), g = specials(35, 4).to(dt).reshape({7, 5});
    EXPECT_TRUE(bit_equal(relu_mask_grad(g, relu_mask_of(x)), relu_grad(g, relu(x)))) << dtype_name(dt);
    EXPECT_TRUE(bit_equal(relu_mask_grad(g.t().contiguous().t(), relu_mask_of(x)), relu_grad(g, relu(x))));
  }
}

// relu with its mask (one AVX-512 pass for contiguous f32 and BF16, a scalar tail) gives the
// output of relu without it (the pointwise loop), and the mask of that output; lengths around
// the 16- and 32-value blocks.
TEST(SavedState, ReluWithItsMaskGivesThePlainReluOutput) {
  for (DType dt : {DType::Float32, DType::BFloat16, DType::Float16}) {
    for (int64_t n : {1, 7, 15, 16, 17, 31, 32, 33, 100, 4099}) {
      const Tensor x = specials(n, 21 + n).to(dt), g = specials(n, 22 + n).to(dt);
      const TensorList with = dispatch(*find_op("relu"), {x}, {{"mask", true}});
      const Tensor plain = dispatch(*find_op("relu"), {x}, {{"mask", false}})[0];
      EXPECT_TRUE(bit_equal(with[0], plain)) << dtype_name(dt) << " n=" << n;
      EXPECT_TRUE(bit_equal(relu_mask_grad(g, with[1]), relu_grad(g, plain))) << dtype_name(dt) << " n=" << n;
    }
  }
}

TEST(SavedState, ReluBackwardAndDoubleBackwardMatchTheOutputRule) {
  for (DType dt : {DType::Float32, DType::BFloat16}) {
    const Tensor x0 = specials(1000, 5).to(dt), g0 = specials(1000, 6).to(dt);
    Tensor x = x0.clone().requires_grad_();
    Tensor gg = g0.clone().requires_grad_();
    autograd::backward({relu(x)}, {gg}, /*retain_graph=*/false, /*create_graph=*/true);
    const Tensor gx = x.grad();
    EXPECT_TRUE(bit_equal(gx.detach(), relu_grad(g0, relu(x0)))) << dtype_name(dt);
    // d(gx)/d(gg) applied to ones: the mask itself, as relu_grad(ones, out) gives
    autograd::backward({gx}, {ones_like(gx)});
    EXPECT_TRUE(bit_equal(gg.grad(), relu_grad(ones_like(g0), relu(x0)))) << dtype_name(dt);
  }
}

TEST(SavedState, ReluMaskGradRefusesAMaskOfAnotherSize) {
  const std::string e = error_of([] { (void)relu_mask_grad(ones({10}), zeros({1}, DType::UInt8)); });
  EXPECT_NE(e.find("relu_mask_grad: expected a UInt8 mask of 2 bytes (one bit per element of grad"),
            std::string::npos)
      << e;
  const std::string d = error_of([] { (void)relu_mask_grad(ones({10}), zeros({2})); });
  EXPECT_NE(d.find("relu_mask_grad: expected a UInt8 mask of 2 bytes"), std::string::npos) << d;
}

TEST(SavedState, MaxPoolKeepsOneByteCodePerOutputNotItsInput) {
  for (DType dt : {DType::Float32, DType::BFloat16}) {
    Tensor z = randn({8, 16, 28, 28}).to(dt).requires_grad_();
    const int64_t n = z.numel();
    // relu -> max_pool2d(2): the mask (n / 8 bytes) and a UInt8 code per output (n / 4 bytes);
    // neither op keeps the (n * element size) activation between them.
    const int64_t kept = kept_by([&] { return max_pool2d(relu(z), {2, 2}).sum(); });
    EXPECT_LE(kept, n / 8 + n / 4 + 512) << dtype_name(dt) << ": " << kept << " bytes kept, the activation is "
                                         << n * static_cast<int64_t>(element_size(dt));
  }
}

// max_pool2d's gradient (from its tap codes) against max_pool2d_backward on the Int64 indices of
// max_pool2d_with_indices (PyTorch's route): the same winners for ties (first of equal maxima),
// NaN (propagates), padding (never chosen) and windows wholly in padding (no gradient).
TEST(SavedState, MaxPoolGradientFromTapsIsTheIndexScatter) {
  struct Window {
    IntList size, k, s, p, d;
    bool ceil;
  };
  const Window windows[] = {{{2, 3, 8, 10}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, false},
                            {{2, 3, 9, 11}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, true},
                            {{1, 2, 7, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, false},
                            {{1, 2, 9, 8}, {3, 2}, {2, 3}, {1, 1}, {2, 1}, true},
                            {{1, 2, 1, 3}, {2, 2}, {1, 1}, {1, 1}, {2, 2}, false},  // windows all padding
                            {{1, 2, 20, 21}, {16, 17}, {2, 3}, {0, 0}, {1, 1}, false}};  // Int32 codes
  for (const Window& w : windows)
    for (DType dt : {DType::Float32, DType::BFloat16, DType::Float16, DType::Float64}) {
      int64_t n = 1;
      for (int64_t v : w.size) n *= v;
      const Tensor x0 = specials(n, 7 + n).to(dt).reshape(w.size);
      Tensor x = x0.clone().requires_grad_();
      Tensor y = max_pool2d(x, w.k, w.s, w.p, w.d, w.ceil);
      const Tensor g = abs(specials(y.numel(), 8)).to(dt).reshape(y.sizes());
      y.backward(g);
      auto [yi, idx] = max_pool2d_with_indices(x0, w.k, w.s, w.p, w.d, w.ceil);
      EXPECT_TRUE(bit_equal(y.detach(), yi)) << dtype_name(dt) << " " << shape_str(w.size);
      EXPECT_TRUE(bit_equal(x.grad(), max_pool2d_backward(g, idx, w.size)))
          << dtype_name(dt) << " " << shape_str(w.size);
    }
}

// The tap codes max_pool2d keeps, from each 2x2 entry (2x2_avx512 writes them in its pass, 2x2_sse2
// derives them from the output) against the generic loop's (from its indices), with ties, NaN,
// signed zeros and infinities, on plane widths that end in a partial AVX-512 block and in an odd
// column, and the gradient from them.
TEST(SavedState, MaxPoolTapCodesOfEveryEntryAreTheGenericOnes) {
  const IntList sizes[] = {{2, 3, 28, 28}, {1, 2, 14, 14}, {1, 3, 9, 67}, {2, 2, 6, 33}, {1, 1, 2, 2}};
  for (const IntList& size : sizes)
    for (DType dt : {DType::Float32, DType::BFloat16, DType::Float16}) {
      int64_t n = 1;
      for (int64_t v : size) n *= v;
      const Tensor x = specials(n, 11 + n).to(dt).reshape(size);
      const Attrs window = {{"kernel_size", IntList{2, 2}}, {"stride", IntList{2, 2}}, {"padding", IntList{0, 0}},
                            {"dilation", IntList{1, 1}}, {"ceil_mode", false}};
      auto run = [&](const std::string& entry) {
        cpu::Override fwd(cpu::KernelSpec{"max_pool2d.fwd:" + entry + ",max_pool2d.bwd:" + entry});
        TensorList r = dispatch(*find_op("max_pool2d"), {x}, window);
        const Tensor g = abs(specials(r[0].numel(), 5)).to(dt).reshape(r[0].sizes());
        Attrs battrs = window;
        battrs.set("input_size", size);
        r.push_back(dispatch1(*find_op("max_pool2d_tap_backward"), {g, r[1]}, battrs));
        return r;
      };
      const TensorList generic = run("generic");
      for (const std::string entry : {"2x2_avx512", "2x2_sse2"}) {
        if (entry == "2x2_avx512" && !cpu::isa_avx512()) continue;
        const TensorList r = run(entry);
        for (size_t i = 0; i < r.size(); ++i)
          EXPECT_TRUE(bit_equal(r[i], generic[i]))
              << entry << " output " << i << " (0 values, 1 codes, 2 gradient) " << dtype_name(dt) << " "
              << shape_str(size);
      }
    }
}

// A code that is no tap of a 2x2 window (above 3) is refused by name, on the AVX-512 pass and the
// scalar loop alike (BF16 and f32 take the first, f16 the second).
TEST(SavedState, MaxPoolTapBackwardRefusesACodeOutsideTheWindow) {
  for (DType dt : {DType::Float32, DType::BFloat16, DType::Float16}) {
    Tensor taps = zeros({32}, DType::UInt8);
    set_element(taps, 21, 4.0);
    Attrs attrs = {{"kernel_size", IntList{2, 2}}, {"stride", IntList{2, 2}}, {"padding", IntList{0, 0}},
                   {"dilation", IntList{1, 1}}, {"ceil_mode", false}, {"input_size", IntList{1, 1, 4, 32}}};
    const std::string e = error_of([&] {
      (void)dispatch1(*find_op("max_pool2d_tap_backward"), {ones({1, 1, 2, 16}).to(dt), taps.reshape({1, 1, 2, 16})},
                      attrs);
    });
    EXPECT_NE(e.find("max_pool2d_tap_backward: tap code 4 is not a tap inside the plane of its 2x2 window"),
              std::string::npos)
        << dtype_name(dt) << ": " << e;
  }
}

}  // namespace
}  // namespace mixtape::testing
