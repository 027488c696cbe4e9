// tests/cuda_ops/test_fp8_gemm_parity.cpp — cuda::fp8_gemm_nt (ops/cuda/fp8_gemm.h) against the
// CPU: out = f32(acc * f32(scale_a * scale_b)) rounded once to BF16 / F32, the CPU FP8 GEMM's
// contract (amp/fp8_gemm.h). The FP8 operands have magnitudes in [0.25, 8), so every product and
// every partial sum of k = 32 terms is exact in FP32: any summation order gives the exact sum, the
// reference (computed in f64 on the CPU) is exact, and the comparison is bit for bit. Under the
// emulator both paths run: cuBLASLt's FP8 matmul (compute capability 9.0, TN) and the BF16
// emulation of older GPUs (8.0); on a GPU, the device's own path.
#include <cstring>
#include <vector>

#include "cuda_test_util.h"
#include "ops/cast.h"
#include "ops/cuda/fp8_gemm.h"

namespace mixtape {
namespace {
using namespace cuda_test;
#if defined(MIXTAPE_WITH_CUDA)  // helpers of the tests below, which need the cuda:: entry points

Tensor small_fp8(std::mt19937_64& rng, int64_t rows, int64_t cols, DType dt) {
  Tensor t = Tensor::empty({rows, cols}, TensorOptions(dt));
  auto* p = static_cast<uint8_t*>(t.data_ptr());
  const int mbits = dt == DType::Float8_e4m3fn ? 3 : 2, bias = dt == DType::Float8_e4m3fn ? 7 : 15;
  std::uniform_int_distribution<int> e(-2, 2), m(0, (1 << mbits) - 1), s(0, 1);
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<uint8_t>((s(rng) << 7) | ((e(rng) + bias) << mbits) | m(rng));
  return t;
}

Tensor scalar_f32(float v) {
  Tensor t = Tensor::empty({1}, TensorOptions(DType::Float32));
  t.data_ptr<float>()[0] = v;
  return t;
}

// The CPU reference: exact f64 product of the decoded values, rounded to f32 (exact here), times
// f32(sa * sb) in f32, rounded once to out_dtype.
Tensor reference(const Tensor& a, const Tensor& b, float sa, float sb, DType out_dtype) {
  const Tensor acc = to_dtype(matmul(to_dtype(a, DType::Float64), to_dtype(b, DType::Float64).t()), DType::Float32);
  const float s = sa * sb;
  return to_dtype(mul(acc, scalar_f32(s)), out_dtype);
}

::testing::AssertionResult same_bits(const Tensor& want, const Tensor& got_dev, const std::string& what) {
  const Tensor got = on_cpu(got_dev).contiguous(), w = want.contiguous();
  if (got.dtype() != w.dtype() || got.sizes() != w.sizes())
    return ::testing::AssertionFailure() << what << ": got " << got.describe() << ", want " << w.describe();
  if (std::memcmp(got.data_ptr(), w.data_ptr(), size_t(w.numel()) * w.element_size()) != 0)
    return ::testing::AssertionFailure() << what << ": bits differ";
  return ::testing::AssertionSuccess();
}

void check_all_shapes(std::mt19937_64& rng, const std::string& path) {
  for (auto [at, bt] : {std::pair{DType::Float8_e4m3fn, DType::Float8_e4m3fn},
                        std::pair{DType::Float8_e4m3fn, DType::Float8_e5m2},
                        std::pair{DType::Float8_e5m2, DType::Float8_e4m3fn}}) {
    for (auto [m, n] : {std::pair<int64_t, int64_t>{5, 8}, std::pair<int64_t, int64_t>{3, 6}}) {
      const Tensor a = small_fp8(rng, m, 32, at), b = small_fp8(rng, n, 32, bt);
      for (DType out : {DType::BFloat16, DType::Float32}) {
        const float sa = 0.375f, sb = 3.0f;  // not powers of two: the f32 rounding of s * acc shows
        const Tensor got = cuda::fp8_gemm_nt(on_cuda(a), on_cuda(b), on_cuda(scalar_f32(sa)), on_cuda(scalar_f32(sb)), out);
        EXPECT_TRUE(same_bits(reference(a, b, sa, sb, out), got,
                              path + " " + std::string(dtype_name(at)) + " x " + std::string(dtype_name(bt)) + " m=" +
                                  std::to_string(m) + " n=" + std::to_string(n) + " -> " + std::string(dtype_name(out))));
      }
    }
  }
}
#endif

TEST(CudaFp8Gemm, EqualsTheCpuContractBitForBit) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "fp8_gemm_nt takes CUDA tensors only";
#if defined(MIXTAPE_WITH_CUDA)  // the cuda:: entry points exist only in CUDA builds
  std::mt19937_64 rng(fresh_seed());
#if defined(MIXTAPE_CUDA_EMULATOR)
  cuda_emulator::set_compute_capability(9, 0);
  EXPECT_TRUE(cuda::fp8_gemm_native(0));
  check_all_shapes(rng, "cuBLASLt FP8 (sm_90)");
  cuda_emulator::set_compute_capability(8, 0);
  EXPECT_FALSE(cuda::fp8_gemm_native(0));
  check_all_shapes(rng, "BF16 emulation (sm_80)");
#else
  check_all_shapes(rng, cuda::fp8_gemm_native(0) ? "cuBLASLt FP8" : "BF16 emulation");
#endif
#endif
}

// An operand whose data starts off a 16-byte boundary (a view at an odd offset) cannot go to
// cuBLASLt: the widened path computes it, with the same bits.
TEST(CudaFp8Gemm, MisalignedOperandTakesTheWidenedPath) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "fp8_gemm_nt takes CUDA tensors only";
#if defined(MIXTAPE_WITH_CUDA)  // the cuda:: entry points exist only in CUDA builds
  std::mt19937_64 rng(fresh_seed());
  const Tensor flat = small_fp8(rng, 1, 1 + 4 * 32, DType::Float8_e4m3fn);
  const Tensor b = small_fp8(rng, 8, 32, DType::Float8_e4m3fn);
  const Tensor a = flat.view({-1}).narrow(0, 1, 4 * 32).view({4, 32});  // contiguous, one byte in
  const Tensor ad = on_cuda(flat).view({-1}).narrow(0, 1, 4 * 32).view({4, 32});
#if defined(MIXTAPE_CUDA_EMULATOR)
  cuda_emulator::set_compute_capability(9, 0);
#endif
  const Tensor got = cuda::fp8_gemm_nt(ad, on_cuda(b), on_cuda(scalar_f32(1.0f)), on_cuda(scalar_f32(1.0f)), DType::Float32);
#if defined(MIXTAPE_CUDA_EMULATOR)
  cuda_emulator::set_compute_capability(8, 0);
#endif
  EXPECT_TRUE(same_bits(reference(a.contiguous(), b, 1.0f, 1.0f, DType::Float32), got, "misaligned a"));
#endif
}

