// tests/amp/test_tensor_stats.cpp — amp::tensor_stat's fates at each format's exact boundaries
// (the largest finite, the round-to-nearest-even tie above it, half the smallest subnormal), its
// amax / smallest nonzero / binades, and amp::TensorStatsLogger on a small model.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <set>

#include "mixtape/mixtape.h"
#include "models/zoo/mlp.h"

namespace mixtape::testing {
namespace {

using amp::StatFormat;
using amp::TensorStat;

float up(float x) { return std::nextafter(x, INFINITY); }
float down(float x) { return std::nextafter(x, 0.0f); }

Tensor f32(const std::vector<float>& v) {
  return tensor_from<float>(v, {static_cast<int64_t>(v.size())}, TensorOptions(DType::Float32));
}

struct Boundary {
  StatFormat format;
  float max;          // largest finite: kept
  float overflow_at;  // the smallest magnitude that rounds past max (a tie, or just above one)
  float half_denorm;  // half the smallest subnormal: the tie rounds to the even 0
};

// Hand-derived: FP16 65504 = 1.1111111111b x 2^15; the tie 65520 goes to the even 65536 (inf).
// BF16 max 0x7F7F0000; the tie 0x7F7F8000 goes to the even 0x7F80 (inf). e4m3fn: 464 is the tie
// between 448 (mantissa 110, even) and 480 (the NaN pattern), so 464 stays 448 and anything above
// overflows. e5m2: 61440 is the tie between 57344 (mantissa 11, odd) and inf: it overflows.
const Boundary kBoundaries[] = {
    {StatFormat::Float16, 65504.0f, 65520.0f, std::ldexp(1.0f, -25)},
    {StatFormat::BFloat16, std::bit_cast<float>(0x7F7F0000u), std::bit_cast<float>(0x7F7F8000u), std::ldexp(1.0f, -134)},
    {StatFormat::E4M3, 448.0f, up(464.0f), std::ldexp(1.0f, -10)},
    {StatFormat::E5M2, 57344.0f, 61440.0f, std::ldexp(1.0f, -17)},
};

TEST(TensorStats, OverflowAndFlushAreDecidedExactlyAtEachFormatsBoundaries) {
  for (const Boundary& b : kBoundaries) {
    const int fi = static_cast<int>(b.format);
    SCOPED_TRACE(amp::stat_format_name(b.format));
    // kept: max, just below the overflow point, just above half the smallest subnormal, 0 apart
    // overflow: the overflow point, its negative, and above it; flushed: the tie and its negative
    const Tensor t = f32({b.max, down(b.overflow_at), up(b.half_denorm), b.overflow_at, -b.overflow_at,
                          up(b.overflow_at), b.half_denorm, -b.half_denorm, 0.0f});
    const TensorStat s = amp::tensor_stat(t);
    EXPECT_EQ(s.numel, 9);
    EXPECT_EQ(s.zeros, 1);
    EXPECT_EQ(s.overflow[fi], 3);
    EXPECT_EQ(s.flushed[fi], 2);
    EXPECT_DOUBLE_EQ(s.overflow_frac(b.format), 3.0 / 9.0);
    EXPECT_DOUBLE_EQ(s.flushed_frac(b.format), 2.0 / 9.0);
    EXPECT_EQ(amp::stat_format_max(b.format), b.max);
    EXPECT_EQ(amp::stat_format_denorm_min(b.format), 2.0 * b.half_denorm);
  }
}

TEST(TensorStats, EachValueIsJudgedByEveryFormat) {
  // 1000: overflows e4m3 only; 1e5: fp16 and e5m2 too; 2^-12: flushes in e4m3 only (e5m2, fp16,
  // bf16 keep it); 2^-20: e5m2 flushes it as well, fp16 keeps it as a subnormal.
  const TensorStat s = amp::tensor_stat(f32({1000.0f, 1e5f, std::ldexp(1.0f, -12), std::ldexp(1.0f, -20)}));
  EXPECT_EQ(s.overflow[0], 1);  // fp16
  EXPECT_EQ(s.overflow[1], 0);  // bf16
  EXPECT_EQ(s.overflow[2], 2);  // e4m3
  EXPECT_EQ(s.overflow[3], 1);  // e5m2
  EXPECT_EQ(s.flushed[0], 0);
  EXPECT_EQ(s.flushed[1], 0);
  EXPECT_EQ(s.flushed[2], 2);
  EXPECT_EQ(s.flushed[3], 1);
}

TEST(TensorStats, TheScaleMovesValuesAcrossTheBoundaries) {
  const Tensor t = f32({1.0f, std::ldexp(1.0f, -40)});
  const TensorStat one = amp::tensor_stat(t);
  EXPECT_EQ(one.overflow[0], 0);
  EXPECT_EQ(one.flushed[0], 1);  // 2^-40 < 2^-25
  const TensorStat scaled = amp::tensor_stat(t, 65536.0);
  EXPECT_EQ(scaled.overflow[0], 1);  // 65536 > 65504
  EXPECT_EQ(scaled.flushed[0], 0);   // 2^-24: the smallest subnormal, kept
  EXPECT_EQ(scaled.scale, 65536.0);
  EXPECT_EQ(scaled.amax, 1.0);  // amax and the smallest nonzero stay in the tensor's own units
}

TEST(TensorStats, AmaxSmallestNonzeroAndBinades) {
  const TensorStat s = amp::tensor_stat(f32({std::ldexp(1.0f, -10), 4.0f, -8.0f, 0.0f}));
  EXPECT_EQ(s.amax, 8.0);
  EXPECT_EQ(s.min_nonzero, std::ldexp(1.0, -10));
  EXPECT_DOUBLE_EQ(s.binades(), 13.0);
  const TensorStat z = amp::tensor_stat(f32({0.0f, 0.0f}));
  EXPECT_EQ(z.amax, 0.0);
  EXPECT_EQ(z.binades(), 0.0);
}

TEST(TensorStats, NonFiniteValuesAreCountedApartNeverAsOverflow) {
  const TensorStat s = amp::tensor_stat(f32({INFINITY, -INFINITY, NAN, 2.0f}));
  EXPECT_EQ(s.nonfinite, 3);
  EXPECT_EQ(s.amax, 2.0);
  for (int i = 0; i < amp::kNumStatFormats; ++i) EXPECT_EQ(s.overflow[i], 0);
}

TEST(TensorStats, SixteenBitAndFp8TensorsAreReadExactly) {
  // 65504 in f16 is FP16's max: kept in fp16, overflows e4m3 and e5m2 (> 61440).
  const TensorStat s = amp::tensor_stat(f32({65504.0f}).to(DType::Float16));
  EXPECT_EQ(s.amax, 65504.0);
  EXPECT_EQ(s.overflow[0], 0);
  EXPECT_EQ(s.overflow[2], 1);
  EXPECT_EQ(s.overflow[3], 1);
  // An FP8 tensor too: 448 is e4m3fn's max, kept by every format.
  const TensorStat f8 = amp::tensor_stat(f32({448.0f}).to(DType::Float8_e4m3fn));
  EXPECT_EQ(f8.amax, 448.0);
  for (int i = 0; i < amp::kNumStatFormats; ++i) EXPECT_EQ(f8.overflow[i], 0);
}

TEST(TensorStats, BadInputIsRefusedWithTheValue) {
  EXPECT_THROW(amp::tensor_stat(f32({1.0f}), 0.0), Error);
  EXPECT_THROW(amp::tensor_stat(f32({1.0f}), NAN), Error);
  EXPECT_THROW(amp::TensorStatsLogger(0), Error);
  try {
    amp::tensor_stat(tensor_from<int64_t>({1}, {1}, TensorOptions(DType::Int64)));
    FAIL() << "an integer tensor was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected a floating tensor"), std::string::npos) << e.what();
  }
}

