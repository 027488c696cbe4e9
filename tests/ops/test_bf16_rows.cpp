// tests/ops/test_bf16_rows.cpp — the AVX-512 BF16 row kernels give the generic loops' bits: relu
// and its gradient as the bf16_bits loop compiled for AVX-512 BW (ops/cpu/elementwise.h,
// bf16_rows_avx512) — relu on all 65536 patterns, relu's gradient on every pattern of either operand
// against special values of the other; add / sub / mul / div on AVX-512 lanes
// (ops/cpu/bf16_rows_avx512.h) on random patterns (NaNs, infinities, subnormals, zeros and rounding
// ties included) against widen -> float operation -> round; every row length around the 16- and
// 32-lane chunks; and through the ops.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/bfloat16.h"
#include "ops/activation.h"
#include "ops/activation_functors.h"
#include "ops/cpu/bf16_rows_avx512.h"
#include "ops/cpu/elementwise.h"
#include "ops/creation.h"
#include "ops/functors.h"
#include "ops/pointwise.h"
#include "common/bit_equal.h"

namespace mixtape::testing {
namespace {

using Bits = std::vector<uint16_t>;
using cpu::RowOp;

// The kernels under test: the four lane operations, and the AVX-512 build of relu's bit loops.
enum class Op { Add, Sub, Mul, Div, Relu, ReluGrad };

char* bytes(Bits& v) { return reinterpret_cast<char*>(v.data()); }
const char* bytes(const Bits& v) { return reinterpret_cast<const char*>(v.data()); }

// Patterns that matter: zeros, the smallest and largest subnormals and normals, ones, infinities,
// NaNs (quiet, signalling, with payload), each with both signs.
Bits specials() {
  Bits s;
  for (uint16_t m : {0x0000, 0x0001, 0x007F, 0x0080, 0x3F80, 0x3F81, 0x4000, 0x7F7F, 0x7F80, 0x7F81, 0x7FC0, 0x7FFF})
    for (uint16_t sign : {0x0000, 0x8000}) s.push_back(uint16_t(m | sign));
  return s;
}

uint16_t reference(Op op, uint16_t a, uint16_t b) {
  const float x = bfloat16_bits_to_float(a), y = bfloat16_bits_to_float(b);
  switch (op) {
    case Op::Add: return float_to_bfloat16_bits(fn::Add{}(x, y));
    case Op::Sub: return float_to_bfloat16_bits(fn::Sub{}(x, y));
    case Op::Mul: return float_to_bfloat16_bits(fn::Mul{}(x, y));
    case Op::Div: return float_to_bfloat16_bits(fn::Div{}(x, y));
    case Op::Relu: return fn::Relu::bf16_bits(b);
    case Op::ReluGrad: return fn::ReluGrad::bf16_bits(a, b);
  }
  return 0;
}

// out[i] = op(a[i], b[i]) (relu: of b[i]) over n values.
void run(Op op, int64_t n, Bits& out, const Bits& a, const Bits& b) {
  switch (op) {
    case Op::Add: return cpu::bf16_binary_rows(RowOp::Add, n, bytes(out), bytes(a), bytes(b));
    case Op::Sub: return cpu::bf16_binary_rows(RowOp::Sub, n, bytes(out), bytes(a), bytes(b));
    case Op::Mul: return cpu::bf16_binary_rows(RowOp::Mul, n, bytes(out), bytes(a), bytes(b));
    case Op::Div: return cpu::bf16_binary_rows(RowOp::Div, n, bytes(out), bytes(a), bytes(b));
    case Op::Relu: return cpu::bf16_rows_avx512(fn::Relu{}, n, bytes(out), bytes(b));
    case Op::ReluGrad: return cpu::bf16_rows_avx512(fn::ReluGrad{}, n, bytes(out), bytes(a), bytes(b));
  }
}

class Bf16Lanes : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu::bf16_rows_available()) GTEST_SKIP() << "this CPU has no AVX-512 F/BW/VL";
  }
};

TEST_F(Bf16Lanes, ReluOnEveryPattern) {
  Bits in(65536), out(65536, 0xDEAD);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint16_t>(i);
  run(Op::Relu, 65536, out, in, in);
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], fn::Relu::bf16_bits(in[i])) << std::hex << in[i];
}

TEST_F(Bf16Lanes, ReluGradOnEveryPatternOfEitherOperand) {
  const Bits sp = specials();
  Bits all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  for (uint16_t s : sp) {
    const Bits fixed(65536, s);
    Bits out(65536);
    run(Op::ReluGrad, 65536, out, all, fixed);  // every g
    for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(out[i], reference(Op::ReluGrad, all[i], s)) << i << " " << s;
    run(Op::ReluGrad, 65536, out, fixed, all);  // every output
    for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(out[i], reference(Op::ReluGrad, s, all[i])) << s << " " << i;
  }
}

