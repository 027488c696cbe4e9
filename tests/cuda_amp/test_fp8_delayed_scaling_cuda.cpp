// tests/cuda_amp/test_fp8_delayed_scaling_cuda.cpp — the delayed-scaling update on the device
// (::mixtape::amp::cuda::update_delayed_scaling) against the CPU's Fp8Metas::update_scales, bit for bit, over
// several steps of recorded amaxes: the rolled history, the scale and scale_inv, for both amax
// algorithms, margins 0, 1 and 0.5 (a non-power-of-two 2^-margin), power-of-two scales on and off,
// both formats, and amaxes of 0, NaN, inf, tiny and huge values (kept scale, clamps).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "amp/cuda/fp8_delayed_scaling.h"
#include "amp/fp8_scaling.h"
#include "ops/cuda/fp8_cast.h"
#include "cuda_ops/cuda_test_util.h"
#include "mixtape/mixtape.h"

namespace mixtape {
namespace {
using namespace cuda_test;
using namespace amp;

#if defined(MIXTAPE_WITH_CUDA)
bool same_bits(const Tensor& cpu, const Tensor& dev) {
  const Tensor d = on_cpu(dev).contiguous(), c = cpu.contiguous();
  return d.sizes() == c.sizes() && std::memcmp(d.data_ptr(), c.data_ptr(), size_t(c.nbytes())) == 0;
}
#endif

TEST(CudaFp8DelayedScaling, UpdateEqualsTheCpuBitForBit) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "update_delayed_scaling takes CUDA tensors only";
#if defined(MIXTAPE_WITH_CUDA)  // the cuda:: entry points exist only in CUDA builds
  std::mt19937_64 rng(fresh_seed());
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-20, 20), kind(0, 9);
  auto amax_draw = [&] {
    switch (kind(rng)) {
      case 0: return 0.0f;
      case 1: return NAN;
      case 2: return INFINITY;
      case 3: return 1e-40f;  // the scale clamps to FLT_MAX
      default: return std::ldexp(mant(rng), expo(rng));
    }
  };
  for (AmaxComputeAlgo algo : {AmaxComputeAlgo::Max, AmaxComputeAlgo::MostRecent})
    for (float margin : {0.0f, 1.0f, 0.5f})
      for (bool pow2 : {false, true})
        for (Fp8Format format : {Fp8Format::Hybrid, Fp8Format::E4M3}) {
          DelayedScaling recipe;
          recipe.amax_history_len = 4;
          recipe.amax_compute_algo = algo;
          recipe.margin = margin;
          recipe.power_of_2_scales = pow2;
          recipe.fp8_format = format;
          Fp8Metas cpu(recipe, {{"fc.weight", zeros({2, 2})}});
          Fp8Meta& c = const_cast<Fp8Meta&>(cpu.metas()[0]);
          Fp8Meta d;
          d.name = c.name;
          d.amax_history = on_cuda(c.amax_history);
          d.scale = on_cuda(c.scale);
          d.scale_inv = on_cuda(c.scale_inv);
          for (int step = 0; step < 7; ++step) {
            // This step's casts: two amaxes per role into row 0, the same on both sides.
            Tensor h = on_cpu(d.amax_history).clone();
            for (int role = 0; role < kFp8Roles; ++role)
              for (int cast = 0; cast < 2; ++cast) {
                const float a = amax_draw();
                c.record_amax(static_cast<Fp8Role>(role), a);
                float& slot = h.data_ptr<float>()[role];
                slot = std::fmax(slot, a);
              }
            d.amax_history = on_cuda(h);
            cpu.update_scales();
            ::mixtape::amp::cuda::update_delayed_scaling(d, recipe);
            const std::string what = "step " + std::to_string(step) + " margin " + std::to_string(margin) +
                                     (pow2 ? " pow2" : "") + (algo == AmaxComputeAlgo::Max ? " max" : " most_recent");
            EXPECT_TRUE(same_bits(c.amax_history, d.amax_history)) << what;
            EXPECT_TRUE(same_bits(c.scale, d.scale)) << what << ": CPU " << c.scale << ", CUDA " << on_cpu(d.scale)
                                                     << " history " << c.amax_history;
            EXPECT_TRUE(same_bits(c.scale_inv, d.scale_inv)) << what;
          }
        }
#endif
}