TEST(CudaFp8Gemm, RefusesWhatNoFp8GemmTakes) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "fp8_gemm_nt takes CUDA tensors only";
#if defined(MIXTAPE_WITH_CUDA)  // the cuda:: entry points exist only in CUDA builds
  std::mt19937_64 rng(fresh_seed());
  const Tensor s = on_cuda(scalar_f32(1.0f));
  auto message = [&](const Tensor& a, const Tensor& b, DType out) {
    try {
      cuda::fp8_gemm_nt(a, b, s, s, out);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const Tensor e4 = on_cuda(small_fp8(rng, 4, 32, DType::Float8_e4m3fn));
  const Tensor e5 = on_cuda(small_fp8(rng, 4, 32, DType::Float8_e5m2));
  EXPECT_NE(message(e5, e5, DType::BFloat16).find("E5M2 x E5M2"), std::string::npos);
  EXPECT_NE(message(on_cuda(small_fp8(rng, 4, 24, DType::Float8_e4m3fn)), on_cuda(small_fp8(rng, 4, 24, DType::Float8_e4m3fn)),
                    DType::BFloat16)
                .find("k=24"),
            std::string::npos);
  EXPECT_NE(message(e4, e4, DType::Float16).find("Float16"), std::string::npos);
  EXPECT_NE(message(e4, on_cuda(small_fp8(rng, 4, 16, DType::Float8_e4m3fn)), DType::BFloat16).find("[m, k]"),
            std::string::npos);
#endif
}

}  // namespace
}  // namespace mixtape
