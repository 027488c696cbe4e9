// tests/cuda_emulator/test_cublaslt_fp8_emulator.cpp — the emulator's cuBLASLt FP8 matmul
// (tests/cuda_emulator/cublas.cpp) against references worked out independently: FP8 operands whose
// products and sums are exact in FP32 (so the reference, computed in double, is the exact D_temp),
// the documented formula D = scale_D * (alpha scale_A scale_B A B + beta scale_C C) with amax_D
// taken before scale_D, the output's single rounding (BF16 / F16 / F32, or FP8 saturating), and
// the statuses the library answers for what it refuses (E5M2 x E5M2, non-TN on Ada / Hopper, no FP8
// before sm_89, leading dimensions that are not multiples of 16 bytes, unsupported C/D types).
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/bfloat16.h"
#include "core/float8.h"
#include "core/half.h"
#include "tests/cuda_emulator/device_buffer.h"
#include "tests/cuda_emulator/emulator.h"

namespace {

using mixtape::cuda_emulator::testing::DeviceBuffer;
namespace emu = mixtape::cuda_emulator;

float fp8_value(cudaDataType t, uint8_t b) {
  return t == CUDA_R_8F_E4M3 ? mixtape::e4m3fn_bits_to_float(b) : mixtape::e5m2_bits_to_float(b);
}

// Random FP8 patterns with magnitudes in [0.25, 8): products of two have at most 8 significant
// bits on a 2^-10 grid and are below 64, so a sum of up to 32 of them is exact in FP32.
std::vector<uint8_t> small_fp8(cudaDataType t, size_t n, std::mt19937& rng) {
  std::vector<uint8_t> v(n);
  const int mbits = t == CUDA_R_8F_E4M3 ? 3 : 2, bias = t == CUDA_R_8F_E4M3 ? 7 : 15;
  std::uniform_int_distribution<int> e(-2, 2), m(0, (1 << mbits) - 1), s(0, 1);
  for (auto& b : v) b = static_cast<uint8_t>((s(rng) << 7) | ((e(rng) + bias) << mbits) | m(rng));
  return v;
}

// Owns the descriptors of one matmul: A (k x m, transposed) and B (k x n) by default (TN).
struct Lt {
  cublasLtHandle_t h = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  Lt(cudaDataType at, cudaDataType bt, cudaDataType ct, cudaDataType dt, int m, int n, int k, int lda, int ldb,
     int ldc, cublasOperation_t ta = CUBLAS_OP_T, cublasOperation_t tb = CUBLAS_OP_N,
     cublasComputeType_t compute = CUBLAS_COMPUTE_32F) {
    EXPECT_EQ(cublasLtCreate(&h), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescCreate(&op, compute, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), CUBLAS_STATUS_SUCCESS);
    const bool tra = ta != CUBLAS_OP_N, trb = tb != CUBLAS_OP_N;
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&a, at, tra ? k : m, tra ? m : k, lda), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&b, bt, trb ? n : k, trb ? k : n, ldb), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&c, ct, m, n, ldc), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&d, dt, m, n, ldc), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  }
  ~Lt() {
    cublasLtMatmulPreferenceDestroy(pref);
    for (auto l : {a, b, c, d}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(op);
    cublasLtDestroy(h);
  }
  void set_ptr(cublasLtMatmulDescAttributes_t attr, const void* p) {
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(op, attr, &p, sizeof p), CUBLAS_STATUS_SUCCESS);
  }
  cublasStatus_t heuristic() {
    cublasLtMatmulHeuristicResult_t r{};
    int count = -1;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, op, a, b, c, d, pref, 1, &r, &count);
    EXPECT_EQ(count, st == CUBLAS_STATUS_SUCCESS ? 1 : 0);
    return st;
  }
  cublasStatus_t run(const void* A, const void* B, const void* C, void* D, float alpha = 1.0f, float beta = 0.0f) {
    const cublasStatus_t st = cublasLtMatmul(h, op, &alpha, A, a, B, b, &beta, C, c, D, d, nullptr, nullptr, 0, nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return st;
  }
};

class CublasLtFp8 : public ::testing::Test {
 protected:
  void SetUp() override { emu::set_compute_capability(9, 0); }
  void TearDown() override { emu::set_compute_capability(8, 0); }
};

constexpr int kM = 8, kN = 8, kK = 32, kLd = 32;

// D_temp in double from the TN operands (exact for small_fp8 values).
std::vector<double> reference(cudaDataType at, const std::vector<uint8_t>& A, cudaDataType bt,
                              const std::vector<uint8_t>& B) {
  std::vector<double> r(kM * kN);
  for (int j = 0; j < kN; ++j)
    for (int i = 0; i < kM; ++i) {
      double s = 0.0;
      for (int l = 0; l < kK; ++l) s += double(fp8_value(at, A[i * kLd + l])) * double(fp8_value(bt, B[j * kLd + l]));
      r[j * kM + i] = s;
    }
  return r;
}

