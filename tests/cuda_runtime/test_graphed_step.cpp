// tests/cuda_runtime/test_graphed_step.cpp — a whole training step as one CUDA graph
// (core/cuda/graphed_step.h): ResNet-8 (1 channel, 8x8 images, batch 2: ResNet-20's code path —
// convolutions, batch norm, shortcuts, pooling, linear — at a size the emulator runs in seconds)
// trained 11 steps, 3 eager warm-up steps then 8 replays of the captured step, equals the same
// 11 steps run eagerly bit for bit: the loss sequence, parameters, FP32 masters, optimizer state
// and update counts, batch norm's running statistics, the GradScaler's scale and tracker. Under
// AMP FP16 (sync_free GradScaler, growth_interval 2: a growth; one step's loss multiplied by an
// inf held in a static buffer: that step is skipped and the scale halved), BF16 and FP32, with
// SGD (momentum) and AdamW, FP16 parameters over FP32 masters, gradient accumulation (the
// micro-step and the optimizer step as two graphs) and dropout. The replays wait for the device
// zero times (emulator host_waits). An optimizer with stochastic rounding is refused at capture.
// Labelled gpu: runs on a GPU and on the CUDA emulator.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/cuda_api.h"
#include "mixtape/mixtape.h"
#include "models/backward_into_grads.h"
#include "common/error_of.h"
#include "require_gpu.h"

#if defined(MIXTAPE_WITH_CUDA)
#include "core/cuda/graphed_step.h"
#endif
#if defined(MIXTAPE_CUDA_EMULATOR)
#include "tests/cuda_emulator/emulator.h"
#endif

namespace mixtape {
namespace {

#if defined(MIXTAPE_WITH_CUDA)

Tensor cpu_copy(const Tensor& t) { return t.to(Device::CPU()).contiguous(); }

::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  if (a.defined() != b.defined()) return ::testing::AssertionFailure() << what << ": defined on one side only";
  if (!a.defined()) return ::testing::AssertionSuccess();
  Tensor x = cpu_copy(a), y = cpu_copy(b);
  if (x.sizes() == y.sizes() && x.dtype() == y.dtype() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << " differs";
}

enum class Opt { Sgd, AdamW };
struct Config {
  std::string name;
  std::optional<DType> autocast;  // nullopt: FP32
  Opt opt = Opt::Sgd;
  DType param_dtype = DType::Float32;  // Float16: FP16 parameters over FP32 masters
  int accumulate = 1;
  bool dropout = false;
  bool inject_inf = false;  // step kInfStep's loss times inf (FP16 with the scaler)
};
constexpr int kWarmup = 3, kReplays = 8, kSteps = kWarmup + kReplays, kInfStep = 5;

struct Outcome {
  std::vector<Tensor> losses;                 // per call, on the CPU
  std::vector<Tensor> params, masters, state, buffers;
  std::vector<int64_t> counts;
  Tensor scale, tracker;
};

Outcome train(const Config& c, bool graphed) {
  manual_seed(31);  // dropout's masks
  Generator gen(5);
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<models::ResNet>(8, 6, 1));
  if (c.dropout) model->push_back(std::make_shared<nn::Dropout>(0.25));
  model->push_back(std::make_shared<nn::Linear>(6, 3, true, &gen));
  model->to(Device::CUDA(0));
  model->to(c.param_dtype);
  model->train();
  const std::vector<Tensor> params = model->parameters();
  std::unique_ptr<optim::Optimizer> opt;
  if (c.opt == Opt::Sgd)
    opt = std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  else
    opt = std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = 1e-2});
  opt->set_capturable(true);
  const bool fp16 = c.autocast == DType::Float16;
  amp::GradScaler scaler(
      amp::GradScalerOptions{.init_scale = 256.0, .growth_interval = 2, .enabled = fp16, .sync_free = true});

  const TensorOptions on_gpu = TensorOptions().with_device(Device::CUDA(0));
  Tensor static_x = zeros({2, 1, 8, 8}, on_gpu.with_dtype(c.param_dtype));
  Tensor static_y = zeros({2}, on_gpu.with_dtype(DType::Int64));
  Tensor static_mult = ones({}, on_gpu);  // the loss's factor: 1, or inf for the injected step
  Tensor loss_out;

  auto forward_loss = [&] {
    std::optional<amp::AutocastGuard> ac;
    if (c.autocast) ac.emplace(DeviceType::CUDA, *c.autocast);
    return cross_entropy(model->forward(static_x), static_y).to(DType::Float32) * static_mult;
  };
  auto whole_step = [&] {
    opt->zero_grad();
    Tensor loss = forward_loss();
    scaler.scale(loss).backward();
    scaler.step(*opt);
    scaler.update();
    loss_out = loss.detach();
  };
  auto micro_step = [&] {
    Tensor loss = forward_loss();
    nn::backward_into_grads(scaler.scale(loss / static_cast<double>(c.accumulate)), params);
    loss_out = loss.detach();
  };
  auto optimizer_step = [&] {
    scaler.step(*opt);
    scaler.update();
    opt->zero_grad(false);  // in place: the captured micro-step adds into these buffers
  };
  std::unique_ptr<cuda::GraphedStep> g_whole, g_micro, g_opt;
  if (graphed) {
    g_whole = std::make_unique<cuda::GraphedStep>(whole_step, kWarmup);
    g_micro = std::make_unique<cuda::GraphedStep>(micro_step, kWarmup);
    g_opt = std::make_unique<cuda::GraphedStep>(optimizer_step, kWarmup);
  }

  Generator data(17);
  Outcome out;
  for (int s = 0; s < kSteps; ++s) {
    for (int m = 0; m < c.accumulate; ++m) {
      static_x.copy_(randn({2, 1, 8, 8}, {}, &data).to(c.param_dtype));
      static_y.copy_(tensor_from(std::vector<int64_t>{s % 3, (s + m + 1) % 3}, {2}, TensorOptions(DType::Int64)));
      const double mult = c.inject_inf && s == kInfStep && m == 0 ? std::numeric_limits<double>::infinity() : 1.0;
      static_mult.fill_(mult);
#if defined(MIXTAPE_CUDA_EMULATOR)
      const uint64_t waits = cuda_emulator::host_waits();
#endif
      if (c.accumulate == 1) {
        graphed ? (*g_whole)() : whole_step();
      } else {
        graphed ? (*g_micro)() : micro_step();
        if (m + 1 == c.accumulate) graphed ? (*g_opt)() : optimizer_step();
      }
#if defined(MIXTAPE_CUDA_EMULATOR)
      if (graphed && s >= kWarmup && cuda_emulator::streams_deferred())
        EXPECT_EQ(cuda_emulator::host_waits(), waits) << "a replayed step waited for the device";
#endif
      out.losses.push_back(cpu_copy(loss_out));
    }
  }
  if (graphed) {
    const bool captured = c.accumulate == 1 ? g_whole->captured() : g_micro->captured() && g_opt->captured();
    EXPECT_TRUE(captured) << "the graphed run must have replayed a captured step";
  }
  for (const Tensor& p : params) {
    out.params.push_back(cpu_copy(p));
    out.masters.push_back(cpu_copy(opt->master(p)));
    out.counts.push_back(opt->step_count(p));
    for (const char* name : {"momentum_buffer", "exp_avg", "exp_avg_sq"}) {
      const Tensor st = opt->state(p, name);
      if (st.defined()) out.state.push_back(cpu_copy(st));
    }
  }
  for (const auto& [name, b] : model->named_buffers()) out.buffers.push_back(cpu_copy(b));
  if (fp16) {
    out.scale = cpu_copy(scaler.scale_tensor());
    out.tracker = cpu_copy(scaler.growth_tracker_tensor());
  }
  return out;
}