TEST(TensorStatsLogger, RecordsEveryLayersTensorsEveryNSteps) {
  manual_seed(0);
  models::MLP model(4, {8}, 2);
  amp::TensorStatsLogger stats(2);
  stats.attach(model);
  optim::SGD opt(model.parameters(), {.lr = 0.1});
  const Tensor x = randn({3, 4}), t = randn({3, 2});
  for (int step = 0; step < 3; ++step) {
    mse_loss(model(x), t).backward();
    stats.step();
    opt.step();
    opt.zero_grad();
  }
  EXPECT_EQ(stats.current_step(), 3);
  std::map<int64_t, int> per_step;
  std::set<std::string> names;
  for (const auto& r : stats.rows()) {
    ++per_step[r.step];
    names.insert(r.layer + "." + r.tensor + "/" + amp::tensor_role_name(r.role));
  }
  ASSERT_EQ(per_step.size(), 2u) << "steps 0 and 2 only";
  EXPECT_EQ(per_step.count(1), 0u);
  EXPECT_EQ(per_step[0], per_step[2]);
  // Each of the MLP's layers with parameters: its output, the output's gradient, each parameter and its .grad.
  const std::vector<std::pair<std::string, Tensor>> params = model.named_parameters();
  for (const auto& [name, p] : params) {
    const std::string layer = name.substr(0, name.rfind('.')), tensor = name.substr(name.rfind('.') + 1);
    EXPECT_TRUE(names.count(layer + "." + tensor + "/weight")) << name;
    EXPECT_TRUE(names.count(layer + "." + tensor + ".grad/gradient")) << name;
    EXPECT_TRUE(names.count(layer + ".output/activation")) << layer;
    EXPECT_TRUE(names.count(layer + ".output.grad/gradient")) << layer;
  }
  const std::string csv = stats.csv();
  EXPECT_EQ(csv.rfind("step,layer,tensor,role,dtype,numel,scale,amax,min_nonzero,binades,zeros,nonfinite,fp16_overflow,"
                      "fp16_flushed,bf16_overflow,bf16_flushed,e4m3_overflow,e4m3_flushed,e5m2_overflow,e5m2_flushed\n",
                      0),
            0u);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), static_cast<long>(stats.rows().size()) + 1);
  const std::string svg = stats.svg(StatFormat::E4M3);
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("e4m3 largest finite"), std::string::npos);
  EXPECT_NE(svg.find(".weight.grad"), std::string::npos);
  // One role: its tensors only.
  const std::string grads = stats.svg(StatFormat::E5M2, amp::TensorRole::Gradient);
  EXPECT_NE(grads.find("Statistics of gradients in e5m2"), std::string::npos);
  EXPECT_NE(grads.find(".grad"), std::string::npos);
  EXPECT_EQ(grads.find(".output<"), std::string::npos) << "no activation in the gradients' figure";

  // Detached: the hooks stay on the model but record nothing more.
  const size_t before = stats.rows().size();
  stats.detach();
  stats.step();  // step 4 would be due
  mse_loss(model(x), t).backward();
  EXPECT_EQ(stats.rows().size(), before);
}

