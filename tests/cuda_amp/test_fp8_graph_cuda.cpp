// tests/cuda_amp/test_fp8_graph_cuda.cpp — an Fp8Autocast(CUDA) training step replayed as a CUDA
// graph (core/cuda/graphed_step.h) equals the same steps run eagerly, bit for bit: a conv + linear
// model trained 3 eager warm-up steps and 7 replays, a new batch copied into the static buffers
// before each, gives the eager run's losses, weights and, under delayed scaling, FP8 metadata
// (amax history, scale, scale_inv) after every step — the update at the region's entry rolls the
// history and moves the scales at each replay as eagerly (history length 4, so it wraps). Under
// DelayedScaling, CurrentScaling and MXFP8BlockScaling, on the cuBLASLt path (compute capability
// 9.0) and the BF16-widened one (8.0); with an amax reducer (DDP's hook) and a checkpointed
// segment (recomputed in the captured backward) too; the replays wait for the device zero times. Gradient
// accumulation as examples/graphed_training.h runs it under delayed scaling: the first
// micro-batch's step (which updates the scales) and the later ones' (which do not) as two graphs.
// Labelled gpu: runs on a GPU and on the CUDA emulator; skipped in the self-check (no graphs).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "amp/fp8_autocast.h"
#include "amp/fp8_meta.h"
#include "autograd/checkpoint.h"
#include "cuda_ops/cuda_test_util.h"
#include "mixtape/mixtape.h"
#include "models/backward_into_grads.h"

#if defined(MIXTAPE_WITH_CUDA)
#include "core/cuda/graphed_step.h"
#endif

