// tests/cuda_emulator/test_cublas_emulator.cpp — the emulator's cuBLAS (tests/cuda_emulator/cublas.cpp)
// against values worked out independently: hand-computed column-major products for every transpose
// pair with padded leading dimensions, an f64 reference with a tolerance derived from each type's
// unit roundoff for every supported type combination, bit patterns where the single rounding to a
// 16-bit C or the TF32 / fp16 / bf16 input rounding is visible, the documented statuses, and the
// faults a GPU would answer with a crash. Memory goes through the public CUDA runtime API.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/bfloat16.h"
#include "core/half.h"
#include "tests/cuda_emulator/emulator.h"

namespace {

using mixtape::BFloat16;
using mixtape::Half;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

size_t size_of(cudaDataType t) { return t == CUDA_R_64F ? 8 : t == CUDA_R_32F ? 4 : 2; }

// A host array of one CUDA element type: set() rounds to the type (nearest even), get() widens exactly.
struct Typed {
  cudaDataType type;
  std::vector<unsigned char> bytes;

  Typed(cudaDataType t, const std::vector<double>& v) : type(t), bytes(v.size() * size_of(t)) {
    for (size_t i = 0; i < v.size(); ++i) set(i, v[i]);
  }
  static Typed filled(cudaDataType t, size_t n, double fill = 0.0) { return Typed(t, std::vector<double>(n, fill)); }
  size_t size() const { return bytes.size() / size_of(type); }
  void set(size_t i, double v) {
    unsigned char* p = bytes.data() + i * size_of(type);
    if (type == CUDA_R_64F) {
      std::memcpy(p, &v, 8);
    } else if (type == CUDA_R_32F) {
      const float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
    } else if (type == CUDA_R_16F) {
      const Half h(static_cast<float>(v));
      std::memcpy(p, &h, 2);
    } else {
      const BFloat16 b(static_cast<float>(v));
      std::memcpy(p, &b, 2);
    }
  }
  double get(size_t i) const {
    const unsigned char* p = bytes.data() + i * size_of(type);
    if (type == CUDA_R_64F) {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    if (type == CUDA_R_32F) {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    uint16_t b;
    std::memcpy(&b, p, 2);
    return type == CUDA_R_16F ? static_cast<float>(Half::from_bits(b)) : static_cast<float>(BFloat16::from_bits(b));
  }
  uint16_t bits16(size_t i) const {
    uint16_t b;
    std::memcpy(&b, bytes.data() + i * 2, 2);
    return b;
  }
};

// A cudaMalloc copy of a Typed array (on the current device).
struct Device {
  void* ptr = nullptr;
  size_t nbytes = 0;
  explicit Device(const Typed& h) : nbytes(h.bytes.size()) {
    EXPECT_EQ(cudaMalloc(&ptr, nbytes), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, h.bytes.data(), nbytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Device() { cudaFree(ptr); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  Typed read(cudaDataType t) const {
    Typed h = Typed::filled(t, nbytes / size_of(t));
    EXPECT_EQ(cudaMemcpy(h.bytes.data(), ptr, nbytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

struct Handle {
  cublasHandle_t h = nullptr;
  Handle() { EXPECT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS); }
  ~Handle() { cublasDestroy(h); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  operator cublasHandle_t() const { return h; }
};

// alpha / beta as host values of the compute type's scale type.
struct Scalars {
  Half h[2];
  float f[2];
  double d[2];
  Scalars(double alpha, double beta)
      : h{Half(static_cast<float>(alpha)), Half(static_cast<float>(beta))},
        f{static_cast<float>(alpha), static_cast<float>(beta)},
        d{alpha, beta} {}
  const void* get(cublasComputeType_t ct, int which) const {
    if (ct == CUBLAS_COMPUTE_16F || ct == CUBLAS_COMPUTE_16F_PEDANTIC) return &h[which];
    if (ct == CUBLAS_COMPUTE_64F || ct == CUBLAS_COMPUTE_64F_PEDANTIC) return &d[which];
    return &f[which];
  }
  const void* alpha(cublasComputeType_t ct) const { return get(ct, 0); }
  const void* beta(cublasComputeType_t ct) const { return get(ct, 1); }
};

constexpr double kPad = -99.0;  // padding of C: must survive every GEMM

// ---- hand-worked products ----
//
// op(A) (2x3) = [1 2 3; 4 5 6], op(B) (3x4) = [1 0 2 -1; 0 1 1 2; 3 -2 0 1]
// op(A) op(B) (2x4) = [10 -4 4 6; 22 -7 13 12]. m, n, k all differ, so a swapped dimension
// cannot pass. Each operand's storage, column-major with padding rows (NaN in A and B: reading
// one poisons the result; kPad in C: writing one shows):
//   A, op N, lda 4:       1 4 . .   2 5 . .   3 6 . .
//   A, op T (A^T), lda 5: 1 2 3 . .   4 5 6 . .
//   B, op N, ldb 5:       1 0 3 . .   0 1 -2 . .   2 1 0 . .   -1 2 1 . .
//   B, op T (B^T), ldb 6: 1 0 2 -1 . .   0 1 1 2 . .   3 -2 0 1 . .
//   C, ldc 3:             c00 c10 pad   c01 c11 pad   c02 c12 pad   c03 c13 pad
const std::vector<double> kAn = {1, 4, kNaN, kNaN, 2, 5, kNaN, kNaN, 3, 6, kNaN, kNaN};
const std::vector<double> kAt = {1, 2, 3, kNaN, kNaN, 4, 5, 6, kNaN, kNaN};
const std::vector<double> kBn = {1, 0, 3, kNaN, kNaN, 0, 1, -2, kNaN, kNaN, 2, 1, 0, kNaN, kNaN, -1, 2, 1, kNaN, kNaN};
const std::vector<double> kBt = {1, 0, 2, -1, kNaN, kNaN, 0, 1, 1, 2, kNaN, kNaN, 3, -2, 0, 1, kNaN, kNaN};
const std::vector<double> kProduct = {10, 22, kPad, -4, -7, kPad, 4, 13, kPad, 6, 12, kPad};

struct TypeRow {
  cublasComputeType_t compute;
  cudaDataType ab, c;
};
// Combinations whose values (small integers) are exact in every type.
const TypeRow kExactRows[] = {
    {CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F},   {CUBLAS_COMPUTE_32F, CUDA_R_16F, CUDA_R_16F},
    {CUBLAS_COMPUTE_32F, CUDA_R_16BF, CUDA_R_16BF}, {CUBLAS_COMPUTE_64F, CUDA_R_64F, CUDA_R_64F},
    {CUBLAS_COMPUTE_16F, CUDA_R_16F, CUDA_R_16F},
};

void expect_same(const Typed& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i]))
      EXPECT_TRUE(std::isnan(got.get(i))) << what << " element " << i;
    else
      EXPECT_EQ(got.get(i), want[i]) << what << " element " << i;
  }
}

TEST(CublasEmulator, HandWorkedProductEveryTransposeWithPaddedLeadingDimensions) {
  Handle h;
  struct Case {
    cublasOperation_t ta, tb;
  };
  // CUBLAS_OP_C is the plain transpose for real types.
  const Case cases[] = {{CUBLAS_OP_N, CUBLAS_OP_N},
                        {CUBLAS_OP_T, CUBLAS_OP_N},
                        {CUBLAS_OP_N, CUBLAS_OP_T},
                        {CUBLAS_OP_T, CUBLAS_OP_T},
                        {CUBLAS_OP_C, CUBLAS_OP_C}};
  for (const TypeRow& row : kExactRows)
    for (const Case& cs : cases) {
      const bool ta = cs.ta != CUBLAS_OP_N, tb = cs.tb != CUBLAS_OP_N;
      Device a(Typed(row.ab, ta ? kAt : kAn)), b(Typed(row.ab, tb ? kBt : kBn));
      Typed c0 = Typed::filled(row.c, 12, 1000.0);  // beta = 0: overwritten, never read
      for (size_t i = 2; i < 12; i += 3) c0.set(i, kPad);
      Device c(c0);
      const Scalars s(1.0, 0.0);
      ASSERT_EQ(cublasGemmEx(h, cs.ta, cs.tb, 2, 4, 3, s.alpha(row.compute), a.ptr, row.ab, ta ? 5 : 4, b.ptr, row.ab,
                             tb ? 6 : 5, s.beta(row.compute), c.ptr, row.c, 3, row.compute, CUBLAS_GEMM_DEFAULT),
                CUBLAS_STATUS_SUCCESS);
      expect_same(c.read(row.c), kProduct, "op(A) op(B)");
    }
}

TEST(CublasEmulator, AlphaAndBetaScale) {
  // 0.5 * [10 -4 4 6; 22 -7 13 12] - 2 * [1 2 3 4; 5 6 7 8] = [3 -6 -4 -5; 1 -15.5 -7.5 -10]
  Handle h;
  for (const TypeRow& row : kExactRows) {
    Device a(Typed(row.ab, kAn)), b(Typed(row.ab, kBn));
    Device c(Typed(row.c, {1, 5, kPad, 2, 6, kPad, 3, 7, kPad, 4, 8, kPad}));
    const Scalars s(0.5, -2.0);
    ASSERT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 4, 3, s.alpha(row.compute), a.ptr, row.ab, 4, b.ptr, row.ab,
                           5, s.beta(row.compute), c.ptr, row.c, 3, row.compute, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    expect_same(c.read(row.c), {3, 1, kPad, -6, -15.5, kPad, -4, -7.5, kPad, -5, -10, kPad}, "alpha/beta");
  }
}

TEST(CublasEmulator, BetaZeroDoesNotReadC) {
  // The reference: "if beta == 0, C does not have to be a valid input", so NaN and inf in C must
  // not reach the result (0 * NaN would be NaN). alpha = 2 doubles the product.
  Handle h;
  std::vector<double> twice = kProduct;
  for (double& v : twice)
    if (v != kPad) v *= 2;
  for (const TypeRow& row : kExactRows) {
    Device a(Typed(row.ab, kAn)), b(Typed(row.ab, kBn));
    Typed c0 = Typed::filled(row.c, 12, kNaN);
    c0.set(1, INFINITY);
    c0.set(3, -INFINITY);
    for (size_t i = 2; i < 12; i += 3) c0.set(i, kPad);
    Device c(c0);
    const Scalars s(2.0, 0.0);
    ASSERT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 4, 3, s.alpha(row.compute), a.ptr, row.ab, 4, b.ptr, row.ab,
                           5, s.beta(row.compute), c.ptr, row.c, 3, row.compute, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    expect_same(c.read(row.c), twice, "alpha = 2, beta = 0 over NaN");
  }
  // With beta != 0, C is read: the NaN comes through.
  Device a(Typed(CUDA_R_32F, kAn)), b(Typed(CUDA_R_32F, kBn)), c(Typed::filled(CUDA_R_32F, 12, kNaN));
  const float one = 1.0f;
  ASSERT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 4, 3, &one, a.ptr, CUDA_R_32F, 4, b.ptr, CUDA_R_32F, 5, &one,
                         c.ptr, CUDA_R_32F, 3, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_TRUE(std::isnan(c.read(CUDA_R_32F).get(0)));
}

TEST(CublasEmulator, EmptyDimensions) {
  Handle h;
  const float one = 1.0f, three = 3.0f, zero = 0.0f;
  // m == 0 or n == 0: nothing is computed, no operand is touched (null pointers are fine).
  EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 0, 4, 3, &one, nullptr, CUDA_R_32F, 1, nullptr, CUDA_R_32F, 3,
                         &one, nullptr, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 0, 3, &one, nullptr, CUDA_R_32F, 2, nullptr, CUDA_R_32F, 3,
                         &one, nullptr, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  // k == 0: an empty sum, C = beta * C; A and B are empty and never read.
  Device c(Typed(CUDA_R_32F, {1, 2, kPad, 3, 4, kPad}));
  EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 0, &one, nullptr, CUDA_R_32F, 2, nullptr, CUDA_R_32F, 1,
                         &three, c.ptr, CUDA_R_32F, 3, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  expect_same(c.read(CUDA_R_32F), {3, 6, kPad, 9, 12, kPad}, "k = 0, beta = 3");
  Device cn(Typed(CUDA_R_32F, {kNaN, kNaN, kPad, kNaN, kNaN, kPad}));
  EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 0, &one, nullptr, CUDA_R_32F, 2, nullptr, CUDA_R_32F, 1,
                         &zero, cn.ptr, CUDA_R_32F, 3, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  expect_same(cn.read(CUDA_R_32F), {0, 0, kPad, 0, 0, kPad}, "k = 0, beta = 0 over NaN");
}

// ---- every supported combination against an f64 reference ----

struct Row {
  cublasComputeType_t compute;
  cudaDataType ab, c;
  double u_acc;  // unit roundoff of the accumulation (compute type)
  double u_in;   // unit roundoff of the inputs' down-conversion the compute type allows (0: none)
  const char* name;
};
constexpr double kU16 = 0x1p-11, kUbf16 = 0x1p-8, kUtf32 = 0x1p-11, kU32 = 0x1p-24, kU64 = 0x1p-53;
// cublasGemmEx's table of (compute type, Atype/Btype, Ctype) for real floating-point types.
const Row kSupported[] = {
    {CUBLAS_COMPUTE_16F, CUDA_R_16F, CUDA_R_16F, kU16, 0, "16F: 16F -> 16F"},
    {CUBLAS_COMPUTE_16F_PEDANTIC, CUDA_R_16F, CUDA_R_16F, kU16, 0, "16F_PEDANTIC: 16F -> 16F"},
    {CUBLAS_COMPUTE_32F, CUDA_R_16F, CUDA_R_16F, kU32, 0, "32F: 16F -> 16F"},
    {CUBLAS_COMPUTE_32F, CUDA_R_16F, CUDA_R_32F, kU32, 0, "32F: 16F -> 32F"},
    {CUBLAS_COMPUTE_32F, CUDA_R_16BF, CUDA_R_16BF, kU32, 0, "32F: 16BF -> 16BF"},
    {CUBLAS_COMPUTE_32F, CUDA_R_16BF, CUDA_R_32F, kU32, 0, "32F: 16BF -> 32F"},
    {CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F, kU32, 0, "32F: 32F -> 32F"},
    {CUBLAS_COMPUTE_32F_PEDANTIC, CUDA_R_16F, CUDA_R_16F, kU32, 0, "32F_PEDANTIC: 16F -> 16F"},
    {CUBLAS_COMPUTE_32F_PEDANTIC, CUDA_R_16BF, CUDA_R_32F, kU32, 0, "32F_PEDANTIC: 16BF -> 32F"},
    {CUBLAS_COMPUTE_32F_PEDANTIC, CUDA_R_32F, CUDA_R_32F, kU32, 0, "32F_PEDANTIC: 32F -> 32F"},
    {CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F, CUDA_R_32F, kU32, kUtf32, "32F_FAST_TF32: 32F -> 32F"},
    {CUBLAS_COMPUTE_32F_FAST_16F, CUDA_R_32F, CUDA_R_32F, kU32, kU16, "32F_FAST_16F: 32F -> 32F"},
    {CUBLAS_COMPUTE_32F_FAST_16BF, CUDA_R_32F, CUDA_R_32F, kU32, kUbf16, "32F_FAST_16BF: 32F -> 32F"},
    {CUBLAS_COMPUTE_64F, CUDA_R_64F, CUDA_R_64F, kU64, 0, "64F: 64F -> 64F"},
    {CUBLAS_COMPUTE_64F_PEDANTIC, CUDA_R_64F, CUDA_R_64F, kU64, 0, "64F_PEDANTIC: 64F -> 64F"},
};

double unit_roundoff(cudaDataType t) {
  return t == CUDA_R_64F ? kU64 : t == CUDA_R_32F ? kU32 : t == CUDA_R_16F ? kU16 : kUbf16;
}
// Half the smallest subnormal of t: the absolute error of rounding a tiny result to t.
double tiny(cudaDataType t) {
  return t == CUDA_R_64F   ? std::numeric_limits<double>::denorm_min()
         : t == CUDA_R_32F ? 0x1p-150
         : t == CUDA_R_16F ? 0x1p-25
                           : 0x1p-134;
}

TEST(CublasEmulator, EverySupportedCombinationMatchesFloat64Reference) {
  // Error bound for one element (Higham, sequential fused multiply-adds): the k-term sum in a type
  // of unit roundoff u is off by at most k u / (1 - k u) * sum |a b|, alpha * acc + beta * c adds
  // two more roundings, a down-conversion of both inputs costs ~2 u_in per product, and the store
  // to C one u_out. The tolerance takes twice the accumulation term as margin; it is still orders
  // of magnitude below what accumulating in a narrower type than documented would give.
  const int64_t m = 7, n = 5, k = 33;
  const double alpha = 0.75, beta = -1.25;
  std::mt19937_64 rng(20240611);
  auto uniform = [&] { return static_cast<double>(rng() >> 11) * 0x1p-53 * 4.0 - 2.0; };  // [-2, 2)
  Handle h;
  for (const Row& row : kSupported)
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const int64_t lda = (ta ? k : m) + 3, ldb = (tb ? n : k) + 2, ldc = m + 1;
      Typed a = Typed::filled(row.ab, static_cast<size_t>(lda * (ta ? m : k)));
      Typed b = Typed::filled(row.ab, static_cast<size_t>(ldb * (tb ? k : n)));
      Typed c0 = Typed::filled(row.c, static_cast<size_t>(ldc * n), kPad);
      for (size_t i = 0; i < a.size(); ++i) a.set(i, uniform());
      for (size_t i = 0; i < b.size(); ++i) b.set(i, uniform());
      for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < m; ++i) c0.set(static_cast<size_t>(j * ldc + i), uniform());
      auto op_a = [&](int64_t i, int64_t l) { return a.get(static_cast<size_t>(ta ? i * lda + l : l * lda + i)); };
      auto op_b = [&](int64_t l, int64_t j) { return b.get(static_cast<size_t>(tb ? l * ldb + j : j * ldb + l)); };
      Device da(a), db(b), dc(c0);
      const Scalars s(alpha, beta);
      ASSERT_EQ(cublasGemmEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, int(m), int(n), int(k),
                             s.alpha(row.compute), da.ptr, row.ab, int(lda), db.ptr, row.ab, int(ldb),
                             s.beta(row.compute), dc.ptr, row.c, int(ldc), row.compute, CUBLAS_GEMM_DEFAULT),
                CUBLAS_STATUS_SUCCESS)
          << row.name;
      const Typed got = dc.read(row.c);
      for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < ldc; ++i) {
          const size_t at = static_cast<size_t>(j * ldc + i);
          if (i >= m) {
            EXPECT_EQ(got.get(at), kPad) << row.name << ": padding written";
            continue;
          }
          double sum = 0.0, abs_sum = 0.0;
          for (int64_t l = 0; l < k; ++l) {
            sum += op_a(i, l) * op_b(l, j);
            abs_sum += std::fabs(op_a(i, l) * op_b(l, j));
          }
          const double ref = alpha * sum + beta * c0.get(at);
          const double scale = std::fabs(alpha) * abs_sum + std::fabs(beta * c0.get(at));
          const double tol = 2.0 * (k + 2) * row.u_acc * scale + 2.5 * row.u_in * std::fabs(alpha) * abs_sum +
                             unit_roundoff(row.c) * std::fabs(ref) + tiny(row.c);
          EXPECT_NEAR(got.get(at), ref, tol) << row.name << " trans " << t << " at (" << i << ", " << j << ")";
        }
    }
}

// ---- rounding that must be visible ----

TEST(CublasEmulator, SixteenBitOutputIsRoundedOnce) {
  // op(A) = [1, e], op(B) = [1; 1], C = e, alpha = beta = 1, e half an ulp of 1 in the output type.
  // FP32: acc = 1 + e exactly, acc + C = 1 + 2e, one ulp above 1: representable, so the single
  // rounding gives 1 + ulp. Rounding acc to the output type first would give 1 (a tie, to even),
  // and 1 + e again 1.
  Handle h;
  struct Case {
    cudaDataType type;
    double e;
    uint16_t once, twice;
  };
  const Case cases[] = {{CUDA_R_16F, 0x1p-11, 0x3C01, 0x3C00}, {CUDA_R_16BF, 0x1p-8, 0x3F81, 0x3F80}};
  const float one = 1.0f;
  for (const Case& cs : cases) {
    Device a(Typed(cs.type, {1.0, cs.e})), b(Typed(cs.type, {1.0, 1.0})), c(Typed(cs.type, {cs.e}));
    ASSERT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 2, &one, a.ptr, cs.type, 1, b.ptr, cs.type, 2, &one,
                           c.ptr, cs.type, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(c.read(cs.type).bits16(0), cs.once);
    EXPECT_NE(cs.once, cs.twice);
  }
}

TEST(CublasEmulator, Compute16FAccumulatesInHalf) {
  // The same data under CUBLAS_COMPUTE_16F: the running sum is an fp16, so 1 + 2^-11 rounds to 1
  // (tie to even) before C is added, and 1 + 2^-11 rounds to 1 again: 0x3C00, not FP32's 0x3C01.
  Handle h;
  Device a(Typed(CUDA_R_16F, {1.0, 0x1p-11})), b(Typed(CUDA_R_16F, {1.0, 1.0})), c(Typed(CUDA_R_16F, {0x1p-11}));
  const Half one(1.0f);
  ASSERT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 2, &one, a.ptr, CUDA_R_16F, 1, b.ptr, CUDA_R_16F, 2, &one,
                         c.ptr, CUDA_R_16F, 1, CUBLAS_COMPUTE_16F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(c.read(CUDA_R_16F).bits16(0), 0x3C00);
}

// x * 1 for each x in `xs` (as op(A), m = xs.size(), and again as op(B), n = xs.size()), in FP32
// data under the given compute type and math mode.
std::vector<double> times_one(const std::vector<double>& xs, cublasComputeType_t ct, cublasMath_t math) {
  Handle h;
  EXPECT_EQ(cublasSetMathMode(h, math), CUBLAS_STATUS_SUCCESS);
  const int len = static_cast<int>(xs.size());
  Device x(Typed(CUDA_R_32F, xs)), one(Typed(CUDA_R_32F, {1.0}));
  Device c1(Typed::filled(CUDA_R_32F, xs.size())), c2(Typed::filled(CUDA_R_32F, xs.size()));
  const float alpha = 1.0f, beta = 0.0f;
  EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, len, 1, 1, &alpha, x.ptr, CUDA_R_32F, len, one.ptr, CUDA_R_32F, 1,
                         &beta, c1.ptr, CUDA_R_32F, len, ct, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, len, 1, &alpha, one.ptr, CUDA_R_32F, 1, x.ptr, CUDA_R_32F, 1,
                         &beta, c2.ptr, CUDA_R_32F, 1, ct, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  const Typed r1 = c1.read(CUDA_R_32F), r2 = c2.read(CUDA_R_32F);
  std::vector<double> out(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    out[i] = r1.get(i);
    EXPECT_EQ(r2.get(i), r1.get(i)) << "A and B are rounded alike, element " << i;
  }
  return out;
}

TEST(CublasEmulator, Tf32RoundsInputsToNearestEven) {
  // TF32 keeps 10 explicit mantissa bits: at 1 the ulp is 2^-10. Below half an ulp rounds down; a
  // tie goes to the even neighbour (down from 1 + 2^-11, up from 1 + 3 * 2^-11, where truncation
  // would give 1 + 2^-10); above a tie rounds up.
  const std::vector<double> xs = {1 + 0x1p-12, 1 + 0x1p-11, 1 + 3 * 0x1p-11, 1 + 0x1p-11 + 0x1p-20, -(1 + 0x1p-12)};
  const std::vector<double> tf32 = {1, 1, 1 + 0x1p-9, 1 + 0x1p-10, -1};
  EXPECT_EQ(times_one(xs, CUBLAS_COMPUTE_32F, CUBLAS_DEFAULT_MATH), xs) << "plain FP32 keeps every bit";
  EXPECT_EQ(times_one(xs, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_DEFAULT_MATH), tf32);
  // The handle's TF32 math mode applies to COMPUTE_32F on fp32 data, with or without the
  // reduced-precision-reduction flag, but not to the _PEDANTIC compute type.
  EXPECT_EQ(times_one(xs, CUBLAS_COMPUTE_32F, CUBLAS_TF32_TENSOR_OP_MATH), tf32);
  EXPECT_EQ(times_one(xs, CUBLAS_COMPUTE_32F,
                      static_cast<cublasMath_t>(CUBLAS_TF32_TENSOR_OP_MATH |
                                                CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
            tf32);
  EXPECT_EQ(times_one(xs, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_TF32_TENSOR_OP_MATH), xs);
  EXPECT_EQ(
      times_one(xs, CUBLAS_COMPUTE_32F,
                static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
      xs);
}

TEST(CublasEmulator, Fast16FAnd16BFRoundInputs) {
  // 2^-26 is below half fp16's smallest subnormal (0 in fp16, exact in TF32 and bf16); 1 + 2^-9 is
  // exact in fp16 and TF32 but less than half a bf16 ulp (2^-7) above 1, so bf16 gives 1.
  const std::vector<double> xs = {0x1p-26, 1 + 0x1p-9};
  EXPECT_EQ(times_one(xs, CUBLAS_COMPUTE_32F_FAST_16F, CUBLAS_DEFAULT_MATH), (std::vector<double>{0, 1 + 0x1p-9}));
  EXPECT_EQ(times_one(xs, CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_DEFAULT_MATH), (std::vector<double>{0x1p-26, 1}));
  EXPECT_EQ(times_one(xs, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_DEFAULT_MATH), xs);
  // The deprecated CUBLAS_TENSOR_OP_MATH makes single-precision GEMMs COMPUTE_32F_FAST_16F.
  EXPECT_EQ(times_one(xs, CUBLAS_COMPUTE_32F, CUBLAS_TENSOR_OP_MATH), (std::vector<double>{0, 1 + 0x1p-9}));
}

// ---- strided batches ----

TEST(CublasEmulator, StridedBatchedWithGapsAndBroadcastB) {
  // A_0 = [1 2; 3 4], A_1 = [0 1; 1 0], A_2 = [2 0; 0 -1], one B = [5 6; 7 8] (strideB 0),
  // C_i = 100 i everywhere, alpha = beta = 1:
  //   C_0 = [19 22; 43 50], C_1 = [7 8; 5 6] + 100, C_2 = [10 12; -7 -8] + 200.
  // A: lda 3 (one padding row), strideA 8 (a 2-element gap); C: ldc 2, strideC 5 (a 1-element gap).
  const double P = kNaN, G = kPad;
  const std::vector<double> a = {1, 3, P, 2, 4, P, P, P, 0, 1, P, 1, 0, P, P, P, 2, 0, P, 0, -1, P};
  const std::vector<double> c0 = {0, 0, 0, 0, G, 100, 100, 100, 100, G, 200, 200, 200, 200};
  const std::vector<double> want = {19, 43, 22, 50, G, 107, 105, 108, 106, G, 210, 193, 212, 192};
  Handle h;
  for (const TypeRow& row : kExactRows) {
    Device da(Typed(row.ab, a)), db(Typed(row.ab, {5, 7, 6, 8})), dc(Typed(row.c, c0));
    const Scalars s(1.0, 1.0);
    ASSERT_EQ(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, s.alpha(row.compute), da.ptr, row.ab, 3,
                                         8, db.ptr, row.ab, 2, 0, s.beta(row.compute), dc.ptr, row.c, 2, 5, 3,
                                         row.compute, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    expect_same(dc.read(row.c), want, "strided batched");
  }
}

TEST(CublasEmulator, StridedBatchedNegativeStrideAndInterleavedC) {
  // op(A_i) = A_i^T (A stored 2x1, lda 2), walked backwards: the pointer is batch 0's, at offset
  // 2, strideA = -2, so batch 1 is at offset 0. B = [1 10; 100 1000] for both (strideB 0).
  //   op(A_0) = [1 2] -> [201 2010], op(A_1) = [3 4] -> [403 4030].
  // C (1x2, ldc 2, strideC 1): batch 0 owns offsets 0 and 2, batch 1 offsets 1 and 3 —
  // interleaved in each other's padding, yet disjoint; offset 4 is padding.
  Device da(Typed(CUDA_R_32F, {3, 4, 1, 2})), db(Typed(CUDA_R_32F, {1, 100, 10, 1000}));
  Device dc(Typed(CUDA_R_32F, {kNaN, kNaN, kNaN, kNaN, kPad}));
  const float one = 1.0f, zero = 0.0f;
  Handle h;
  const void* a0 = static_cast<const char*>(da.ptr) + 2 * sizeof(float);
  ASSERT_EQ(
      cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 1, 2, 2, &one, a0, CUDA_R_32F, 2, -2, db.ptr, CUDA_R_32F,
                                 2, 0, &zero, dc.ptr, CUDA_R_32F, 2, 1, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      CUBLAS_STATUS_SUCCESS);
  expect_same(dc.read(CUDA_R_32F), {201, 403, 2010, 4030, kPad}, "backwards A, interleaved C");
}

TEST(CublasEmulator, StridedBatchedZeroBatchesTouchesNothing) {
  Handle h;
  const float one = 1.0f;
  EXPECT_EQ(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, nullptr, CUDA_R_32F, 2, 4, nullptr,
                                       CUDA_R_32F, 2, 4, &one, nullptr, CUDA_R_32F, 2, 4, 0, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
}

// ---- handles ----

TEST(CublasEmulator, HandleKeepsStreamAndMathMode) {
  Handle h;
  cudaStream_t st = reinterpret_cast<cudaStream_t>(1);
  ASSERT_EQ(cublasGetStream(h, &st), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(st, nullptr) << "a new handle uses the default stream";
  cublasMath_t mode = CUBLAS_PEDANTIC_MATH;
  ASSERT_EQ(cublasGetMathMode(h, &mode), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(mode, CUBLAS_DEFAULT_MATH);

  cudaStream_t mine = nullptr;
  ASSERT_EQ(cudaStreamCreate(&mine), cudaSuccess);
  ASSERT_EQ(cublasSetStream(h, mine), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasGetStream(h, &st), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(st, mine);
  // A GEMM on the handle's own stream runs.
  Device a(Typed(CUDA_R_32F, {2})), b(Typed(CUDA_R_32F, {3})), c(Typed(CUDA_R_32F, {0}));
  const float one = 1.0f, zero = 0.0f;
  EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, a.ptr, CUDA_R_32F, 1, b.ptr, CUDA_R_32F, 1, &zero,
                         c.ptr, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(c.read(CUDA_R_32F).get(0), 6.0);
  ASSERT_EQ(cublasSetStream(h, nullptr), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cudaStreamDestroy(mine), cudaSuccess);

  const int modes[] = {CUBLAS_DEFAULT_MATH,
                       CUBLAS_PEDANTIC_MATH,
                       CUBLAS_TF32_TENSOR_OP_MATH,
                       CUBLAS_TENSOR_OP_MATH,
                       CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION,
                       CUBLAS_TF32_TENSOR_OP_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION};
  for (int m : modes) {
    ASSERT_EQ(cublasSetMathMode(h, static_cast<cublasMath_t>(m)), CUBLAS_STATUS_SUCCESS) << m;
    ASSERT_EQ(cublasGetMathMode(h, &mode), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(mode, m);
  }
  // (Invalid values inside the enum's range: casting one outside it is undefined behaviour.)
  for (int bad : {5, 6, 7, 13, 21, 31})
    EXPECT_EQ(cublasSetMathMode(h, static_cast<cublasMath_t>(bad)), CUBLAS_STATUS_INVALID_VALUE) << bad;
  ASSERT_EQ(cublasGetMathMode(h, &mode), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(mode, modes[5]) << "a rejected mode leaves the handle as it was";
}

TEST(CublasEmulator, HandleBelongsToTheDeviceItWasCreatedOn) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  if (count < 2) GTEST_SKIP() << "needs two emulated devices";
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  {
    Handle h;  // device 1's
    Device a(Typed(CUDA_R_32F, {2})), b(Typed(CUDA_R_32F, {3})), c(Typed(CUDA_R_32F, {0}));
    const float one = 1.0f, zero = 0.0f;
    EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, a.ptr, CUDA_R_32F, 1, b.ptr, CUDA_R_32F, 1,
                           &zero, c.ptr, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(c.read(CUDA_R_32F).get(0), 6.0);
  }
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

TEST(CublasEmulator, StatusNamesAndStrings) {
  const std::pair<cublasStatus_t, const char*> all[] = {
      {CUBLAS_STATUS_SUCCESS, "CUBLAS_STATUS_SUCCESS"},
      {CUBLAS_STATUS_NOT_INITIALIZED, "CUBLAS_STATUS_NOT_INITIALIZED"},
      {CUBLAS_STATUS_ALLOC_FAILED, "CUBLAS_STATUS_ALLOC_FAILED"},
      {CUBLAS_STATUS_INVALID_VALUE, "CUBLAS_STATUS_INVALID_VALUE"},
      {CUBLAS_STATUS_ARCH_MISMATCH, "CUBLAS_STATUS_ARCH_MISMATCH"},
      {CUBLAS_STATUS_MAPPING_ERROR, "CUBLAS_STATUS_MAPPING_ERROR"},
      {CUBLAS_STATUS_EXECUTION_FAILED, "CUBLAS_STATUS_EXECUTION_FAILED"},
      {CUBLAS_STATUS_INTERNAL_ERROR, "CUBLAS_STATUS_INTERNAL_ERROR"},
      {CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED"},
      {CUBLAS_STATUS_LICENSE_ERROR, "CUBLAS_STATUS_LICENSE_ERROR"},
  };
  for (const auto& [status, name] : all) {
    EXPECT_STREQ(cublasGetStatusName(status), name);
    ASSERT_NE(cublasGetStatusString(status), nullptr);
    EXPECT_GT(std::strlen(cublasGetStatusString(status)), 0u);
  }
  EXPECT_NE(cublasGetStatusName(static_cast<cublasStatus_t>(2)), nullptr);  // an unassigned value
  EXPECT_NE(cublasGetStatusString(static_cast<cublasStatus_t>(2)), nullptr);
}

TEST(CublasEmulator, LtHandles) {
  cublasLtHandle_t lt = nullptr;
  ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
  EXPECT_NE(lt, nullptr);
  EXPECT_EQ(cublasLtDestroy(lt), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtCreate(nullptr), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtDestroy(nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
}

// ---- documented error statuses ----

TEST(CublasEmulator, NullHandleIsNotInitialized) {
  cudaStream_t st = nullptr;
  cublasMath_t mode = CUBLAS_DEFAULT_MATH;
  const float one = 1.0f;
  EXPECT_EQ(cublasCreate(nullptr), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasDestroy(nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasSetStream(nullptr, nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasGetStream(nullptr, &st), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasSetMathMode(nullptr, CUBLAS_DEFAULT_MATH), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasGetMathMode(nullptr, &mode), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasGemmEx(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, nullptr, CUDA_R_32F, 1, nullptr, CUDA_R_32F,
                         1, &one, nullptr, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasGemmStridedBatchedEx(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, nullptr, CUDA_R_32F, 1, 1,
                                       nullptr, CUDA_R_32F, 1, 1, &one, nullptr, CUDA_R_32F, 1, 1, 1,
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_NOT_INITIALIZED);
  Handle h;
  EXPECT_EQ(cublasGetStream(h, nullptr), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasGetMathMode(h, nullptr), CUBLAS_STATUS_INVALID_VALUE);
}

// One GEMM call's arguments, with a valid default (m = 4, n = 3, k = 5, N/N, fp32) to vary.
struct Args {
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  int m = 4, n = 3, k = 5, lda = 4, ldb = 5, ldc = 4;
  cudaDataType at = CUDA_R_32F, bt = CUDA_R_32F, ct = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cublasGemmAlgo_t algo = CUBLAS_GEMM_DEFAULT;
  bool null_alpha = false, null_beta = false;
  int batch = 1;
};

TEST(CublasEmulator, InvalidArgumentsAndUnsupportedTypesLeaveCUntouched) {
  // Operands big enough for every variant (64 doubles each); C holds a sentinel throughout.
  Device a(Typed::filled(CUDA_R_64F, 64, 1.0)), b(Typed::filled(CUDA_R_64F, 64, 1.0)),
      c(Typed::filled(CUDA_R_64F, 64, kPad));
  const double alpha_d = 1.0, beta_d = 0.0;  // wide enough for any scale type's bytes
  Handle h;
  auto call = [&](const Args& g) {
    const void* alpha = g.null_alpha ? nullptr : &alpha_d;
    const void* beta = g.null_beta ? nullptr : &beta_d;
    if (g.batch == 1)
      return cublasGemmEx(h, g.ta, g.tb, g.m, g.n, g.k, alpha, a.ptr, g.at, g.lda, b.ptr, g.bt, g.ldb, beta, c.ptr,
                          g.ct, g.ldc, g.compute, g.algo);
    // Disjoint C matrices (16 elements apart), so a wrongly accepted call shows as a status, not an overlap fault.
    return cublasGemmStridedBatchedEx(h, g.ta, g.tb, g.m, g.n, g.k, alpha, a.ptr, g.at, g.lda, 0, b.ptr, g.bt, g.ldb, 0,
                                      beta, c.ptr, g.ct, g.ldc, 16, g.batch, g.compute, g.algo);
  };
  struct Case {
    const char* what;
    Args args;
    cublasStatus_t want;
  };
  auto with = [](auto edit) {
    Args g;
    edit(g);
    return g;
  };
  const Case cases[] = {
      {"m < 0", with([](Args& g) { g.m = -1; }), CUBLAS_STATUS_INVALID_VALUE},
      {"n < 0", with([](Args& g) { g.n = -1; }), CUBLAS_STATUS_INVALID_VALUE},
      {"k < 0", with([](Args& g) { g.k = -1; }), CUBLAS_STATUS_INVALID_VALUE},
      {"transa CONJG", with([](Args& g) { g.ta = CUBLAS_OP_CONJG; }), CUBLAS_STATUS_INVALID_VALUE},
      {"transb CONJG", with([](Args& g) { g.tb = CUBLAS_OP_CONJG; }), CUBLAS_STATUS_INVALID_VALUE},
      {"lda < m (N)", with([](Args& g) { g.lda = 3; }), CUBLAS_STATUS_INVALID_VALUE},
      {"lda < k (T)", with([](Args& g) { g.ta = CUBLAS_OP_T, g.lda = 4; }), CUBLAS_STATUS_INVALID_VALUE},
      {"ldb < k (N)", with([](Args& g) { g.ldb = 4; }), CUBLAS_STATUS_INVALID_VALUE},
      {"ldb < n (T)", with([](Args& g) { g.tb = CUBLAS_OP_T, g.ldb = 2; }), CUBLAS_STATUS_INVALID_VALUE},
      {"ldc < m", with([](Args& g) { g.ldc = 3; }), CUBLAS_STATUS_INVALID_VALUE},
      {"lda 0 with m 0", with([](Args& g) { g.m = 0, g.lda = 0, g.ldc = 1; }), CUBLAS_STATUS_INVALID_VALUE},
      {"ldc 0 with m 0", with([](Args& g) { g.m = 0, g.lda = 1, g.ldc = 0; }), CUBLAS_STATUS_INVALID_VALUE},
      {"ldb 0 with k 0", with([](Args& g) { g.k = 0, g.ldb = 0; }), CUBLAS_STATUS_INVALID_VALUE},
      {"alpha null", with([](Args& g) { g.null_alpha = true; }), CUBLAS_STATUS_INVALID_VALUE},
      {"beta null", with([](Args& g) { g.null_beta = true; }), CUBLAS_STATUS_INVALID_VALUE},
      {"batchCount < 0", with([](Args& g) { g.batch = -1; }), CUBLAS_STATUS_INVALID_VALUE},
      {"A 16F, B 32F", with([](Args& g) { g.at = CUDA_R_16F; }), CUBLAS_STATUS_NOT_SUPPORTED},
      {"32F in, 16F out", with([](Args& g) { g.ct = CUDA_R_16F; }), CUBLAS_STATUS_NOT_SUPPORTED},
      {"16F in, 16BF out", with([](Args& g) { g.at = g.bt = CUDA_R_16F, g.ct = CUDA_R_16BF; }),
       CUBLAS_STATUS_NOT_SUPPORTED},
      {"16F in, 64F out", with([](Args& g) { g.at = g.bt = CUDA_R_16F, g.ct = CUDA_R_64F; }),
       CUBLAS_STATUS_NOT_SUPPORTED},
      {"COMPUTE_32F on 64F", with([](Args& g) { g.at = g.bt = g.ct = CUDA_R_64F; }), CUBLAS_STATUS_NOT_SUPPORTED},
      {"COMPUTE_64F on 32F", with([](Args& g) { g.compute = CUBLAS_COMPUTE_64F; }), CUBLAS_STATUS_NOT_SUPPORTED},
      {"COMPUTE_16F to 32F", with([](Args& g) { g.compute = CUBLAS_COMPUTE_16F, g.at = g.bt = CUDA_R_16F; }),
       CUBLAS_STATUS_NOT_SUPPORTED},
      {"COMPUTE_16F on 32F", with([](Args& g) { g.compute = CUBLAS_COMPUTE_16F; }), CUBLAS_STATUS_NOT_SUPPORTED},
      {"FAST_TF32 on 16F",
       with([](Args& g) { g.compute = CUBLAS_COMPUTE_32F_FAST_TF32, g.at = g.bt = CUDA_R_16F, g.ct = CUDA_R_16F; }),
       CUBLAS_STATUS_NOT_SUPPORTED},
      {"FAST_16BF on 16BF -> 32F",
       with([](Args& g) { g.compute = CUBLAS_COMPUTE_32F_FAST_16BF, g.at = g.bt = CUDA_R_16BF; }),
       CUBLAS_STATUS_NOT_SUPPORTED},
      {"computeType 76 (unassigned)", with([](Args& g) { g.compute = static_cast<cublasComputeType_t>(76); }),
       CUBLAS_STATUS_NOT_SUPPORTED},
      {"algo 42", with([](Args& g) { g.algo = static_cast<cublasGemmAlgo_t>(42); }), CUBLAS_STATUS_NOT_SUPPORTED},
  };
  for (const Case& cs : cases) {
    EXPECT_EQ(call(cs.args), cs.want) << cs.what;
    Args strided = cs.args;
    if (strided.batch == 1) strided.batch = 2;
    EXPECT_EQ(call(strided), cs.want) << cs.what << " (strided batched)";
  }
  expect_same(c.read(CUDA_R_64F), std::vector<double>(64, kPad), "C after rejected calls");
  // The valid default itself, and every documented algo value, pass.
  for (cublasGemmAlgo_t algo : {CUBLAS_GEMM_DEFAULT, CUBLAS_GEMM_ALGO0, CUBLAS_GEMM_ALGO23,
                                CUBLAS_GEMM_DEFAULT_TENSOR_OP, CUBLAS_GEMM_ALGO15_TENSOR_OP})
    EXPECT_EQ(call(with([&](Args& g) { g.algo = algo; })), CUBLAS_STATUS_SUCCESS) << algo;
}

// ---- faults: what a GPU answers with an illegal address or undefined behaviour ----

// One fp32 GEMM (m = n = k = 2, lda = ldb = ldc = 2) on the given operands.
cublasStatus_t gemm2(cublasHandle_t h, const void* a, const void* b, void* c, int lda = 2) {
  const float one = 1.0f, zero = 0.0f;
  return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a, CUDA_R_32F, lda, b, CUDA_R_32F, 2, &zero, c,
                      CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

TEST(CublasEmulatorDeathTest, HostOperandsAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Handle h;
  Device a(Typed::filled(CUDA_R_32F, 4, 1.0)), b(Typed::filled(CUDA_R_32F, 4, 1.0)), c(Typed::filled(CUDA_R_32F, 4));
  std::vector<float> host(16, 1.0f);
  EXPECT_DEATH(gemm2(h, host.data(), b.ptr, c.ptr), "mixtape CUDA emulator: cublasGemmEx: A");
  EXPECT_DEATH(gemm2(h, a.ptr, host.data(), c.ptr), "mixtape CUDA emulator: cublasGemmEx: B");
  EXPECT_DEATH(gemm2(h, a.ptr, b.ptr, host.data()), "mixtape CUDA emulator: cublasGemmEx: C");
  // A device pointer whose lda-implied extent, (k - 1) * lda + m = 5 elements, runs past the
  // 4-element allocation.
  EXPECT_DEATH(gemm2(h, a.ptr, b.ptr, c.ptr, 3), "mixtape CUDA emulator: cublasGemmEx: A");
  // Freed memory.
  void* freed = nullptr;
  ASSERT_EQ(cudaMalloc(&freed, 16), cudaSuccess);
  ASSERT_EQ(cudaFree(freed), cudaSuccess);
  EXPECT_DEATH(gemm2(h, a.ptr, b.ptr, freed), "mixtape CUDA emulator: cublasGemmEx: C");
  // A strided batch past the end: batch 1's C starts at element 4 of a 4-element block.
  const float one = 1.0f, zero = 0.0f;
  EXPECT_DEATH(
      cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a.ptr, CUDA_R_32F, 2, 0, b.ptr, CUDA_R_32F,
                                 2, 0, &zero, c.ptr, CUDA_R_32F, 2, 4, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "mixtape CUDA emulator: cublasGemmStridedBatchedEx: C \\(batch 1\\)");
}

TEST(CublasEmulatorDeathTest, DeviceScalarsAbort) {
  // The default (and here only) pointer mode is CUBLAS_POINTER_MODE_HOST: alpha and beta are read
  // on the host, so device pointers for them are a crash.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Handle h;
  Device a(Typed::filled(CUDA_R_32F, 4, 1.0)), b(Typed::filled(CUDA_R_32F, 4, 1.0)), c(Typed::filled(CUDA_R_32F, 4));
  Device scalar(Typed::filled(CUDA_R_32F, 1, 1.0));
  const float one = 1.0f;
  EXPECT_DEATH(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, scalar.ptr, a.ptr, CUDA_R_32F, 2, b.ptr, CUDA_R_32F,
                            2, &one, c.ptr, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx: alpha or beta is device memory");
  EXPECT_DEATH(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a.ptr, CUDA_R_32F, 2, b.ptr, CUDA_R_32F, 2,
                            scalar.ptr, c.ptr, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx: alpha or beta is device memory");
}

TEST(CublasEmulatorDeathTest, OverlappingBatchOutputsAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Handle h;
  Device a(Typed::filled(CUDA_R_32F, 8, 1.0)), b(Typed::filled(CUDA_R_32F, 8, 1.0)), c(Typed::filled(CUDA_R_32F, 8));
  const float one = 1.0f, zero = 0.0f;
  // strideC 0: every batch writes the same C.
  EXPECT_DEATH(
      cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a.ptr, CUDA_R_32F, 2, 4, b.ptr, CUDA_R_32F,
                                 2, 4, &zero, c.ptr, CUDA_R_32F, 2, 0, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "another batch writes");
  // Interleaved 1x2 matrices (ldc 2, strideC 1): two batches are disjoint, a third meets the first.
  EXPECT_DEATH(
      cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 2, 1, &one, a.ptr, CUDA_R_32F, 1, 1, b.ptr, CUDA_R_32F,
                                 1, 1, &zero, c.ptr, CUDA_R_32F, 2, 1, 3, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "another batch writes");
}

// cublasSetWorkspace as NVIDIA documents it: 256-byte alignment, and cublasSetStream resetting
// the handle to the default workspace pool.
TEST(CublasEmulator, SetStreamResetsTheWorkspace) {
  Handle h;
  void* ws = nullptr;
  ASSERT_EQ(cudaMalloc(&ws, 1 << 16), cudaSuccess);
  Device a(Typed(CUDA_R_32F, {2})), b(Typed(CUDA_R_32F, {3})), c(Typed(CUDA_R_32F, {0}));
  const float one = 1.0f, zero = 0.0f;
  auto gemm = [&] {
    return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, a.ptr, CUDA_R_32F, 1, b.ptr, CUDA_R_32F, 1, &zero,
                        c.ptr, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  EXPECT_EQ(cublasSetWorkspace(h, static_cast<char*>(ws) + 128, 1024), CUBLAS_STATUS_INVALID_VALUE);
  ASSERT_EQ(cublasSetWorkspace(h, ws, 1 << 16), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(gemm(), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(mixtape::cuda_emulator::cublas_last_workspace(), ws);
  ASSERT_EQ(cublasSetStream(h, nullptr), CUBLAS_STATUS_SUCCESS);  // the same stream, still a reset
  ASSERT_EQ(gemm(), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(mixtape::cuda_emulator::cublas_last_workspace(), nullptr) << "cublasSetStream resets the workspace";
  EXPECT_EQ(c.read(CUDA_R_32F).get(0), 6.0);
  EXPECT_EQ(cudaFree(ws), cudaSuccess);
}

// A workspace is scratch memory of the kernels: a GEMM on a second stream while the first
// stream's GEMM with the same workspace is still queued faults; once that ran, it may move.
TEST(CublasEmulatorDeathTest, AWorkspaceSharedByTwoStreamsInFlightAborts) {
  if (!mixtape::cuda_emulator::streams_deferred()) GTEST_SKIP() << "MIXTAPE_CUDA_EMULATOR_STREAMS=immediate";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Handle h;
  void* ws = nullptr;
  ASSERT_EQ(cudaMalloc(&ws, 1 << 16), cudaSuccess);
  cudaStream_t s1 = nullptr, s2 = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s1), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&s2), cudaSuccess);
  Device a(Typed(CUDA_R_32F, {2})), b(Typed(CUDA_R_32F, {3})), c(Typed(CUDA_R_32F, {0}));
  const float one = 1.0f, zero = 0.0f;
  auto gemm_on = [&](cudaStream_t s) {
    EXPECT_EQ(cublasSetStream(h, s), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasSetWorkspace(h, ws, 1 << 16), CUBLAS_STATUS_SUCCESS);
    return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, a.ptr, CUDA_R_32F, 1, b.ptr, CUDA_R_32F, 1, &zero,
                        c.ptr, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  ASSERT_EQ(gemm_on(s1), CUBLAS_STATUS_SUCCESS);
  EXPECT_DEATH(gemm_on(s2), "two streams that may run at the same time share one cuBLAS workspace");
  ASSERT_EQ(cudaStreamSynchronize(s1), cudaSuccess);
  EXPECT_EQ(gemm_on(s2), CUBLAS_STATUS_SUCCESS) << "s1's GEMM has run: the workspace is free";
  ASSERT_EQ(cudaStreamSynchronize(s2), cudaSuccess);
  EXPECT_EQ(cublasSetStream(h, nullptr), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cudaStreamDestroy(s1), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s2), cudaSuccess);
  EXPECT_EQ(cudaFree(ws), cudaSuccess);
}

TEST(CublasEmulatorDeathTest, DestroyedHandleAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  cublasHandle_t h = nullptr;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
  EXPECT_DEATH(cublasSetStream(h, nullptr), "cublasSetStream: .* is not a live handle");
  EXPECT_DEATH(cublasDestroy(h), "cublasDestroy: .* is not a live handle");
}

TEST(CublasEmulatorDeathTest, WrongDeviceAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  if (count < 2) GTEST_SKIP() << "needs two emulated devices";
  Handle h;  // device 0's
  Device a(Typed::filled(CUDA_R_32F, 4, 1.0)), b(Typed::filled(CUDA_R_32F, 4, 1.0)), c(Typed::filled(CUDA_R_32F, 4));
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  Device a1(Typed::filled(CUDA_R_32F, 4, 1.0));
  cudaStream_t s1 = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s1), cudaSuccess);
  // Calling with device 1 current.
  EXPECT_DEATH(gemm2(h, a.ptr, b.ptr, c.ptr), "current device is 1, but the handle belongs to device 0");
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  // An operand in device 1's memory.
  EXPECT_DEATH(gemm2(h, a1.ptr, b.ptr, c.ptr),
               "cublasGemmEx: A is memory of device 1, but the handle belongs to device 0");
  // A stream of device 1.
  ASSERT_EQ(cublasSetStream(h, s1), CUBLAS_STATUS_SUCCESS);
  EXPECT_DEATH(gemm2(h, a.ptr, b.ptr, c.ptr), "stream belongs to device 1, the handle to device 0");
  ASSERT_EQ(cublasSetStream(h, nullptr), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cudaStreamDestroy(s1), cudaSuccess);
}

}  // namespace
