// tests/cuda_ops/test_fp8_cast_parity.cpp — FP8 tensors on CUDA: to()/copy to and from FP8, fill,
// and the recipes' scaled saturating casts with their amax, against the CPU bit for bit. The
// inputs are every FP8 pattern of both formats and a sweep of f32 values built around each
// format's rounding points: every midpoint between adjacent FP8 values (a tie) and its f32
// neighbours, the overflow thresholds (e4m3fn 448 / 464 / 480, e5m2 57344 / 61440), infinities,
// NaNs, f32 and FP8 subnormals, signed zeros, and random values over many binades.
#include <cstring>
#include <vector>

#include "cuda_test_util.h"
#include "ops/cast.h"
#include "ops/cuda/fp8_cast.h"

namespace mixtape {
namespace {
using namespace cuda_test;

constexpr DType kFp8[] = {DType::Float8_e4m3fn, DType::Float8_e5m2};

Tensor bytes_tensor(DType dt) {  // the 256 patterns of an FP8 dtype, in order
  Tensor t = Tensor::empty({256}, TensorOptions(dt));
  auto* p = static_cast<uint8_t*>(t.data_ptr());
  for (int i = 0; i < 256; ++i) p[i] = static_cast<uint8_t>(i);
  return t;
}

Tensor f32_tensor(const std::vector<float>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, TensorOptions(DType::Float32));
  std::memcpy(t.data_ptr(), v.data(), v.size() * sizeof(float));
  return t;
}

std::string name(DType dt) { return std::string(dtype_name(dt)); }

float fp8_value(DType dt, uint8_t b) {
  return dt == DType::Float8_e4m3fn ? e4m3fn_bits_to_float(b) : e5m2_bits_to_float(b);
}

std::vector<float> sweep(std::mt19937_64& rng) {
  std::vector<float> v = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 448.0f, 464.0f, 480.0f, 57344.0f,
                          61440.0f, 1e-45f, -1e-45f, 1.17549435e-38f, 1e30f, -1e30f};
  for (float f : {464.0f, 480.0f, 61440.0f, 57344.0f, 448.0f}) {
    v.push_back(std::nextafter(f, 0.0f));
    v.push_back(std::nextafter(f, INFINITY));
    v.push_back(-std::nextafter(f, 0.0f));
  }
  for (DType dt : kFp8) {
    for (int b = 0; b < 127; ++b) {  // non-negative finite patterns, ascending
      const float lo = fp8_value(dt, static_cast<uint8_t>(b)), hi = fp8_value(dt, static_cast<uint8_t>(b + 1));
      if (!std::isfinite(lo) || !std::isfinite(hi)) continue;
      const float mid = (lo + hi) / 2;  // exact in f32: a tie of the FP8 rounding
      for (float f : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
        v.push_back(f);
        v.push_back(-f);
      }
    }
  }
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-30, 20);
  for (int i = 0; i < 2000; ++i) v.push_back((i & 1 ? -1.0f : 1.0f) * std::ldexp(mant(rng), expo(rng)));
  return v;
}

// Byte-for-byte equality of a CUDA result with the CPU's (NaN payloads and signed zeros included).
::testing::AssertionResult same_bits(const Tensor& cpu, const Tensor& cuda_result, const std::string& what) {
  const Tensor got = on_cpu(cuda_result).contiguous(), want = cpu.contiguous();
  if (got.dtype() != want.dtype() || got.sizes() != want.sizes())
    return ::testing::AssertionFailure() << what << ": CUDA gave " << got.describe() << ", CPU " << want.describe();
  const size_t es = want.element_size();
  const auto* a = static_cast<const uint8_t*>(want.data_ptr());
  const auto* b = static_cast<const uint8_t*>(got.data_ptr());
  for (int64_t i = 0; i < want.numel(); ++i)
    if (std::memcmp(a + i * es, b + i * es, es) != 0) {
      uint64_t wa = 0, wb = 0;
      std::memcpy(&wa, a + i * es, es);
      std::memcpy(&wb, b + i * es, es);
      return ::testing::AssertionFailure() << what << ": element " << i << " CPU bits 0x" << std::hex << wa
                                           << ", CUDA bits 0x" << wb;
    }
  return ::testing::AssertionSuccess();
}

TEST(CudaFp8Cast, EveryPatternWidensLikeTheCpu) {
  MT_REQUIRE_CUDA();
  for (DType dt : kFp8) {
    const Tensor x = bytes_tensor(dt);
    const Tensor xc = on_cuda(x);
    EXPECT_TRUE(same_bits(x, xc, "round trip " + name(dt)));
    for (DType to : {DType::Float32, DType::BFloat16, DType::Float16, DType::Float64})
      EXPECT_TRUE(same_bits(to_dtype(x, to), to_dtype(xc, to), name(dt) + " -> " + name(to)));
    // FP8 -> FP8 of the other format goes through f32, as on the CPU.
    const DType other = dt == DType::Float8_e4m3fn ? DType::Float8_e5m2 : DType::Float8_e4m3fn;
    EXPECT_TRUE(same_bits(to_dtype(x, other), to_dtype(xc, other), name(dt) + " -> other"));
    for (float scale : {1.0f, 0.125f, 1024.0f})
      EXPECT_TRUE(same_bits(from_float8(x, scale), from_float8(xc, scale), "from_float8 scale " + std::to_string(scale)));
    // Strided: every other pattern.
    const Tensor xs = x.view({128, 2}).select(1, 1);
    EXPECT_TRUE(same_bits(to_dtype(xs, DType::Float32), to_dtype(on_cuda(x).view({128, 2}).select(1, 1), DType::Float32),
                          "strided widen"));
  }
}