// The recipe's steps composed on the device, nothing read back between them: each role's cast
// reads its scale from the meta's scale tensor and folds its amax into the history's row 0 (the
// cast's amax argument is a one-element view of that row), then the update runs. The casts, the
// histories and the scales equal the CPU recipe's (amax_of, record_amax, to_float8,
// update_scales) bit for bit, step after step, saturation in the first step included.
TEST(CudaFp8DelayedScaling, CastRecordAndUpdateStayOnTheDevice) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "the device casts take CUDA tensors only";
#if defined(MIXTAPE_WITH_CUDA)  // the cuda:: entry points exist only in CUDA builds
  std::mt19937_64 rng(fresh_seed());
  DelayedScaling recipe;
  recipe.amax_history_len = 3;
  Fp8Metas cpu(recipe, {{"fc.weight", zeros({2, 2})}});
  Fp8Meta& c = const_cast<Fp8Meta&>(cpu.metas()[0]);
  Fp8Meta d;
  d.name = c.name;
  d.amax_history = on_cuda(c.amax_history);
  d.scale = on_cuda(c.scale);
  d.scale_inv = on_cuda(c.scale_inv);
  for (int step = 0; step < 5; ++step) {
    for (int role = 0; role < kFp8Roles; ++role) {
      const DType dt = fp8_dtype_for(recipe.fp8_format, static_cast<Fp8Role>(role));
      // Magnitudes up to 2^(10 + 3 step): step 0 saturates E4M3 at scale 1.
      const Tensor x = random_input(rng, {7, 33}, DType::Float32, 0.5, std::ldexp(1.0, 10 + 3 * step));
      const Tensor y_cpu = to_float8(x, dt, {c.scale_of(static_cast<Fp8Role>(role)), Fp8Saturation::Finite});
      c.record_amax(static_cast<Fp8Role>(role), amax_of(x));
      const Tensor slot = d.amax_history.select(0, 0).narrow(0, role, 1);
      const Tensor y_dev = ::mixtape::cuda::to_float8(on_cuda(x), dt, {1.0f, Fp8Saturation::Finite},
                                                      d.scale.narrow(0, role, 1), slot);
      EXPECT_TRUE(same_bits(y_cpu, y_dev)) << "step " << step << " role " << role;
    }
    cpu.update_scales();
    ::mixtape::amp::cuda::update_delayed_scaling(d, recipe);
    EXPECT_TRUE(same_bits(c.amax_history, d.amax_history)) << "step " << step;
    EXPECT_TRUE(same_bits(c.scale, d.scale)) << "step " << step;
    EXPECT_TRUE(same_bits(c.scale_inv, d.scale_inv)) << "step " << step;
  }
#endif
}

TEST(CudaFp8DelayedScaling, RefusesAMetaThatDoesNotFitTheRecipe) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "update_delayed_scaling takes CUDA tensors only";
#if defined(MIXTAPE_WITH_CUDA)  // the cuda:: entry points exist only in CUDA builds
  DelayedScaling recipe;
  recipe.amax_history_len = 4;
  Fp8Meta m;
  m.name = "fc";
  m.amax_history = on_cuda(zeros({8, 3}));  // another history length
  m.scale = on_cuda(ones({3}));
  m.scale_inv = on_cuda(ones({3}));
  try {
    ::mixtape::amp::cuda::update_delayed_scaling(m, recipe);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(4, 3)"), std::string::npos) << e.what();
  }
  m.amax_history = zeros({4, 3});  // on the CPU
  EXPECT_THROW(::mixtape::amp::cuda::update_delayed_scaling(m, recipe), Error);
#endif
}

}  // namespace
}  // namespace mixtape