// `graphed`: where to keep the graphed run's outcome (optional).
void expect_graphed_equals_eager(const Config& c, Outcome* graphed = nullptr) {
  SCOPED_TRACE(c.name);
  const Outcome want = train(c, false);
  const Outcome got = train(c, true);
  if (graphed) *graphed = got;
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i)
    EXPECT_TRUE(same_bits(got.losses[i], want.losses[i], "loss " + std::to_string(i)));
  for (size_t i = 0; i < want.params.size(); ++i) {
    EXPECT_TRUE(same_bits(got.params[i], want.params[i], "parameter " + std::to_string(i)));
    EXPECT_TRUE(same_bits(got.masters[i], want.masters[i], "master " + std::to_string(i)));
  }
  ASSERT_EQ(got.state.size(), want.state.size());
  ASSERT_FALSE(want.state.empty() && c.opt == Opt::AdamW);
  for (size_t i = 0; i < want.state.size(); ++i)
    EXPECT_TRUE(same_bits(got.state[i], want.state[i], "state " + std::to_string(i)));
  EXPECT_EQ(got.counts, want.counts);
  for (size_t i = 0; i < want.buffers.size(); ++i)
    EXPECT_TRUE(same_bits(got.buffers[i], want.buffers[i], "buffer " + std::to_string(i)));
  EXPECT_TRUE(same_bits(got.scale, want.scale, "scale"));
  EXPECT_TRUE(same_bits(got.tracker, want.tracker, "growth tracker"));
  // The run trained: the parameters moved from step to step (losses differ).
  EXPECT_FALSE(same_bits(want.losses[kWarmup], want.losses[kSteps - 1], "loss"));
}

