// tests/cuda_amp/test_fp8_numerics_cuda.cpp — the NaN locator (MIXTAPE_CHECK_NUMERICS,
// core/numerics_check.h) on Fp8Autocast(CUDA)'s backward: the FP8 GEMM nodes launch their casts and
// GEMMs outside run_kernel, so each node's backward is checked as one op, as the CPU node's is
// (tests/amp/test_numerics_check.cpp). A finite output gradient whose FP8 input gradient overflows
// is reported at the node — linear_fp8_backward / conv2d_fp8_backward, its tape entry, the output
// gradient's and the saved FP8 operands' dtypes — under per-tensor scaling on cuBLASLt's FP8
// matmul (compute capability 9.0) and under MXFP8. Below 8.9 the widened GEMM's scale multiply is
// a dispatcher op of its own and the overflow happens there: reported inside the node's backward.
// A NaN handed to the node in its output gradient is not the node's finding (not from finite inputs).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/numerics_error_of.h"
#include "amp/fp8_autocast.h"
#include "core/numerics_check.h"
#include "cuda_ops/cuda_test_util.h"
#include "mixtape/mixtape.h"
#if defined(MIXTAPE_WITH_CUDA)
#include "ops/cuda/fp8_gemm.h"
#endif

namespace mixtape {
namespace {
using namespace cuda_test;
using numerics::CheckNumerics;
using numerics::NumericsError;
using ::mixtape::testing::numerics_error_of;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }


// Runs `body` on the cuBLASLt path (9.0) and, in the emulator, the widened one (8.0) too; `native`
// tells the body which.
template <class F>
void for_each_gemm_path(F&& body) {
#if defined(MIXTAPE_CUDA_EMULATOR)
  if (!selfcheck()) {
    for (int cc : {90, 80}) {
      cuda_emulator::set_compute_capability(cc / 10, cc % 10);
      SCOPED_TRACE("sm_" + std::to_string(cc));
      body(cc == 90);
    }
    cuda_emulator::set_compute_capability(8, 0);
    return;
  }
#endif
#if defined(MIXTAPE_WITH_CUDA)
  if (!selfcheck()) {
    body(cuda::fp8_gemm_native(0));
    return;
  }
#endif
  body(true);  // the CPU standing in: its node scales inside the GEMM
}

// linear: x 1e-30, w 1e30 (forward 4, finite); the output gradient 1e10 gives dx = 2e40 > FLT_MAX.
TEST(CudaFp8Numerics, NamesAnFp8LinearsBackwardThatOverflows) {
  MT_REQUIRE_CUDA();
  for (const amp::Fp8Recipe& recipe : {amp::Fp8Recipe(amp::CurrentScaling{}), amp::Fp8Recipe(amp::MXFP8BlockScaling{})}) {
    const bool mx = std::holds_alternative<amp::MXFP8BlockScaling>(recipe);
    SCOPED_TRACE(amp::recipe_string(recipe));
    for_each_gemm_path([&](bool native) {
      CheckNumerics check;
      const Tensor x = full({1, 32}, 1e-30).to(gpu()).requires_grad_(true);
      const Tensor w = full({2, 32}, 1e30).to(gpu()).requires_grad_(true);
      Tensor y;
      {
        amp::Fp8Autocast fp8(recipe, nullptr, {DType::Float32}, gpu().type());
        y = linear(x, w);
      }
      const NumericsError e = numerics_error_of([&] { y.backward(full({1, 2}, 1e10).to(gpu())); });
      const std::string m = e.what();
      EXPECT_TRUE(e.backward()) << m;
      EXPECT_TRUE(has(m, "Fp8LinearBackward  (")) << m;
      if (!native && !mx) {
        // The widened GEMM multiplies its FP32 result by the scales with `mul`: that op overflows.
        EXPECT_EQ(e.op(), "mul") << m;
        return;
      }
      EXPECT_EQ(e.op(), "linear_fp8_backward") << m;
      EXPECT_TRUE(has(m, "linear_fp8_backward (backward) produced inf or NaN from finite inputs")) << m;
      EXPECT_TRUE(has(m, "grad_output f32[1, 2]") && has(m, "amax 1e+10")) << m;
      EXPECT_TRUE(has(m, "saved input (FP8) f8e4m3fn[1, 32]")) << m;
      EXPECT_TRUE(has(m, "weight (its saved FP8 copy, or itself) f32[2, 32]")) << m;  // the leaf, cast again
      EXPECT_TRUE(has(m, "output 0 f32[1, 32]") && has(m, "(32 inf, 0 NaN of 32)")) << m;
    });
  }
}

// conv2d, per-tensor: a 1x1 convolution with the same numbers (dgrad = sum over 2 channels of
// 1e10 * 1e30); the node keeps the FP8 image.
TEST(CudaFp8Numerics, NamesAnFp8Conv2dsBackwardThatOverflows) {
  MT_REQUIRE_CUDA();
  for_each_gemm_path([&](bool native) {
    CheckNumerics check;
    const Tensor x = full({1, 16, 2, 2}, 1e-30).to(gpu()).requires_grad_(true);
    const Tensor w = full({2, 16, 1, 1}, 1e30).to(gpu()).requires_grad_(true);
    Tensor y;
    {
      amp::Fp8Autocast fp8(amp::CurrentScaling{}, nullptr, {DType::Float32}, gpu().type());
      y = conv2d(x, w);
    }
    const NumericsError e = numerics_error_of([&] { y.backward(full({1, 2, 2, 2}, 1e10).to(gpu())); });
    const std::string m = e.what();
    EXPECT_TRUE(has(m, "Fp8Conv2dBackward  (")) << m;
    if (!native) {
      EXPECT_EQ(e.op(), "mul") << m;
      return;
    }
    EXPECT_EQ(e.op(), "conv2d_fp8_backward") << m;
    EXPECT_TRUE(has(m, "grad_output f32[1, 2, 2, 2]")) << m;
    EXPECT_TRUE(has(m, "saved input (FP8) f8e4m3fn[1, 16, 2, 2]")) << m;
  });
}

// The locator names the op that made a non-finite value from finite inputs: a NaN handed to the
// FP8 node in its output gradient (by the caller: no op made it) is not the node's finding, though
// its input gradient comes out NaN.
TEST(CudaFp8Numerics, ANanGivenInTheOutputGradientIsNotTheNodesFinding) {
  MT_REQUIRE_CUDA();
  for (const amp::Fp8Recipe& recipe : {amp::Fp8Recipe(amp::CurrentScaling{}), amp::Fp8Recipe(amp::MXFP8BlockScaling{})}) {
    SCOPED_TRACE(amp::recipe_string(recipe));
    CheckNumerics check(numerics::OnFinding::Report);
    const Tensor x = full({1, 32}, 1.0).to(gpu()).requires_grad_(true);
    const Tensor w = full({2, 32}, 1.0).to(gpu()).requires_grad_(true);
    Tensor y;
    {
      amp::Fp8Autocast fp8(recipe, nullptr, {DType::Float32}, gpu().type());
      y = linear(x, w);
    }
    y.backward(tensor(std::vector<double>{1.0, std::nan("")}, {1, 2}).to(gpu()));
    bool nan = false;
    for (float v : on_cpu(x.grad()).to_vector<float>()) nan = nan || std::isnan(v);
    EXPECT_TRUE(nan) << "the NaN reached the input gradient";
    const std::vector<numerics::Finding> f = numerics::findings();
    EXPECT_TRUE(f.empty()) << f[0].message;
  }
}

}  // namespace
}  // namespace mixtape
