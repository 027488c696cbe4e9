// tests/cuda_amp/test_amp_reference_cuda.cpp — the AMP behaviours of docs/amp-behaviours.md
// whose test names the CUDA device (#1 on CUDA, #6, #19, #35, #36, and the scaler's
// skip/backoff/growth end to end). Labelled gpu; skipped with the reason where no GPU is usable.
// The CPU halves of these behaviours are tested in tests/amp and tests/core; here the CUDA result
// is checked against the same reference values, or against the CPU kernel bit for bit.
// MIXTAPE_CUDA_TEST_SELFCHECK=1 runs them with the "GPU" side on the CPU, to prove the tests
// themselves on a machine without a GPU (the CUDA-only ban is then skipped).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "amp/scaler_kernels.h"
#include "common/error_of.h"
#include "cuda_ops/cuda_test_util.h"

namespace mixtape {
namespace {
using cuda_test::gpu;
using testing::error_of;

std::vector<uint16_t> bits16(const Tensor& t) {
  Tensor c = t.to(Device::CPU()).contiguous();
  std::vector<uint16_t> out(static_cast<size_t>(c.numel()));
  std::memcpy(out.data(), c.data_ptr(), out.size() * 2);
  return out;
}

// #1: lower-precision ops under CUDA autocast return f16, equal to the op on f16 copies.
TEST(AmpReferenceCuda, B01_MatmulAndLinearAutocastToHalf) {
  MT_REQUIRE_CUDA();
  Generator g(1);
  Tensor a = randn({8, 32}, {}, &g).to(gpu()), b = randn({32, 5}, {}, &g).to(gpu());
  Tensor w = randn({5, 32}, {}, &g).to(gpu());
  Tensor y, l;
  {
    amp::AutocastGuard ac(gpu().type(), DType::Float16);
    y = matmul(a, b);
    l = linear(a, w);
  }
  EXPECT_EQ(y.dtype(), DType::Float16);
  EXPECT_EQ(l.dtype(), DType::Float16);
  EXPECT_EQ(bits16(y), bits16(matmul(a.to(DType::Float16), b.to(DType::Float16))));
}

// #6: binary_cross_entropy is refused under CUDA autocast, with the explanation; the logits
// form runs (in f32).
TEST(AmpReferenceCuda, B06_BinaryCrossEntropyBannedUnderCudaAutocast) {
  MT_REQUIRE_CUDA();
  if (gpu().is_cpu()) GTEST_SKIP() << "the ban belongs to CUDA autocast; the selfcheck runs on the CPU";
  Tensor p = full({4}, 0.3).to(gpu()), t = full({4}, 1.0).to(gpu());
  amp::AutocastGuard ac(DeviceType::CUDA, DType::Float16);
  const std::string e = error_of([&] { binary_cross_entropy(p, t); });
  EXPECT_NE(e.find("binary_cross_entropy"), std::string::npos) << e;
  EXPECT_NE(e.find("binary_cross_entropy_with_logits"), std::string::npos) << e;
  EXPECT_EQ(binary_cross_entropy_with_logits(p, t).dtype(), DType::Float32);
}

// #19: PyTorch's update-scale kernel vector, run by the CUDA kernel on device tensors.
TEST(AmpReferenceCuda, B19_UpdateScaleKernelVectorOnDevice) {
  MT_REQUIRE_CUDA();
  Tensor scale = full({1}, 4.0, TensorOptions(DType::Float32)).to(gpu());
  Tensor tracker = zeros({1}, TensorOptions(DType::Int32)).to(gpu());
  Tensor clean = zeros({1}, TensorOptions(DType::Float32)).to(gpu());
  Tensor inf = full({1}, 1.0, TensorOptions(DType::Float32)).to(gpu());
  auto state = [&] {
    return std::make_pair(tracker.to(Device::CPU()).item<int32_t>(), scale.to(Device::CPU()).item<float>());
  };
  amp::update_scale_(scale, tracker, clean, 2.0, 0.25, 2);
  EXPECT_EQ(state(), std::make_pair(1, 4.0f));
  amp::update_scale_(scale, tracker, clean, 2.0, 0.25, 2);
  EXPECT_EQ(state(), std::make_pair(0, 8.0f));
  amp::update_scale_(scale, tracker, inf, 2.0, 0.25, 2);
  EXPECT_EQ(state(), std::make_pair(0, 2.0f));
}

// #35: the CUDA conversion kernels give the CPU converter's bits (which tests/core checks
// against the conversion tables): every 16-bit pattern widened, and fp32 inputs of every
// class narrowed. NaN rows: the result is a NaN (bits compared too: both sides run core/half.h).
TEST(AmpReferenceCuda, B35_ConversionsBitExactWithTheCpu) {
  MT_REQUIRE_CUDA();
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    std::vector<uint16_t> all(65536);
    for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
    Tensor pat = Tensor::empty({65536}, TensorOptions(dt));
    std::memcpy(pat.data_ptr(), all.data(), all.size() * 2);
    Tensor wide_cpu = pat.to(DType::Float32), wide_gpu = pat.to(gpu()).to(DType::Float32).to(Device::CPU());
    ASSERT_EQ(std::memcmp(wide_cpu.data_ptr(), wide_gpu.data_ptr(), 65536 * 4), 0) << dtype_name(dt) << " widening";
    EXPECT_EQ(bits16(wide_cpu.to(gpu()).to(dt)), bits16(pat.to(DType::Float32).to(dt))) << "round trip";

    std::mt19937 rng(35);
    std::vector<uint32_t> raw(1 << 20);
    for (size_t i = 0; i < raw.size(); ++i) {
      // half raw bits (every class), half with exponents near the 16-bit range
      raw[i] = i % 2 ? rng() : ((rng() & 0x807FFFFFu) | ((100u + rng() % 60u) << 23));
    }
    Tensor f = Tensor::empty({static_cast<int64_t>(raw.size())}, TensorOptions(DType::Float32));
    std::memcpy(f.data_ptr(), raw.data(), raw.size() * 4);
    EXPECT_EQ(bits16(f.to(gpu()).to(dt)), bits16(f.to(dt))) << dtype_name(dt) << " narrowing";
  }
}

// #36: a 16-bit GEMM accumulates in f32 and rounds once: 4096 ones sum to 4096 (0x6C00).
TEST(AmpReferenceCuda, B36_HalfDotOf4096OnesIsExactly4096) {
  MT_REQUIRE_CUDA();
  Tensor a = ones({1, 4096}, DType::Float16).to(gpu()), b = ones({4096, 1}, DType::Float16).to(gpu());
  EXPECT_EQ(matmul(a, b).to(Device::CPU()).item<Half>().bits, 0x6C00);
  EXPECT_EQ(sum(ones({4096}, DType::Float16).to(gpu())).to(Device::CPU()).item<Half>().bits, 0x6C00);
}

// #16-#18 end to end on the device: an inf gradient skips the step and halves the scale; clean
// steps leave it; growth after growth_interval clean steps.
TEST(AmpReferenceCuda, ScalerSkipBackoffAndGrowthOnDevice) {
  MT_REQUIRE_CUDA();
  Tensor w = full({4}, 1.0).to(gpu()).detach().requires_grad_(true);
  optim::SGD opt({w}, {.lr = 0.1});
  amp::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2});
  auto step = [&](double poison) {
    opt.zero_grad();
    Tensor loss = sum(w * full({4}, poison).to(gpu()));
    scaler.scale(loss).backward();
    const bool stepped = scaler.step(opt);
    scaler.update();
    return stepped;
  };
  const std::vector<float> before = w.detach().to(Device::CPU()).to_vector<float>();
  EXPECT_FALSE(step(INFINITY));
  EXPECT_EQ(w.detach().to(Device::CPU()).to_vector<float>(), before);
  EXPECT_EQ(scaler.get_scale(), 512.0);
  EXPECT_TRUE(step(1.0));
  EXPECT_EQ(scaler.get_scale(), 512.0);
  EXPECT_TRUE(step(1.0));
  EXPECT_EQ(scaler.get_scale(), 1024.0);  // two clean steps: grown
  // Two SGD steps of lr 0.1 with gradient 1 (unscaled exactly: S is a power of two).
  for (float v : w.detach().to(Device::CPU()).to_vector<float>()) EXPECT_FLOAT_EQ(v, 0.8f);
}

}  // namespace
}  // namespace mixtape