TEST(TensorStatsLogger, ARolesScaleIsTheOneItsFatesAreEvaluatedAt) {
  amp::TensorStatsLogger stats;
  stats.set_scale(amp::TensorRole::Activation, 65536.0);
  stats.record("fc", "output", amp::TensorRole::Activation, f32({1.0f}));
  stats.record("fc", "weight", amp::TensorRole::Weight, f32({1.0f}));
  ASSERT_EQ(stats.rows().size(), 2u);
  EXPECT_EQ(stats.rows()[0].stat.overflow[0], 1);  // 65536 in fp16
  EXPECT_EQ(stats.rows()[1].stat.overflow[0], 0);
  EXPECT_THROW(stats.set_scale(amp::TensorRole::Weight, -1.0), Error);
  // A per-tensor scale (an FP8 recipe's) overrides the role's where it gives one.
  stats.set_scale_fn([](const std::string& layer, const std::string&, amp::TensorRole) -> std::optional<double> {
    if (layer == "fc2") return 1024.0;
    if (layer == "bad") return 0.0;
    return std::nullopt;
  });
  stats.record("fc2", "weight", amp::TensorRole::Weight, f32({64.0f}));  // 65536 in fp16
  stats.record("fc3", "output", amp::TensorRole::Activation, f32({1.0f}));  // the role's 65536
  ASSERT_EQ(stats.rows().size(), 4u);
  EXPECT_EQ(stats.rows()[2].stat.scale, 1024.0);
  EXPECT_EQ(stats.rows()[2].stat.overflow[0], 1);
  EXPECT_EQ(stats.rows()[3].stat.scale, 65536.0);
  EXPECT_THROW(stats.record("bad", "weight", amp::TensorRole::Weight, f32({1.0f})), Error);
}

}  // namespace
}  // namespace mixtape::testing
