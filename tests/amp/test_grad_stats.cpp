// tests/amp/test_grad_stats.cpp — the FP16 fate inspector (the inspector part of behaviour 34,
// docs/amp-behaviours.md: 1e-8 flushes at scale 1 and survives at 65536; 2.0 overflows at 65536).
#include <gtest/gtest.h>

#include "common/error_of.h"
#include "mixtape/mixtape.h"

namespace mixtape::testing {
namespace {

using amp::Fp16Class;
using amp::GradStats;

TEST(GradStats, ClassifiesEachValueAsStoringItInFp16Would) {
  using amp::classify_in_fp16;
  EXPECT_EQ(classify_in_fp16(0.0, 65536), Fp16Class::ExactZero);
  EXPECT_EQ(classify_in_fp16(1e-8, 1), Fp16Class::Flushed);        // below 2^-25: rounds to 0
  EXPECT_EQ(classify_in_fp16(1e-8, 65536), Fp16Class::Normal);     // 6.55e-4 >= 2^-14
  EXPECT_EQ(classify_in_fp16(1e-6, 1), Fp16Class::Subnormal);      // 2^-24 <= 1e-6 < 2^-14
  EXPECT_EQ(classify_in_fp16(2.0, 1), Fp16Class::Normal);
  EXPECT_EQ(classify_in_fp16(2.0, 65536), Fp16Class::Overflow);    // 131072 > 65504
  EXPECT_EQ(classify_in_fp16(65504.0, 1), Fp16Class::Normal);
  EXPECT_EQ(classify_in_fp16(65520.0, 1), Fp16Class::Overflow);    // the RNE boundary to inf
  EXPECT_EQ(classify_in_fp16(std::ldexp(1.0, -25), 1), Fp16Class::Flushed);  // the tie rounds to even (0)
  EXPECT_EQ(classify_in_fp16(std::ldexp(1.5, -25), 1), Fp16Class::Subnormal);
  EXPECT_EQ(classify_in_fp16(NAN, 1), Fp16Class::NonFiniteIn);
}

TEST(GradStats, B34_TinyGradientsFlushWithoutScalingLargeOnesOverflowWithIt) {
  GradStats stats(65536.0);
  stats.add("tiny", full({1000}, 1e-8));
  stats.add("large", full({1000}, 2.0));
  const auto& tiny = stats.get("tiny");
  EXPECT_DOUBLE_EQ(tiny.unscaled.flushed_frac(), 1.0);
  EXPECT_DOUBLE_EQ(tiny.scaled.flushed_frac(), 0.0);
  EXPECT_EQ(tiny.scaled.normal, 1000);
  const auto& large = stats.get("large");
  EXPECT_DOUBLE_EQ(large.unscaled.overflow_frac(), 0.0);
  EXPECT_DOUBLE_EQ(large.scaled.overflow_frac(), 1.0);
  // log2 histogram: 1e-8 lies in [2^-27, 2^-26), 2.0 in [2^1, 2^2)
  EXPECT_EQ(tiny.log2_histogram[static_cast<size_t>(-27 - GradStats::kLog2Min)], 1000);
  EXPECT_EQ(large.log2_histogram[static_cast<size_t>(1 - GradStats::kLog2Min)], 1000);
  EXPECT_NE(stats.table().find("100.00%"), std::string::npos) << stats.table();
  EXPECT_NE(stats.histogram_csv().find("tiny,-27,1000"), std::string::npos);
}

TEST(GradStats, ScaledGradientsAreMeasuredInTrueUnitsAndExactZerosApart) {
  GradStats stats(1024.0);
  Tensor g = tensor({0.0, 0.0, 65536.0 * 1e-8, 65536.0 * 3.0});  // as a .grad scaled by 65536
  stats.add("w", g, 65536.0);
  const auto& w = stats.get("w");
  EXPECT_EQ(w.unscaled.exact_zero, 2);
  EXPECT_EQ(w.unscaled.flushed, 1);  // 1e-8 at scale 1
  EXPECT_EQ(w.unscaled.normal, 1);   // 3.0
  EXPECT_EQ(w.scaled.subnormal, 1);  // 1e-8 * 1024 ~ 1.02e-5 < 2^-14
  EXPECT_EQ(w.scaled.normal, 1);     // 3072
  EXPECT_DOUBLE_EQ(w.unscaled.flushed_frac(), 0.5);  // of the nonzero values
}

TEST(GradStats, WatchRecordsAnActivationGradientDuringBackward) {
  Tensor x = full({4}, 1e-3).requires_grad_();
  Tensor h = x * 1.0;
  GradStats stats(65536.0);
  stats.watch("h", h);
  sum(h * 1e-6).backward();  // dL/dh = 1e-6: subnormal in fp16 without scaling
  const auto& s = stats.get("h");
  EXPECT_TRUE(s.activation);
  EXPECT_EQ(s.unscaled.subnormal, 4);
  EXPECT_EQ(s.scaled.normal, 4);
  EXPECT_NE(error_of([&] { stats.watch("c", ones({2})); }).find("does not require grad"), std::string::npos);
  EXPECT_NE(error_of([&] { stats.get("nope"); }).find("no gradient recorded under 'nope'"), std::string::npos);
}

}  // namespace
}  // namespace mixtape::testing