TEST(CudaFp8Cast, NarrowingSweepMatchesTheCpu) {
  MT_REQUIRE_CUDA();
  std::mt19937_64 rng(fresh_seed());
  const Tensor x = f32_tensor(sweep(rng));
  const Tensor xc = on_cuda(x);
  for (DType dt : kFp8) {
    const std::string t = name(dt);
    EXPECT_TRUE(same_bits(to_dtype(x, dt), to_dtype(xc, dt), "to " + t));
    for (DType src : {DType::BFloat16, DType::Float16, DType::Float64}) {
      const Tensor xs = to_dtype(x, src);
      EXPECT_TRUE(same_bits(to_dtype(xs, dt), to_dtype(on_cuda(xs), dt), name(src) + " to " + t));
    }
    for (Fp8Saturation sat : {Fp8Saturation::None, Fp8Saturation::Finite})
      for (float scale : {1.0f, 0.5f, 8.0f, 1.0f / 3.0f}) {
        const std::string what = "to_float8 " + t + " scale " + std::to_string(scale) +
                                 (sat == Fp8Saturation::Finite ? " satfinite" : " none");
        EXPECT_TRUE(same_bits(to_float8(x, dt, {scale, sat}), to_float8(xc, dt, {scale, sat}), what));
        const Tensor xb = to_dtype(x, DType::BFloat16);
        EXPECT_TRUE(same_bits(to_float8(xb, dt, {scale, sat}), to_float8(on_cuda(xb), dt, {scale, sat}), what + " bf16"));
      }
  }
}

// The device variant the recipes use on a GPU: the scale read from a device tensor, the amax of
// the unscaled input (NaN dropped) folded into a device tensor.
TEST(CudaFp8Cast, DeviceScaleAndAmax) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "cuda::to_float8 takes CUDA tensors only";
#if defined(MIXTAPE_WITH_CUDA)  // the cuda:: entry points exist only in CUDA builds
  std::mt19937_64 rng(fresh_seed());
  std::vector<float> v = sweep(rng);
  v.resize(1500);  // several blocks of the amax reduction, and a ragged tail
  for (float& f : v)
    if (std::isinf(f)) f = 3.0f;  // an inf would win the max; test it separately below
  float want = 0.0f;
  for (float f : v)
    if (std::fabs(f) > want) want = std::fabs(f);  // NaN compares false: dropped
  const Tensor x = f32_tensor(v), xc = on_cuda(x);
  for (DType dt : kFp8) {
    const Tensor scale = on_cuda(f32_tensor({0.25f}));
    Tensor amax = on_cuda(f32_tensor({0.0f}));
    const Tensor y = cuda::to_float8(xc, dt, {1.0f, Fp8Saturation::Finite}, scale, amax);
    EXPECT_TRUE(same_bits(to_float8(x, dt, {0.25f, Fp8Saturation::Finite}), y, "device scale"));
    EXPECT_EQ(on_cpu(amax).item<float>(), want);
    // A second cast folds into the same amax: the larger wins.
    cuda::to_float8(on_cuda(f32_tensor({-2.0f * want, NAN})), dt, {1.0f, Fp8Saturation::Finite}, {}, amax);
    EXPECT_EQ(on_cpu(amax).item<float>(), 2.0f * want);
    Tensor amax_inf = on_cuda(f32_tensor({0.0f}));
    cuda::to_float8(on_cuda(f32_tensor({1.0f, -INFINITY})), dt, {1.0f, Fp8Saturation::Finite}, {}, amax_inf);
    EXPECT_EQ(on_cpu(amax_inf).item<float>(), INFINITY);
  }
  EXPECT_THROW(cuda::to_float8(xc, DType::Float8_e4m3fn, {}, on_cuda(f32_tensor({1.0f, 2.0f}))), Error);
  EXPECT_THROW(cuda::to_float8(xc, DType::Float8_e4m3fn, {}, {}, f32_tensor({0.0f})), Error);  // amax on the CPU
#endif
}

TEST(CudaFp8Cast, FillAndRefusals) {
  MT_REQUIRE_CUDA();
  for (DType dt : kFp8) {
    for (double v : {0.0, -1.5, 300.0, 465.0, 1e9, -1e-9}) {
      Tensor a = Tensor::empty({37}, TensorOptions(dt));
      Tensor b = Tensor::empty({37}, TensorOptions(dt).with_device(gpu()));
      fill_(a, v);
      fill_(b, v);
      EXPECT_TRUE(same_bits(a, b, "fill " + std::to_string(v)));
    }
  }
  if (selfcheck()) return;
  // Arithmetic has no FP8 CUDA kernel: refused by name, never a silent upcast.
  const Tensor x = on_cuda(bytes_tensor(DType::Float8_e4m3fn));
  try {
    (void)exp(x);
    ADD_FAILURE() << "exp of an FP8 CUDA tensor did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Float8_e4m3fn"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mixtape
