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

// A 2x2 pool keeps 2 bits per output, packed per output row: ceil(OW / 4) bytes a row (byte codes
// would be OW), never the activation.
TEST(SavedState, MaxPoolKeepsTwoBitsPerOutputOfA2x2Window) {
  for (DType dt : {DType::Float32, DType::BFloat16}) {
    Tensor z = randn({8, 16, 28, 28}).to(dt).requires_grad_();
    const int64_t n = z.numel(), codes = 8 * 16 * 14 * ((14 + 3) / 4);
    // relu -> max_pool2d(2): the mask (n / 8 bytes) and 2-bit codes (4 bytes a row of 14 outputs);
    // neither op keeps the (n * element size) activation between them.
    const int64_t kept = kept_by([&] { return max_pool2d(relu(z), {2, 2}).sum(); });
    EXPECT_LE(kept, n / 8 + codes + 512) << dtype_name(dt) << ": " << kept << " bytes kept, the activation is "
                                         << n * static_cast<int64_t>(element_size(dt));
  }
  for (int64_t W : {2, 6, 8, 10, 28, 34}) {
    const Tensor x = randn({2, 3, 4, W});
    const Tensor taps = dispatch(*find_op("max_pool2d"), {x},
                                 {{"kernel_size", IntList{2, 2}}, {"stride", IntList{2, 2}},
                                  {"padding", IntList{0, 0}}, {"dilation", IntList{1, 1}}, {"ceil_mode", false}})[1];
    EXPECT_EQ(taps.dtype(), DType::UInt8);
    EXPECT_EQ(taps.sizes(), (IntList{2, 3, 2, (W / 2 + 3) / 4})) << "W=" << W;
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

struct PoolWindow {
  IntList k, s, p, d;
  bool ceil;
  Attrs attrs() const {
    return {{"kernel_size", k}, {"stride", s}, {"padding", p}, {"dilation", d}, {"ceil_mode", ceil}};
  }
};

// The 2-bit format of ops/max_pool_taps.h, read by hand: code (plane, oh, ow) is bits 2 (ow % 4) of
// byte ow / 4 of the plane's row oh; every pad bit is 0.
int64_t packed_code(const Tensor& taps, int64_t plane, int64_t oh, int64_t ow) {
  const int64_t row = taps.size(3);
  const auto byte = static_cast<int64_t>(get_element(taps, (plane * taps.size(2) + oh) * row + ow / 4));
  return (byte >> (2 * (ow % 4))) & 3;
}

// Windows of at most 4 taps that are never empty keep 2-bit codes, each the tap (m kW + n over
// the unclipped window) of the index max_pool2d_with_indices returns, with every entry that takes
// the window (2x2_avx512 in its pass, 2x2_sse2 from the output, generic from indices); ties, NaN,
// infinities, padding; widths whose last byte is partial (OW % 4 != 0), OW < 4, OW = 1.
TEST(SavedState, MaxPoolPacked2BitCodesAreTheTapsOfTheIndices) {
  const PoolWindow windows[] = {{{2, 2}, {2, 2}, {0, 0}, {1, 1}, false}, {{2, 2}, {2, 2}, {0, 0}, {1, 1}, true},
                                {{2, 2}, {1, 1}, {1, 1}, {1, 1}, false},  // padding, overlap
                                {{2, 2}, {2, 2}, {1, 1}, {1, 1}, true},   {{2, 2}, {1, 2}, {0, 1}, {2, 1}, false},
                                {{1, 1}, {1, 1}, {0, 0}, {1, 1}, false},  {{1, 2}, {1, 2}, {0, 1}, {1, 1}, false},
                                {{2, 1}, {2, 1}, {0, 0}, {1, 1}, true},   {{1, 3}, {1, 2}, {0, 1}, {1, 1}, false},
                                {{4, 1}, {2, 1}, {2, 0}, {1, 1}, false}};
  const IntList sizes[] = {{1, 2, 2, 2}, {2, 1, 4, 6}, {1, 2, 5, 9}, {1, 1, 3, 10}, {2, 2, 6, 33}, {1, 2, 4, 67}};
  for (const PoolWindow& w : windows) {
    int checked = 0;  // geometries this window gives an output on
    for (const IntList& size : sizes)
      for (DType dt : {DType::Float32, DType::BFloat16, DType::Float16, DType::Float64}) {
        int64_t n = 1;
        for (int64_t v : size) n *= v;
        const Tensor x = specials(n, 31 + n).to(dt).reshape(size);
        Tensor idx;
        const std::string too_small =
            error_of([&] { idx = max_pool2d_with_indices(x, w.k, w.s, w.p, w.d, w.ceil).second; });
        if (!idx.defined()) {  // an output under 1x1 (a dilated window on 2 rows)
          EXPECT_NE(too_small.find("output size is too small"), std::string::npos) << too_small;
          continue;
        }
        ++checked;
        const int64_t OH = idx.size(2), OW = idx.size(3), W = size[3];
        for (const std::string entry : {"generic", "2x2_sse2", "2x2_scalar", "2x2_avx512"}) {
          Tensor taps;
          {
            cpu::Override force(cpu::KernelSpec{"max_pool2d.fwd:" + entry});
            const std::string e = error_of([&] { taps = dispatch(*find_op("max_pool2d"), {x}, w.attrs())[1]; });
            if (!taps.defined()) {
              EXPECT_NE(e.find("does not apply"), std::string::npos) << e;
              continue;
            }
          }
          const std::string what = entry + " " + std::string(dtype_name(dt)) + " " + shape_str(size) + " k" +
                                   shape_str(w.k) +
                                   " s" + shape_str(w.s) + " p" + shape_str(w.p) + " d" + shape_str(w.d);
          ASSERT_EQ(taps.dtype(), DType::UInt8) << what;
          ASSERT_EQ(taps.sizes(), (IntList{size[0], size[1], OH, (OW + 3) / 4})) << what;
          for (int64_t p = 0; p < size[0] * size[1]; ++p)
            for (int64_t oh = 0; oh < OH; ++oh) {
              for (int64_t ow = 0; ow < OW; ++ow) {
                const auto i = static_cast<int64_t>(get_element(idx, (p * OH + oh) * OW + ow));
                ASSERT_GE(i, 0) << what;  // never an empty window
                const int64_t m = (i / W - (oh * w.s[0] - w.p[0])) / w.d[0];
                const int64_t c = (i % W - (ow * w.s[1] - w.p[1])) / w.d[1];
                EXPECT_EQ(packed_code(taps, p, oh, ow), m * w.k[1] + c)
                    << what << " at " << p << "," << oh << "," << ow;
              }
              if (OW % 4 != 0) {
                const auto last = static_cast<int64_t>(get_element(taps, (p * OH + oh) * taps.size(3) + OW / 4));
                EXPECT_EQ(last >> (2 * (OW % 4)), 0) << what << ": pad bits of row " << oh;
              }
            }
        }
      }
    EXPECT_GE(checked, 20) << "k" << shape_str(w.k);
  }
}

// Windows of more than 4 taps, or whose window can lie wholly in padding (a dilation that jumps
// over the input), keep a byte per output (255 = none).
TEST(SavedState, MaxPoolKeepsByteCodesWhereAWindowCanBeEmptyOrHasMoreThan4Taps) {
  const Tensor x = randn({1, 2, 1, 3});  // 2x2, dilation 2, padding 1: row windows wholly in padding
  const Tensor taps =
      dispatch(*find_op("max_pool2d"), {x}, PoolWindow{{2, 2}, {1, 1}, {1, 1}, {2, 2}, false}.attrs())[1];
  EXPECT_EQ(taps.dtype(), DType::UInt8);
  EXPECT_EQ(taps.sizes(), (IntList{1, 2, 1, 3}));
  EXPECT_EQ(get_element(taps, 0), 255.0);  // row 0's window: taps at rows -1 and 1, both outside
  const Tensor t3 = dispatch(*find_op("max_pool2d"), {randn({1, 1, 6, 6})},
                             PoolWindow{{3, 2}, {2, 2}, {0, 0}, {1, 1}, false}.attrs())[1];  // 6 taps
  EXPECT_EQ(t3.sizes(), (IntList{1, 1, 2, 3}));
}

// Double backward through max_pool2d's codes: d(x.grad)/d(g) applied to G is G at each winner,
// what gather on PyTorch's indices gives, for packed and byte codes.
TEST(SavedState, MaxPoolDoubleBackwardFromTapsIsTheIndexGather) {
  const PoolWindow windows[] = {{{2, 2}, {2, 2}, {0, 0}, {1, 1}, false},
                                {{2, 2}, {1, 1}, {1, 1}, {1, 1}, true},
                                {{1, 2}, {1, 2}, {0, 1}, {1, 1}, false},
                                {{3, 3}, {2, 2}, {1, 1}, {1, 1}, false}};
  for (const PoolWindow& w : windows)
    for (DType dt : {DType::Float32, DType::BFloat16}) {
      const IntList size{2, 2, 7, 9};
      const Tensor x0 = specials(252, 41).to(dt).reshape(size);
      Tensor x = x0.clone().requires_grad_();
      Tensor y = max_pool2d(x, w.k, w.s, w.p, w.d, w.ceil);
      Tensor g = abs(specials(y.numel(), 42)).to(dt).reshape(y.sizes()).requires_grad_();
      autograd::backward({y}, {g}, /*retain_graph=*/false, /*create_graph=*/true);
      const Tensor G = specials(252, 43).to(dt).reshape(size);
      autograd::backward({x.grad()}, {G});
      const Tensor idx = max_pool2d_with_indices(x0, w.k, w.s, w.p, w.d, w.ceil).second;
      const Tensor want =
          gather(G.reshape({2, 2, 63}), 2, idx.reshape({2, 2, idx.size(2) * idx.size(3)})).reshape(idx.sizes());
      EXPECT_TRUE(bit_equal(g.grad(), want)) << dtype_name(dt) << " k" << shape_str(w.k);
    }
}

// Codes made by hand: a 2-bit code that is no tap of its window (code 3 of a 1x3 window) or a tap
// in the padding is refused by name by both gradient ops.
TEST(SavedState, MaxPoolTapOpsRefuseACodeOutsideTheWindow) {
  // 1x3 windows, stride 2, padding 1 on (2, 8): (OH, OW) = (2, 4), one code byte a row; window
  // (oh, 0)'s taps are columns -1 (padding), 0, 1.
  Attrs attrs = PoolWindow{{1, 3}, {1, 2}, {0, 1}, {1, 1}, false}.attrs();
  const Attrs gather_attrs = attrs;
  attrs.set("input_size", IntList{1, 1, 2, 8});
  for (const auto& [byte, code] : {std::pair{0x03, 3}, std::pair{0x04, 0}}) {  // (0, 0): code 3; code 0 (padding)
    Tensor taps = full({1, 1, 2, 1}, 0x55, TensorOptions(DType::UInt8));   // code 1 everywhere: in the plane
    set_element(taps, 0, byte);
    for (DType dt : {DType::Float32, DType::BFloat16}) {
      const std::string want = "tap code " + std::to_string(code) + " is not a tap inside the plane of its 1x3 window";
      const std::string e = error_of(
          [&] { (void)dispatch1(*find_op("max_pool2d_tap_backward"), {ones({1, 1, 2, 4}).to(dt), taps}, attrs); });
      EXPECT_NE(e.find("max_pool2d_tap_backward: " + want), std::string::npos) << e;
      const std::string eg = error_of(
          [&] { (void)dispatch1(*find_op("max_pool2d_tap_gather"), {ones({1, 1, 2, 8}).to(dt), taps}, gather_attrs); });
      EXPECT_NE(eg.find("max_pool2d_tap_gather: " + want), std::string::npos) << eg;
    }
  }
}

// A 2x2 window inside the plane has a tap for every 2-bit code, so codes made by hand need no
// check there; the pad bits of a row's last byte are never read (every entry, both gradient ops).
TEST(SavedState, MaxPoolTapOpsReadNoPadBits) {
  const IntList size{1, 2, 4, 10};  // OW = 5: 2 bytes a row, the second with 6 pad bits
  const Attrs window = PoolWindow{{2, 2}, {2, 2}, {0, 0}, {1, 1}, false}.attrs();
  Attrs battrs = window;
  battrs.set("input_size", size);
  const Tensor x = specials(80, 51).reshape(size), g = specials(20, 52).reshape({1, 2, 2, 5});
  const Tensor taps = dispatch(*find_op("max_pool2d"), {x}, window)[1];
  Tensor dirty = taps.clone();
  for (int64_t r = 0; r < 4; ++r) set_element(dirty, 2 * r + 1, get_element(taps, 2 * r + 1) + 0xFC);
  for (const std::string entry : {"generic", "2x2_sse2", "2x2_avx512"}) {
    if (entry == "2x2_avx512" && !cpu::isa_avx512()) continue;
    cpu::Override force(cpu::KernelSpec{"max_pool2d.bwd:" + entry});
    for (DType dt : {DType::Float32, DType::BFloat16}) {
      const Tensor gd = g.to(dt), xd = x.to(dt);
      EXPECT_TRUE(bit_equal(dispatch1(*find_op("max_pool2d_tap_backward"), {gd, dirty}, battrs),
                            dispatch1(*find_op("max_pool2d_tap_backward"), {gd, taps}, battrs)))
          << entry << " " << dtype_name(dt);
      EXPECT_TRUE(bit_equal(dispatch1(*find_op("max_pool2d_tap_gather"), {xd, dirty}, window),
                            dispatch1(*find_op("max_pool2d_tap_gather"), {xd, taps}, window)))
          << entry << " " << dtype_name(dt);
    }
  }
}

// Codes of another format's shape are refused by name with the shape the window and input fix.
TEST(SavedState, MaxPoolTapOpsRefuseCodesOfTheWrongShape) {
  Attrs attrs = PoolWindow{{2, 2}, {2, 2}, {0, 0}, {1, 1}, false}.attrs();
  attrs.set("input_size", IntList{1, 1, 4, 10});
  const Tensor bytes = zeros({1, 1, 2, 5}, DType::UInt8);  // a byte per output
  const std::string e =
      error_of([&] { (void)dispatch1(*find_op("max_pool2d_tap_backward"), {ones({1, 1, 2, 5}), bytes}, attrs); });
  EXPECT_NE(e.find("max_pool2d_tap_backward: expected UInt8 tap codes of shape [1, 1, 2, 2] (a 2x2 window: 2-bit "
                   "codes, 4 per byte of each output row of 5), got"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find(bytes.describe()), std::string::npos) << e;
  // A 3x3 window keeps a byte per output: packed codes are refused.
  Attrs a3 = PoolWindow{{3, 3}, {2, 2}, {1, 1}, {1, 1}, false}.attrs();
  const std::string e3 = error_of([&] {
    (void)dispatch1(*find_op("max_pool2d_tap_gather"), {ones({1, 1, 4, 10}), zeros({1, 1, 2, 2}, DType::UInt8)}, a3);
  });
  EXPECT_NE(e3.find("max_pool2d_tap_gather: expected UInt8 tap codes of shape [1, 1, 2, 5] (a 3x3 window over a "
                    "pooled width of 5), got"),
            std::string::npos)
      << e3;
}

}  // namespace
}  // namespace mixtape::testing