TEST_F(CublasLtFp8, ScaledProductRoundsOnceToEachOutputType) {
  std::mt19937 rng(7);
  for (cudaDataType bt : {CUDA_R_8F_E4M3, CUDA_R_8F_E5M2}) {
    const auto A = small_fp8(CUDA_R_8F_E4M3, kLd * kM, rng), B = small_fp8(bt, kLd * kN, rng);
    const std::vector<double> ref = reference(CUDA_R_8F_E4M3, A, bt, B);
    DeviceBuffer<uint8_t> dA(A), dB(B);
    DeviceBuffer<float> sa(std::vector<float>{0.5f}), sb(std::vector<float>{3.0f});
    for (cudaDataType ot : {CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F}) {
      Lt lt(CUDA_R_8F_E4M3, bt, ot, ot, kM, kN, kK, kLd, kLd, kM);
      lt.set_ptr(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, sa.p);
      lt.set_ptr(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, sb.p);
      EXPECT_EQ(lt.heuristic(), CUBLAS_STATUS_SUCCESS);
      DeviceBuffer<float> dD(kM * kN);  // room for the widest type
      const float alpha = 0.3f;
      ASSERT_EQ(lt.run(dA.p, dB.p, nullptr, dD.p, alpha), CUBLAS_STATUS_SUCCESS);
      const std::vector<float> raw = dD.download();
      const float s = alpha * 0.5f * 3.0f;  // alpha * scale_A * scale_B, in FP32, left to right
      for (int i = 0; i < kM * kN; ++i) {
        const float want = s * static_cast<float>(ref[i]);
        if (ot == CUDA_R_32F) {
          EXPECT_EQ(raw[i], want) << i;
        } else {
          uint16_t got;
          std::memcpy(&got, reinterpret_cast<const char*>(raw.data()) + 2 * i, 2);
          const uint16_t w = ot == CUDA_R_16BF ? mixtape::BFloat16(want).bits : mixtape::Half(want).bits;
          EXPECT_EQ(got, w) << "element " << i << " type " << ot;
        }
      }
    }
  }
}

// FP8 D: amax_D is max |D_temp| before scale_D; D = fp8(scale_D * D_temp), saturating; beta adds
// scale_C * C (C in BF16).
TEST_F(CublasLtFp8, Fp8OutputAmaxBeforeScaleDAndSaturation) {
  std::mt19937 rng(11);
  const auto A = small_fp8(CUDA_R_8F_E5M2, kLd * kM, rng), B = small_fp8(CUDA_R_8F_E4M3, kLd * kN, rng);
  const std::vector<double> ref = reference(CUDA_R_8F_E5M2, A, CUDA_R_8F_E4M3, B);
  std::vector<uint16_t> c(kM * kN);
  for (int i = 0; i < kM * kN; ++i) c[i] = mixtape::BFloat16(static_cast<float>(i % 5) - 2.0f).bits;
  DeviceBuffer<uint8_t> dA(A), dB(B);
  for (float scale_d : {1.0f, 64.0f}) {  // 64 pushes the largest values past 448: saturated
    DeviceBuffer<float> sc(std::vector<float>{2.0f}), sd(std::vector<float>{scale_d}), amax(std::vector<float>{-1.0f});
    Lt lt(CUDA_R_8F_E5M2, CUDA_R_8F_E4M3, CUDA_R_16BF, CUDA_R_8F_E4M3, kM, kN, kK, kLd, kLd, 16);
    lt.set_ptr(CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, sc.p);
    lt.set_ptr(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, sd.p);
    lt.set_ptr(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, amax.p);
    // ldc = 16: 32 bytes for C (BF16), 16 for D (FP8); D is m x n with ld 16, so allocate for it.
    DeviceBuffer<uint16_t> dC16(16 * kN);
    std::vector<uint16_t> c16(16 * kN, 0);
    for (int j = 0; j < kN; ++j)
      for (int i = 0; i < kM; ++i) c16[j * 16 + i] = c[j * kM + i];
    dC16.upload(c16);
    DeviceBuffer<uint8_t> dD16(16 * kN);
    ASSERT_EQ(lt.run(dA.p, dB.p, dC16.p, dD16.p, 1.0f, 0.5f), CUBLAS_STATUS_SUCCESS);
    const std::vector<uint8_t> got = dD16.download();
    float want_amax = 0.0f;
    int saturated = 0;
    for (int j = 0; j < kN; ++j)
      for (int i = 0; i < kM; ++i) {
        const float cv = static_cast<float>(mixtape::BFloat16::from_bits(c[j * kM + i]));
        const float t = std::fma(1.0f, static_cast<float>(ref[j * kM + i]), 0.5f * 2.0f * cv);
        want_amax = std::max(want_amax, std::fabs(t));
        const uint8_t w = mixtape::float_to_e4m3fn_bits(scale_d * t, mixtape::Fp8Saturation::Finite);
        saturated += (w & 0x7F) == 0x7E;
        EXPECT_EQ(got[j * 16 + i], w) << "(" << i << ", " << j << ") scale_D " << scale_d;
      }
    EXPECT_EQ(amax.download()[0], want_amax) << "amax_D is taken before scale_D";
    if (scale_d > 1.0f) EXPECT_GT(saturated, 0) << "the test must reach the saturation";
  }
}