TEST(GraphedStep, Fp16WithAnInfStepAndAGrowthEqualsTheEagerRun) {
  REQUIRE_GPU();
  for (Opt opt : {Opt::Sgd, Opt::AdamW}) {
    const Config c{.name = opt == Opt::Sgd ? "fp16 sgd" : "fp16 adamw", .autocast = DType::Float16, .opt = opt,
                   .inject_inf = true};
    Outcome o;
    expect_graphed_equals_eager(c, &o);
    // 11 updates, one skipped: counts 10; the scale: 256, grown at updates 2 and 4 (to 1024),
    // halved at update 6 (the inf), grown at 8 and 10 -> 2048.
    EXPECT_EQ(o.counts.front(), kSteps - 1);
    EXPECT_EQ(o.scale.item<float>(), 2048.0f);
  }
}

TEST(GraphedStep, Bf16AndFp32EqualTheEagerRun) {
  REQUIRE_GPU();
  expect_graphed_equals_eager({.name = "bf16 sgd", .autocast = DType::BFloat16});
  expect_graphed_equals_eager({.name = "fp32 adamw", .opt = Opt::AdamW});
}

TEST(GraphedStep, Fp16ParametersOverFp32MastersEqualTheEagerRun) {
  REQUIRE_GPU();
  expect_graphed_equals_eager({.name = "fp16 params, adamw", .autocast = DType::Float16, .opt = Opt::AdamW,
                               .param_dtype = DType::Float16, .inject_inf = true});
}

TEST(GraphedStep, AccumulationAsTwoGraphsEqualsTheEagerRun) {
  REQUIRE_GPU();
  expect_graphed_equals_eager(
      {.name = "fp16 sgd, accumulate 2", .autocast = DType::Float16, .accumulate = 2, .inject_inf = true});
}

TEST(GraphedStep, DropoutDrawsTheEagerMasks) {
  REQUIRE_GPU();
  expect_graphed_equals_eager({.name = "fp16 sgd, dropout", .autocast = DType::Float16, .dropout = true});
}

TEST(GraphedStep, MisuseIsNamed) {
  REQUIRE_GPU();
  try {
    cuda::GraphedStep bad([] {}, 0);
    ADD_FAILURE() << "warmup_steps 0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda::GraphedStep: warmup_steps must be >= 1"), std::string::npos)
        << e.what();
  }
  // A step that reads on the host cannot be captured: the error names the op, and nothing is kept.
  Tensor t = ones({2}, TensorOptions().with_device(Device::CUDA(0)));
  cuda::GraphedStep reads([&] { (void)t.sum().item<float>(); }, 1);
  reads();  // warm-up: eager, allowed
  try {
    reads();
    ADD_FAILURE() << "a host read was captured";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("during CUDA graph capture"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(reads.captured());
  EXPECT_FALSE(cuda::is_capturing());
}

// Stochastic rounding's seed and offset are kernel arguments taken on the host: a captured step
// would repeat the same rounding at every replay. Refused at capture, naming the optimizer's
// step and the setting; the same step without it captures.
TEST(GraphedStep, StochasticRoundingIsRefusedDuringCapture) {
  REQUIRE_GPU();
  for (bool stochastic : {false, true}) {
    SCOPED_TRACE(stochastic ? "stochastic rounding" : "round to nearest");
    auto lin = std::make_shared<nn::Linear>(4, 2);
    lin->to(Device::CUDA(0));
    lin->to(DType::Float16);  // FP16 parameters over FP32 masters: the write-back rounds
    optim::SGD opt(lin->parameters(), {.lr = 0.1});
    opt.set_capturable(true);
    opt.set_stochastic_rounding(stochastic);
    const Tensor x = ones({3, 4}, TensorOptions(DType::Float16).with_device(Device::CUDA(0)));
    cuda::GraphedStep step(
        [&] {
          opt.zero_grad();
          lin->forward(x).to(DType::Float32).sum().backward();
          opt.step();
        },
        1);
    step();  // warm-up: eager, allowed either way
    if (!stochastic) {
      step();
      EXPECT_TRUE(step.captured());
      continue;
    }
    try {
      step();
      ADD_FAILURE() << "a step with stochastic rounding was captured";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("SGD.step: rounds the 16-bit write-back stochastically (set_stochastic_rounding(true))"),
                std::string::npos) << what;
      EXPECT_NE(what.find("during CUDA graph capture"), std::string::npos) << what;
    }
    EXPECT_FALSE(step.captured());
    EXPECT_FALSE(cuda::is_capturing());
  }
}

#else

// The CPU-only build has none of this suite's cases: this one proves CUDA is refused there, with
// the reason, and reports the suite as skipped.
TEST(GraphedStep, NeedsACudaBuild) {
  EXPECT_FALSE(cuda::is_available());
  EXPECT_EQ(cuda::unavailable_reason(), "built without CUDA");
  const std::string refused = testing::error_of([] { cuda::check_available("GraphedStep"); });
  EXPECT_NE(refused.find("CUDA is not available: built without CUDA"), std::string::npos) << refused;
  GTEST_SKIP() << "built without CUDA";
}

#endif  // MIXTAPE_WITH_CUDA

}  // namespace
}  // namespace mixtape