TEST_F(Bf16Lanes, ArithmeticEqualsWidenOperateRound) {
  std::mt19937 rng(5);
  const Bits sp = specials();
  const int64_t n = 1 << 16;
  Bits a(n), b(n), out(n);
  for (int64_t i = 0; i < n; ++i) {
    // A quarter of the operands special, the rest random patterns; exponents near each other half
    // the time, so sums round (ties included: both operands' low bits vary).
    a[i] = i % 4 == 0 ? sp[rng() % sp.size()] : static_cast<uint16_t>(rng());
    b[i] = i % 4 == 1 ? sp[rng() % sp.size()]
           : i % 2 == 0 ? static_cast<uint16_t>((a[i] & 0xFF80u) ^ (rng() & 0x807Fu))
                        : static_cast<uint16_t>(rng());
  }
  auto nan = [](uint16_t v) { return (v & 0x7FFFu) > 0x7F80u; };
  for (Op op : {Op::Add, Op::Sub, Op::Mul, Op::Div}) {
    run(op, n, out, a, b);
    for (int64_t i = 0; i < n; ++i) {
      // Which of two NaN operands x86 hands on depends on the operand order the compiler picked for
      // the scalar loop (the first source's); neither loop promises a payload then, only a quiet NaN.
      if (nan(a[i]) && nan(b[i])) {
        ASSERT_TRUE(out[i] == uint16_t(a[i] | 0x40u) || out[i] == uint16_t(b[i] | 0x40u)) << std::hex << out[i];
        continue;
      }
      ASSERT_EQ(out[i], reference(op, a[i], b[i])) << static_cast<int>(op) << ": " << std::hex << a[i] << " " << b[i];
    }
  }
}

// Row lengths around the 16- and 32-lane chunks: every value written, nothing past the end.
TEST_F(Bf16Lanes, EveryRowLengthWritesExactlyItsValues) {
  for (int64_t n = 0; n <= 70; ++n) {
    SCOPED_TRACE(n);
    Bits a(n + 8), b(n + 8);
    for (int64_t i = 0; i < n + 8; ++i) a[i] = uint16_t(0x3F80 + i), b[i] = uint16_t(i % 3 == 0 ? 0xBF80 : 0x4000 + i);
    for (Op op : {Op::Add, Op::Mul, Op::ReluGrad, Op::Relu}) {
      Bits out(n + 8, 0xABCD);
      run(op, n, out, a, b);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(out[i], op == Op::Relu ? fn::Relu::bf16_bits(b[i]) : reference(op, a[i], b[i])) << i;
      for (int64_t i = n; i < n + 8; ++i) ASSERT_EQ(out[i], 0xABCD) << "wrote past the row at " << i;
    }
  }
}

// Through the ops (contiguous BF16 tensors reach the kernels): the f32 results rounded once.
TEST_F(Bf16Lanes, OpsGiveTheFloatResultRoundedOnce) {
  Generator gen(3);
  const Tensor a = randn({3, 37, 11}, {}, &gen).to(DType::BFloat16), b = randn({3, 37, 11}, {}, &gen).to(DType::BFloat16);
  const Tensor a32 = a.to(DType::Float32), b32 = b.to(DType::Float32);
  EXPECT_TRUE(bit_equal(add(a, b), add(a32, b32).to(DType::BFloat16)));
  EXPECT_TRUE(bit_equal(sub(a, b), sub(a32, b32).to(DType::BFloat16)));
  EXPECT_TRUE(bit_equal(mul(a, b), mul(a32, b32).to(DType::BFloat16)));
  EXPECT_TRUE(bit_equal(div(a, b), div(a32, b32).to(DType::BFloat16)));
  EXPECT_TRUE(bit_equal(relu(a), relu(a32).to(DType::BFloat16)));
}

// Operands the kernels do not take stay on the generic loops, with the same results: a broadcast
// operand, a strided view, a wrapped scalar, a bool-producing comparison.
TEST_F(Bf16Lanes, OtherOperandsKeepTheGenericLoopsResults) {
  Generator gen(4);
  const Tensor a = randn({6, 40}, {}, &gen).to(DType::BFloat16), col = randn({6, 1}, {}, &gen).to(DType::BFloat16);
  const Tensor a32 = a.to(DType::Float32), col32 = col.to(DType::Float32);
  EXPECT_TRUE(bit_equal(add(a, col), add(a32, col32).to(DType::BFloat16)));           // broadcast (stride 0)
  EXPECT_TRUE(bit_equal(mul(a.t(), a.t()), mul(a32.t(), a32.t()).to(DType::BFloat16)));  // strided
  EXPECT_TRUE(bit_equal(relu(a.t()), relu(a32.t()).to(DType::BFloat16)));
  EXPECT_TRUE(bit_equal(mul(a, 0.1), mul(a32, 0.1).to(DType::BFloat16)));             // wrapped scalar
  EXPECT_TRUE(bit_equal(eq(a, a), eq(a32, a32)));                                      // bool output
}

}  // namespace
}  // namespace mixtape::testing