TEST_F(CublasLtFp8, RefusedAsTheLibraryRefuses) {
  DeviceBuffer<uint8_t> A(kLd * kM), B(kLd * kN);
  DeviceBuffer<float> D(kM * kN);
  // E5M2 x E5M2 has no kernel.
  EXPECT_EQ(Lt(CUDA_R_8F_E5M2, CUDA_R_8F_E5M2, CUDA_R_16BF, CUDA_R_16BF, kM, kN, kK, kLd, kLd, kM).run(A.p, B.p, nullptr, D.p),
            CUBLAS_STATUS_NOT_SUPPORTED);
  // Hopper: TN only; NN and TT are refused, the heuristic too.
  {
    Lt nn(CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, CUDA_R_16BF, kM, kN, kK, kM < 16 ? 16 : kM, kLd, kM, CUBLAS_OP_N,
          CUBLAS_OP_N);
    EXPECT_EQ(nn.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
    DeviceBuffer<uint8_t> A16(16 * kK);
    EXPECT_EQ(nn.run(A16.p, B.p, nullptr, D.p), CUBLAS_STATUS_NOT_SUPPORTED);
    emu::set_compute_capability(10, 0);  // Blackwell takes any layout
    EXPECT_EQ(nn.run(A16.p, B.p, nullptr, D.p), CUBLAS_STATUS_SUCCESS);
    emu::set_compute_capability(8, 0);  // Ampere has no FP8 GEMM at all
    Lt tn(CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, CUDA_R_16BF, kM, kN, kK, kLd, kLd, kM);
    EXPECT_EQ(tn.run(A.p, B.p, nullptr, D.p), CUBLAS_STATUS_NOT_SUPPORTED);
    emu::set_compute_capability(8, 9);  // Ada: TN runs
    EXPECT_EQ(tn.run(A.p, B.p, nullptr, D.p), CUBLAS_STATUS_SUCCESS);
    emu::set_compute_capability(9, 0);
  }
  // Leading dimension of 40 FP8 values: not a multiple of 16 bytes.
  {
    DeviceBuffer<uint8_t> A40(40 * kM);
    EXPECT_EQ(Lt(CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, CUDA_R_16BF, kM, kN, kK, 40, kLd, kM).run(A40.p, B.p, nullptr, D.p),
              CUBLAS_STATUS_NOT_SUPPORTED);
  }
  // FP32 C goes with FP32 D only; a 16-bit compute type has no FP8 kernel.
  EXPECT_EQ(Lt(CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_32F, CUDA_R_8F_E4M3, kM, kN, kK, kLd, kLd, 16).heuristic(),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(Lt(CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16F, CUDA_R_16F, kM, kN, kK, kLd, kLd, kM, CUBLAS_OP_T, CUBLAS_OP_N,
               CUBLAS_COMPUTE_16F)
                .heuristic(),
            CUBLAS_STATUS_NOT_SUPPORTED);
  // A D scale for a non-FP8 D: an unsupported combination of the attribute.
  {
    Lt lt(CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, CUDA_R_16BF, kM, kN, kK, kLd, kLd, kM);
    DeviceBuffer<float> sd(std::vector<float>{1.0f});
    lt.set_ptr(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, sd.p);
    EXPECT_EQ(lt.run(A.p, B.p, nullptr, D.p), CUBLAS_STATUS_INVALID_VALUE);
  }
  // Mismatched shapes: C is not m x n.
  {
    Lt lt(CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, CUDA_R_16BF, kM, kN, kK, kLd, kLd, kM);
    cublasLtMatrixLayoutDestroy(lt.c);
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&lt.c, CUDA_R_16BF, kM, kN + 1, kM), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(lt.run(A.p, B.p, nullptr, D.p), CUBLAS_STATUS_INVALID_VALUE);
  }
  // An operand that is not 16-byte aligned.
  EXPECT_EQ(Lt(CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, CUDA_R_16BF, kM, kN, kK, kLd, kLd, kM)
                .run(A.p + 1, B.p, nullptr, D.p),
            CUBLAS_STATUS_NOT_SUPPORTED);
}

TEST_F(CublasLtFp8, ReportsTheComputeCapabilityTestsSet) {
  int major = 0, minor = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0), cudaSuccess);
  EXPECT_EQ(major * 10 + minor, 90);
}

}  // namespace