namespace mixtape {
namespace {
using namespace cuda_test;
using namespace amp;

#if defined(MIXTAPE_WITH_CUDA)

constexpr int kWarmup = 3, kSteps = 10;

::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  const Tensor x = on_cpu(a).contiguous(), y = on_cpu(b).contiguous();
  if (x.dtype() == y.dtype() && x.sizes() == y.sizes() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << " differs: eager " << x << " graphed " << y;
}

// What one run leaves after each optimizer step (on the CPU).
struct Outcome {
  std::vector<Tensor> losses;             // per micro-batch
  std::vector<std::vector<Tensor>> params;  // per step
  std::vector<StateDict> metas;           // per step (delayed scaling)
};

// The batches: the same for both runs (a fresh seed per test run, printed).
struct Batches {
  std::vector<Tensor> xs, rs;  // per micro-batch, on the CPU
};

// conv 2 -> 4 (3x3, pad 1), relu, linear 64 -> 4 with bias; loss sum(y * r) (r: the output
// gradient). Trained by capturable SGD with momentum; accumulate > 1: nn::backward_into_grads into
// the .grad buffers and the optimizer step after the last micro-batch.
struct Variant {
  int accumulate = 1;
  bool reducer = false;       // delayed: an amax reducer (DDP's all-reduce stands in: amaxes times 2)
  bool checkpointed = false;  // conv + relu as an autograd::checkpoint segment (recomputed in backward)
  std::string str() const {
    return "accumulate " + std::to_string(accumulate) + (reducer ? ", amax reducer" : "") +
           (checkpointed ? ", checkpointed conv" : "");
  }
};

Outcome train(const Fp8Recipe& recipe, const Batches& data, const Variant& v, bool graphed, uint64_t seed) {
  const int accumulate = v.accumulate;
  std::mt19937_64 rng(seed);
  const Device dev = Device::CUDA();
  auto leaf = [&](const Tensor& t) { return t.to(dev).detach().requires_grad_(true); };
  const Tensor cw = leaf(random_input(rng, {4, 2, 3, 3}, DType::Float32, 0.05, 0.5));
  const Tensor fw = leaf(random_input(rng, {4, 64}, DType::Float32, 0.05, 0.5));
  const Tensor fb = leaf(random_input(rng, {4}, DType::Float32, 0.05, 0.5));
  const std::vector<Tensor> params{cw, fw, fb};
  std::optional<Fp8Metas> metas;
  if (const auto* d = std::get_if<DelayedScaling>(&recipe))
    metas.emplace(*d, std::vector<std::pair<std::string, Tensor>>{{"conv.weight", cw}, {"fc.weight", fw}});
  optim::SGD opt(params, optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  opt.set_capturable(true);
  const TensorOptions f32 = TensorOptions(DType::Float32).with_device(dev);
  Tensor static_x = zeros({2, 2, 4, 4}, f32), static_r = zeros({2, 4}, f32);
  Tensor loss_out = zeros({}, f32);  // each step copies its loss here (the graphs' own tensors differ)

  // update_scales: the delayed recipe's once-per-step update, at the first micro-batch's region.
  auto forward_loss = [&](bool update_scales) {
    Fp8AutocastOptions options{.output_dtype = DType::BFloat16, .update_scales = update_scales};
    if (v.reducer) options.amax_reducer = [](Tensor& amaxes) { amaxes = amaxes * 2.0; };
    const auto conv = [&](const Tensor& x) { return relu(conv2d(x, cw, {}, {1, 1}, {1, 1})); };
    Tensor y;
    {
      Fp8Autocast fp8(recipe, metas ? &*metas : nullptr, options, DeviceType::CUDA);
      const Tensor h = v.checkpointed ? autograd::checkpoint(conv, static_x) : conv(static_x);
      y = linear(h.flatten(1), fw, fb);
    }
    return sum(y.to(DType::Float32) * static_r);
  };
  auto whole_step = [&] {
    opt.zero_grad();
    const Tensor loss = forward_loss(true);
    loss.backward();
    opt.step();
    loss_out.copy_(loss.detach());
  };
  auto micro_step = [&](bool first) {
    const Tensor loss = forward_loss(first);
    nn::backward_into_grads(loss / static_cast<double>(accumulate), params);
    loss_out.copy_(loss.detach());
  };
  auto optimizer_step = [&] {
    opt.step();
    opt.zero_grad(false);  // in place: the captured micro-steps add into these buffers
  };
  std::unique_ptr<cuda::GraphedStep> g_whole, g_first, g_later, g_opt;
  if (graphed) {
    g_whole = std::make_unique<cuda::GraphedStep>(whole_step, kWarmup);
    g_first = std::make_unique<cuda::GraphedStep>([&] { micro_step(true); }, kWarmup);
    g_later = std::make_unique<cuda::GraphedStep>([&] { micro_step(false); }, kWarmup);
    g_opt = std::make_unique<cuda::GraphedStep>(optimizer_step, kWarmup);
  }
  Outcome out;
  for (int s = 0; s < kSteps; ++s) {
    for (int m = 0; m < accumulate; ++m) {
      const size_t i = size_t(s * accumulate + m);
      static_x.copy_(data.xs[i]);
      static_r.copy_(data.rs[i]);
#if defined(MIXTAPE_CUDA_EMULATOR)
      const uint64_t waits = cuda_emulator::host_waits();
#endif
      if (accumulate == 1) {
        graphed ? (*g_whole)() : whole_step();
      } else {
        if (m == 0) {
          graphed ? (*g_first)() : micro_step(true);
        } else {
          graphed ? (*g_later)() : micro_step(false);
        }
        if (m + 1 == accumulate) graphed ? (*g_opt)() : optimizer_step();
      }
#if defined(MIXTAPE_CUDA_EMULATOR)
      if (graphed && s > kWarmup && cuda_emulator::streams_deferred()) {
        EXPECT_EQ(cuda_emulator::host_waits(), waits) << "replayed step " << s << " waited for the device";
      }
#endif
      out.losses.push_back(on_cpu(loss_out));
    }
    std::vector<Tensor> ps;
    for (const Tensor& p : params) ps.push_back(on_cpu(p.detach()));
    out.params.push_back(std::move(ps));
    if (metas) {
      StateDict sd;
      for (const auto& [k, t] : metas->state_dict()) sd[k] = on_cpu(t);
      out.metas.push_back(std::move(sd));
    }
  }
  if (graphed) {
    const bool captured =
        accumulate == 1 ? g_whole->captured() : g_first->captured() && g_later->captured() && g_opt->captured();
    EXPECT_TRUE(captured) << "the graphed run must have replayed captured steps";
  }
  return out;
}

// Each compute capability the FP8 GEMM has a path for (the emulator can be either; a GPU is its own).
void for_each_gemm_path(const std::function<void(const std::string&)>& body) {
#if defined(MIXTAPE_CUDA_EMULATOR)
  for (int cc : {90, 80}) {
    cuda_emulator::set_compute_capability(cc / 10, cc % 10);
    body("sm_" + std::to_string(cc));
  }
  cuda_emulator::set_compute_capability(8, 0);
#else
  body("this device");
#endif
}

void expect_graphed_equals_eager(const Fp8Recipe& recipe, const Variant& v) {
  const int accumulate = v.accumulate;
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  Batches data;
  for (int i = 0; i < kSteps * accumulate; ++i) {
    data.xs.push_back(random_input(rng, {2, 2, 4, 4}, DType::Float32, 0.1, 4.0));
    data.rs.push_back(random_input(rng, {2, 4}, DType::Float32, 1e-3, 0.5));
  }
  for_each_gemm_path([&](const std::string& path) {
    const std::string what = path + " " + recipe_string(recipe) + ", " + v.str();
    SCOPED_TRACE(what);
    const Outcome want = train(recipe, data, v, false, seed);
    const Outcome got = train(recipe, data, v, true, seed);
    ASSERT_EQ(got.losses.size(), want.losses.size());
    for (size_t i = 0; i < want.losses.size(); ++i)
      EXPECT_TRUE(same_bits(want.losses[i], got.losses[i], "loss of micro-batch " + std::to_string(i)));
    for (int s = 0; s < kSteps; ++s) {
      for (size_t p = 0; p < want.params[size_t(s)].size(); ++p)
        EXPECT_TRUE(same_bits(want.params[size_t(s)][p], got.params[size_t(s)][p],
                              "step " + std::to_string(s) + " parameter " + std::to_string(p)));
      if (!want.metas.empty()) {
        for (const auto& [key, t] : want.metas[size_t(s)])
          EXPECT_TRUE(same_bits(t, got.metas[size_t(s)].at(key), "step " + std::to_string(s) + " " + key));
      }
    }
    // The comparison can tell: the weights moved during the replays, and under delayed scaling
    // so did the scales, and the history (length 4) wrapped.
    EXPECT_FALSE(same_bits(want.params[kWarmup][1], want.params[kSteps - 1][1], "the linear weight").operator bool());
    if (!want.metas.empty()) {
      EXPECT_FALSE(same_bits(want.metas[kWarmup].at("conv.scale"), want.metas[kSteps - 1].at("conv.scale"), "scale")
                       .operator bool());
      EXPECT_GT(want.metas[kSteps - 1].at("fc.amax_history").select(0, 3).abs().sum().item<float>(), 0.0f);
    }
  });
}

DelayedScaling delayed() {
  DelayedScaling r;
  r.amax_history_len = 4;
  return r;
}

TEST(CudaFp8Graph, DelayedScalingStepsReplayTheEagerLossesWeightsAndMetadata) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "the CPU standing in for the device captures no graphs";
  expect_graphed_equals_eager(delayed(), {});
  expect_graphed_equals_eager(delayed(), {.reducer = true, .checkpointed = true});
}

TEST(CudaFp8Graph, CurrentScalingStepsReplayTheEagerLossesAndWeights) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "the CPU standing in for the device captures no graphs";
  expect_graphed_equals_eager(CurrentScaling{}, {});
}

TEST(CudaFp8Graph, MxFp8StepsReplayTheEagerLossesAndWeights) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "the CPU standing in for the device captures no graphs";
  expect_graphed_equals_eager(MXFP8BlockScaling{}, {});
  expect_graphed_equals_eager(MXFP8BlockScaling{}, {.checkpointed = true});
}

// The scales update once per optimizer step, at the first micro-batch: its graph holds the update,
// the later micro-batches' graph does not.
TEST(CudaFp8Graph, DelayedScalingWithAccumulationReplaysTheEagerRun) {
  MT_REQUIRE_CUDA();
  if (selfcheck()) GTEST_SKIP() << "the CPU standing in for the device captures no graphs";
  expect_graphed_equals_eager(delayed(), {.accumulate = 2});
}

#else

TEST(CudaFp8Graph, NeedsACudaBuild) { GTEST_SKIP() << "built without CUDA"; }

#endif  // MIXTAPE_WITH_CUDA

}  // namespace
}  // namespace mixtape
