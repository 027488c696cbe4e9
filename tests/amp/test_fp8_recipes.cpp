// tests/amp/test_fp8_recipes.cpp — the FP8 scaling recipes (docs/FP8.md, "Recipes"): the scale
// formula against hand-derived values, the delayed recipe's amax history rolling step by step,
// the DDP amax hook, FP8 metadata checkpoints, MX block scales (round-up against the spec's
// rounding), bit-exact quantize/dequantize, and the refusals.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>

#include "common/error_of.h"
#include "mixtape/mixtape.h"

namespace mixtape::testing {
namespace {

using namespace mixtape::amp;

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// ---- the recipes' refusals ----

TEST(Fp8Recipe, BadNumbersAreRefusedWithTheNumbers) {
  DelayedScaling d;
  d.amax_history_len = 0;
  std::string e = error_of([&] { check_recipe(d, "test"); });
  EXPECT_TRUE(contains(e, "amax_history_len must be >= 1, got 0")) << e;
  d = {};
  d.margin = INFINITY;
  e = error_of([&] { Fp8Metas m(d, {}); });
  EXPECT_TRUE(contains(e, "Fp8Metas: DelayedScaling.margin must be finite, got inf")) << e;
  d.margin = NAN;
  EXPECT_TRUE(contains(error_of([&] { check_recipe(d, "test"); }), "margin must be finite, got nan"));
  MXFP8BlockScaling mx;
  mx.block_size = 0;
  e = error_of([&] { Fp8Autocast r(mx); });
  EXPECT_TRUE(contains(e, "Fp8Autocast: MXFP8BlockScaling.block_size must be >= 1, got 0")) << e;
  // A reduction dim the block size does not divide: refused without pad_tail, naming both numbers.
  mx = {};
  mx.pad_tail = false;
  Tensor x = zeros({3, 40});
  e = error_of([&] { mx_quantize(x, 1, DType::Float8_e4m3fn, mx, "linear"); });
  EXPECT_TRUE(contains(e, "linear: MXFP8 block size 32 does not divide the reduction dim (40 values along dim 1"))
      << e;
  EXPECT_TRUE(contains(e, "a block of 8 values")) << e;
  mx.pad_tail = true;
  EXPECT_EQ(error_of([&] { mx_quantize(x, 1, DType::Float8_e4m3fn, mx, "linear"); }), "(no error)");
}

TEST(Fp8Recipe, DefaultsAreTransformerEnginesAndFormatsPickDtypes) {
  const DelayedScaling d;
  EXPECT_EQ(d.margin, 0.0f);
  EXPECT_EQ(d.amax_history_len, 1024);
  EXPECT_EQ(d.amax_compute_algo, AmaxComputeAlgo::Max);
  EXPECT_EQ(d.fp8_format, Fp8Format::Hybrid);
  EXPECT_EQ(CurrentScaling{}.fp8_format, Fp8Format::Hybrid);
  EXPECT_EQ(MXFP8BlockScaling{}.fp8_format, Fp8Format::E4M3);
  EXPECT_EQ(MXFP8BlockScaling{}.block_size, 32);
  EXPECT_EQ(fp8_dtype_for(Fp8Format::Hybrid, Fp8Role::Input), DType::Float8_e4m3fn);
  EXPECT_EQ(fp8_dtype_for(Fp8Format::Hybrid, Fp8Role::Weight), DType::Float8_e4m3fn);
  EXPECT_EQ(fp8_dtype_for(Fp8Format::Hybrid, Fp8Role::GradOutput), DType::Float8_e5m2);
  EXPECT_EQ(fp8_dtype_for(Fp8Format::E4M3, Fp8Role::GradOutput), DType::Float8_e4m3fn);
  EXPECT_EQ(fp8_max(DType::Float8_e4m3fn), 448.0f);
  EXPECT_EQ(fp8_max(DType::Float8_e5m2), 57344.0f);
}

// ---- the per-tensor scale ----

TEST(Fp8Scaling, ScaleIsFp8MaxTimesTwoToTheMinusMarginOverAmax) {
  // Hand-derived: 448 / 3.5 = 128, 448 * 2^-2 / 7 = 16, 57344 / 7 = 8192.
  EXPECT_EQ(scale_from_amax(3.5f, 448.0f, 0.0f, false, 1.0f), 128.0f);
  EXPECT_EQ(scale_from_amax(7.0f, 448.0f, 2.0f, false, 1.0f), 16.0f);
  EXPECT_EQ(scale_from_amax(7.0f, 57344.0f, 0.0f, false, 1.0f), 8192.0f);
  // Not a power of two (TE's delayed and current recipes): 448 / 3 rounded once to f32.
  EXPECT_EQ(bits_of(scale_from_amax(3.0f, 448.0f, 0.0f, false, 1.0f)), bits_of(static_cast<float>(448.0 / 3.0)));
  // power_of_2: rounded down, 149.33 -> 128; 448 / 1000 = 0.448 -> 0.25.
  EXPECT_EQ(scale_from_amax(3.0f, 448.0f, 0.0f, true, 1.0f), 128.0f);
  EXPECT_EQ(scale_from_amax(1000.0f, 448.0f, 0.0f, true, 1.0f), 0.25f);
  // A margin of -1 doubles the target: 896 / 7 = 128.
  EXPECT_EQ(scale_from_amax(7.0f, 448.0f, -1.0f, false, 1.0f), 128.0f);
  // Nothing to scale by: the fallback (the previous scale, or 1).
  EXPECT_EQ(scale_from_amax(0.0f, 448.0f, 0.0f, false, 0.75f), 0.75f);
  EXPECT_EQ(scale_from_amax(INFINITY, 448.0f, 0.0f, false, 0.75f), 0.75f);
  EXPECT_EQ(scale_from_amax(NAN, 448.0f, 0.0f, false, 0.75f), 0.75f);
  // Beyond f32: FLT_MAX (TE's value_for_inf), and never below 2^-126.
  EXPECT_EQ(scale_from_amax(1e-45f, 448.0f, 0.0f, false, 1.0f), FLT_MAX);
  EXPECT_EQ(scale_from_amax(FLT_MAX, 448.0f, 200.0f, false, 1.0f), FLT_MIN);
}

TEST(Fp8Scaling, AmaxIgnoresNanKeepsInf) {
  EXPECT_EQ(amax_of(tensor({1.0, -3.0, 2.0})), 3.0f);
  EXPECT_EQ(amax_of(tensor({1.0, NAN, -2.0})), 2.0f);
  EXPECT_EQ(amax_of(tensor({1.0, -INFINITY})), INFINITY);
  EXPECT_EQ(amax_of(zeros({0})), 0.0f);
  EXPECT_EQ(amax_of(tensor({-5.0, 4.0}, DType::BFloat16)), 5.0f);
}

TEST(Fp8Scaling, PerTensorQuantizeAndDequantizeAreBitExact) {
  Generator g(3);
  Tensor x = randn({7, 9}, {}, &g) * 40.0;
  for (float scale : {8.0f, 3.0f}) {
    for (DType dt : {DType::Float8_e4m3fn, DType::Float8_e5m2}) {
      Fp8Operand q = quantize_per_tensor(x, dt, scale);
      EXPECT_EQ(q.scale_inv, 1.0f / scale);
      const auto xs = x.to_vector<float>();
      const uint8_t* d = static_cast<const uint8_t*>(q.data.data_ptr());
      const auto back = dequantize(q).to_vector<float>();
      for (size_t i = 0; i < xs.size(); ++i) {
        const float prod = xs[i] * scale;  // rounded to f32 first, then to FP8 (saturating)
        const uint8_t want = dt == DType::Float8_e4m3fn ? float_to_e4m3fn_bits(prod, Fp8Saturation::Finite)
                                                        : float_to_e5m2_bits(prod, Fp8Saturation::Finite);
        ASSERT_EQ(d[i], want) << i;
        const float dec = dt == DType::Float8_e4m3fn ? e4m3fn_bits_to_float(want) : e5m2_bits_to_float(want);
        ASSERT_EQ(bits_of(back[i]), bits_of(dec * (1.0f / scale))) << i;
      }
    }
  }
}

TEST(Fp8Scaling, TableCastIsTheScalarSaturatingCastBitForBit) {
  // Every top-16-bit pattern (signs, zeros, subnormals, normals, the overflow edges 464 and 61440,
  // inf, NaN) with low bits that are zero, the smallest, a half, and all ones, plus random ones.
  Generator g(11);
  const auto rnd = randn({64}, {}, &g).to_vector<float>();
  for (DType dt : {DType::Float8_e4m3fn, DType::Float8_e5m2}) {
    const Fp8CastTable& cast = Fp8CastTable::of(dt);
    for (uint32_t hi = 0; hi < (1u << 16); ++hi)
      for (uint32_t low : {0u, 1u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu, bits_of(rnd[hi % 64]) & 0xFFFFu}) {
        const uint32_t b = hi << 16 | low;
        float v;
        std::memcpy(&v, &b, sizeof v);
        const uint8_t want = dt == DType::Float8_e4m3fn ? float_to_e4m3fn_bits(v, Fp8Saturation::Finite)
                                                        : float_to_e5m2_bits(v, Fp8Saturation::Finite);
        ASSERT_EQ(cast(v), want) << std::hex << b << " " << dtype_name(dt);
      }
  }
}

// ---- delayed scaling: the metadata ----

std::vector<std::pair<std::string, Tensor>> two_layers(int64_t seed = 1) {
  Generator g(seed);
  return {{"fc1.weight", randn({4, 3}, {}, &g).requires_grad_()}, {"fc1.bias", zeros({4}).requires_grad_()},
          {"fc2.weight", randn({2, 4}, {}, &g).requires_grad_()}, {"fc2.bias", zeros({2}).requires_grad_()}};
}

std::vector<float> column(const Fp8Meta& m, Fp8Role r) {
  std::vector<float> out;
  const auto h = m.amax_history.to_vector<float>();
  for (size_t i = static_cast<size_t>(r); i < h.size(); i += kFp8Roles) out.push_back(h[i]);
  return out;
}

TEST(Fp8Meta, OneMetaPerLinearWeightStartingAtScaleOne) {
  auto params = two_layers();
  Fp8Metas metas(DelayedScaling{}, params);
  ASSERT_EQ(metas.size(), 2u);
  EXPECT_EQ(metas.metas()[0].name, "fc1");
  EXPECT_EQ(metas.metas()[1].name, "fc2");
  EXPECT_EQ(metas.find(params[0].second), &metas.metas()[0]);
  EXPECT_EQ(metas.find(params[1].second), nullptr);  // a bias
  EXPECT_EQ(metas.at("fc2").amax_history.sizes(), (IntList{1024, 3}));
  EXPECT_EQ(metas.at("fc2").scale.to_vector<float>(), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(metas.at("fc2").amax_history.device(), params[2].second.device());
  EXPECT_TRUE(contains(error_of([&] { metas.at("fc3"); }), "no FP8 metadata named 'fc3' (have 'fc1', 'fc2')"));
}

TEST(Fp8Meta, HistoryRollsAndTheScaleComesFromPastSteps) {
  auto params = two_layers();
  DelayedScaling recipe;
  recipe.amax_history_len = 4;
  Fp8Metas metas(recipe, params);
  Fp8Meta* m = metas.find(params[0].second);
  // Row 0 collects this step's amax; update_scales rolls it to the end and drops the oldest row.
  const float amaxes[] = {1, 5, 2, 3, 0.5f, 0.25f};
  const std::vector<std::vector<float>> rows_after = {
      {0, 0, 0, 1}, {0, 0, 1, 5}, {0, 1, 5, 2}, {0, 5, 2, 3}, {0, 2, 3, 0.5f}, {0, 3, 0.5f, 0.25f}};
  // amax = max over the 4 rows at update time: 5 stays in the window for 4 steps, then leaves.
  const float window_max[] = {1, 5, 5, 5, 5, 3};
  for (int step = 0; step < 6; ++step) {
    m->record_amax(Fp8Role::Input, amaxes[step]);
    EXPECT_EQ(column(*m, Fp8Role::Input)[0], amaxes[step]);
    metas.update_scales();
    EXPECT_EQ(column(*m, Fp8Role::Input), rows_after[step]) << "step " << step;
    EXPECT_EQ(m->scale_of(Fp8Role::Input), 448.0f / window_max[step]) << "step " << step;
    EXPECT_EQ(m->scale_inv_of(Fp8Role::Input), 1.0f / (448.0f / window_max[step]));
    // No amax recorded for the weight: its history stays 0 and its scale keeps its value, 1.
    EXPECT_EQ(m->scale_of(Fp8Role::Weight), 1.0f);
  }
  // HYBRID: the output gradient's scale targets E5M2's 57344.
  m->record_amax(Fp8Role::GradOutput, 7.0f);
  metas.update_scales();
  EXPECT_EQ(m->scale_of(Fp8Role::GradOutput), 8192.0f);
}

TEST(Fp8Meta, MostRecentUsesOnlyThisStepsAmaxAndRecordingKeepsTheMax) {
  auto params = two_layers();
  DelayedScaling recipe;
  recipe.amax_history_len = 8;
  recipe.amax_compute_algo = AmaxComputeAlgo::MostRecent;
  recipe.fp8_format = Fp8Format::E4M3;
  Fp8Metas metas(recipe, params);
  Fp8Meta* m = metas.find(params[2].second);
  m->record_amax(Fp8Role::GradOutput, 14.0f);
  m->record_amax(Fp8Role::GradOutput, 7.0f);  // two casts in one step: the max is kept
  m->record_amax(Fp8Role::GradOutput, NAN);   // ignored
  metas.update_scales();
  EXPECT_EQ(m->scale_of(Fp8Role::GradOutput), 32.0f);  // E4M3 everywhere: 448 / 14
  m->record_amax(Fp8Role::GradOutput, 3.5f);
  metas.update_scales();
  EXPECT_EQ(m->scale_of(Fp8Role::GradOutput), 128.0f);  // 14 is still in the history; most_recent ignores it
  metas.update_scales();                                 // nothing recorded: amax 0 keeps the scale
  EXPECT_EQ(m->scale_of(Fp8Role::GradOutput), 128.0f);
  // A history of length 1 (rolling it just clears row 0).
  recipe.amax_history_len = 1;
  Fp8Metas one(recipe, params);
  one.find(params[0].second)->record_amax(Fp8Role::Input, 448.0f);
  one.update_scales();
  EXPECT_EQ(one.find(params[0].second)->scale_of(Fp8Role::Input), 1.0f);
  EXPECT_EQ(column(*one.find(params[0].second), Fp8Role::Input), std::vector<float>{0});
}

TEST(Fp8Meta, DdpAmaxReducerMaxesEveryRankBeforeTheUpdate) {
  // Two "ranks" record different amaxes; a fake reducer does what an all-reduce(max) would do.
  DelayedScaling recipe;
  recipe.amax_history_len = 3;
  auto p0 = two_layers(), p1 = two_layers();
  Fp8Metas r0(recipe, p0), r1(recipe, p1);
  r0.find(p0[0].second)->record_amax(Fp8Role::Input, 2.0f);
  r1.find(p1[0].second)->record_amax(Fp8Role::Input, 7.0f);
  r0.find(p0[2].second)->record_amax(Fp8Role::GradOutput, 56.0f);
  r1.find(p1[2].second)->record_amax(Fp8Role::Weight, 1.75f);
  const std::vector<float> a0 = {2, 0, 0, 0, 0, 56}, a1 = {7, 0, 0, 0, 1.75f, 0};
  int calls = 0;
  auto fake_allreduce_max = [&](const std::vector<float>& other) {
    return [&, other](Tensor& amaxes) {
      ++calls;
      ASSERT_EQ(amaxes.sizes(), IntList{6});  // row 0 of both metas, three roles each
      float* p = amaxes.data_ptr<float>();
      for (int i = 0; i < 6; ++i) p[i] = std::max(p[i], other[i]);
    };
  };
  r0.update_scales(fake_allreduce_max(a1));
  r1.update_scales(fake_allreduce_max(a0));
  EXPECT_EQ(calls, 2);
  for (const char* name : {"fc1", "fc2"}) {
    EXPECT_EQ(r0.at(name).scale.to_vector<float>(), r1.at(name).scale.to_vector<float>()) << name;
    EXPECT_EQ(r0.at(name).amax_history.to_vector<float>(), r1.at(name).amax_history.to_vector<float>()) << name;
  }
  EXPECT_EQ(r0.at("fc1").scale_of(Fp8Role::Input), 64.0f);        // 448 / max(2, 7)
  EXPECT_EQ(r0.at("fc2").scale_of(Fp8Role::Weight), 256.0f);      // 448 / 1.75
  EXPECT_EQ(r1.at("fc2").scale_of(Fp8Role::GradOutput), 1024.0f);  // 57344 / 56
  // A reducer that changes the tensor's shape is refused with the numbers.
  const std::string e = error_of([&] { r0.update_scales([](Tensor& t) { t = zeros({5}); }); });
  EXPECT_TRUE(contains(e, "the amax reducer must leave an f32[6] tensor, got f32[5]")) << e;
}

TEST(Fp8Meta, StateDictResumesBitForBitAndRefusesAMismatchNamingTheTensor) {
  DelayedScaling recipe;
  recipe.amax_history_len = 5;
  auto params = two_layers();
  Fp8Metas a(recipe, params);
  const float odd[] = {0.1f, 3.3f, 1e-7f, 1234.5f, 0.7f};
  for (int s = 0; s < 4; ++s) {
    a.find(params[0].second)->record_amax(Fp8Role::Input, odd[s]);
    a.find(params[2].second)->record_amax(Fp8Role::GradOutput, odd[4 - s]);
    a.update_scales();
  }
  a.find(params[0].second)->record_amax(Fp8Role::Weight, 0.3f);  // a step in flight: row 0 is saved too
  const StateDict sd = a.state_dict();
  EXPECT_EQ(sd.size(), 6u);
  ASSERT_TRUE(sd.count("fc2.amax_history") && sd.count("fc1.scale") && sd.count("fc1.scale_inv"));
  auto params_b = two_layers(9);
  Fp8Metas b(recipe, params_b);
  b.load_state_dict(sd);
  auto same_bits = [](const Tensor& x, const Tensor& y) {
    return x.sizes() == y.sizes() && std::memcmp(x.contiguous().data_ptr(), y.contiguous().data_ptr(), x.nbytes()) == 0;
  };
  for (const char* n : {"fc1", "fc2"}) {
    EXPECT_TRUE(same_bits(a.at(n).amax_history, b.at(n).amax_history)) << n;
    EXPECT_TRUE(same_bits(a.at(n).scale, b.at(n).scale)) << n;
    EXPECT_TRUE(same_bits(a.at(n).scale_inv, b.at(n).scale_inv)) << n;
  }
  // ...and both continue identically.
  a.update_scales();
  b.update_scales();
  EXPECT_TRUE(same_bits(a.at("fc1").scale, b.at("fc1").scale));
  EXPECT_TRUE(same_bits(a.at("fc1").amax_history, b.at("fc1").amax_history));
  // Another history length: refused, naming the tensors and both shapes.
  recipe.amax_history_len = 16;
  Fp8Metas c(recipe, params_b);
  std::string e = error_of([&] { c.load_state_dict(sd); });
  EXPECT_TRUE(contains(e, "fc1.amax_history: expected f32[16, 3], the checkpoint holds f32[5, 3]")) << e;
  EXPECT_TRUE(contains(e, "fc2.amax_history")) << e;
  // Another model (one layer): fc2's tensors are unexpected; a missing key is named too.
  recipe.amax_history_len = 5;
  std::vector<std::pair<std::string, Tensor>> one = {params_b[0]};
  Fp8Metas d(recipe, one);
  e = error_of([&] { d.load_state_dict(sd); });
  EXPECT_TRUE(contains(e, "unexpected fc2.scale (f32[3])")) << e;
  StateDict partial = sd;
  partial.erase("fc1.scale_inv");
  e = error_of([&] { b.load_state_dict(partial); });
  EXPECT_TRUE(contains(e, "missing fc1.scale_inv")) << e;
  StateDict bad = sd;
  bad["fc2.scale"] = tensor({1.0, 0.0, 2.0});
  e = error_of([&] { b.load_state_dict(bad); });
  EXPECT_TRUE(contains(e, "fc2.scale: every scale must be finite and > 0, the checkpoint holds 0")) << e;
  // Nothing was written by the refused loads.
  EXPECT_TRUE(same_bits(a.at("fc2").scale, b.at("fc2").scale));
}

// ---- MXFP8 ----

TEST(MxBlock, ScaleRoundsUpOrAsTheSpecSays) {
  constexpr auto Up = MxScaleRounding::Up;
  constexpr auto Spec = MxScaleRounding::Spec;
  const DType e4 = DType::Float8_e4m3fn, e5 = DType::Float8_e5m2;
  // 448 = 1.75 * 2^8 fits scale 2^0 either way; 480 in (448, 512): the spec keeps 2^0 (480
  // saturates to 448), rounding up takes 2^1 (480 / 2 = 240 fits).
  EXPECT_EQ(mx_scale_code(448.0f, e4, Up), 127);
  EXPECT_EQ(mx_scale_code(448.0f, e4, Spec), 127);
  EXPECT_EQ(mx_scale_code(480.0f, e4, Up), 128);
  EXPECT_EQ(mx_scale_code(480.0f, e4, Spec), 127);
  EXPECT_EQ(mx_scale_code(511.0f, e4, Spec), 127);
  EXPECT_EQ(mx_scale_code(512.0f, e4, Spec), 128);
  // 1 = 2^0: floor(log2 1) - 8 = -8; and 448 * 2^-8 = 1.75 >= 1 > 448 * 2^-9.
  EXPECT_EQ(mx_scale_code(1.0f, e4, Up), 119);
  EXPECT_EQ(mx_scale_code(1.0f, e4, Spec), 119);
  // E5M2 (max 57344 = 1.75 * 2^15, emax 15): 60000 is the same case.
  EXPECT_EQ(mx_scale_code(60000.0f, e5, Up), 128);
  EXPECT_EQ(mx_scale_code(60000.0f, e5, Spec), 127);
  EXPECT_EQ(mx_scale_code(57344.0f, e5, Up), 127);
  // Zero, non-finite, and E8M0's range.
  EXPECT_EQ(mx_scale_code(0.0f, e4, Up), 127);
  EXPECT_EQ(mx_scale_code(INFINITY, e4, Up), 0xFF);
  EXPECT_EQ(mx_scale_code(NAN, e4, Spec), 0xFF);
  EXPECT_EQ(mx_scale_code(1e-45f, e4, Up), 0);
  EXPECT_EQ(mx_scale_code(FLT_MAX, e4, Up), 247);  // FLT_MAX < 2^128 = 448 * 2^119 * (2^9 / 448)
  // Round-up is the smallest power of two that fits, over many magnitudes (checked in f64, exact).
  Generator g(5);
  const auto r = randn({2000}, {}, &g).to_vector<float>();
  for (size_t i = 0; i < r.size(); ++i) {
    const float amax = std::ldexp(std::fabs(r[i]) + 1e-3f, static_cast<int>(i % 60) - 30);
    const int e = mx_scale_code(amax, e4, Up) - 127;
    ASSERT_LE(double(amax), std::ldexp(448.0, e)) << amax;
    ASSERT_GT(double(amax), std::ldexp(448.0, e - 1)) << amax;
    const int es = mx_scale_code(amax, e4, Spec) - 127;
    ASSERT_EQ(es, std::ilogb(amax) - 8) << amax;
  }
}

TEST(MxBlock, WideningAtTheExtremeScalesIsTheElementTimesItsPowerOfTwo) {
  // Blocks whose amax sets E8M0's extreme codes and the BF16 edges: 2^-140 (code 0: 2^-127, the
  // elements scaled up by 2^127), 2^-120, 1, 2^120, FLT_MAX; both formats, rows along either axis.
  // The widening is mx_widen of the decoded element and 2^(code - 127) taken by std::ldexp.
  for (DType elem : {DType::Float8_e4m3fn, DType::Float8_e5m2})
    for (int64_t axis : {0, 1}) {
      std::vector<double> v;  // each value an exact float
      for (float amax : {0x1p-140f, 0x1p-120f, 1.0f, 0x1p120f, FLT_MAX})
        for (int i = 0; i < 32; ++i) v.push_back(i == 7 ? -amax : i == 31 ? amax : amax * ((i + 1) / 64.0f));
      Tensor x = tensor(v, {5, 32}, TensorOptions(DType::Float32));
      if (axis == 0) x = contiguous(x.t());
      const Fp8Operand q = mx_quantize(x, axis, elem, MXFP8BlockScaling{}, "test");
      const auto table = fp8_to_bf16_table(elem);
      const uint8_t* d = static_cast<const uint8_t*>(q.data.data_ptr());
      const uint8_t* codes = q.block_scales.data_ptr<uint8_t>();
      for (int64_t r = 0; r < x.size(0); ++r)
        for (int64_t c = 0; c < x.size(1); ++c) {
          const int64_t block = axis == 1 ? r * (x.size(1) / 32) + c / 32 : (r / 32) * x.size(1) + c;
          const float pow2 = std::ldexp(1.0f, static_cast<int>(codes[block]) - 127);
          const BFloat16 want = mx_widen(static_cast<float>(table[d[r * x.size(1) + c]]), pow2);
          ASSERT_EQ(q.widened.data_ptr<BFloat16>()[r * x.size(1) + c].bits, want.bits)
              << dtype_name(elem) << " axis " << axis << " at " << r << ", " << c << " code " << int(codes[block]);
        }
      EXPECT_EQ(codes[0], 0) << "the 2^-140 block's scale is E8M0's smallest";
    }
}

TEST(MxBlock, QuantizeIsBitExactAndOnlyTheSpecRoundingSaturates) {
  // Row 0: one block of 32 with amax 480 and small values; row 1: amax 3 and a tail block of 8
  // (40 values: blocks of 32 and 8, the tail as if zero-padded).
  std::vector<double> v(80);
  for (int i = 0; i < 40; ++i) {
    v[i] = (i % 7 - 3) * 0.37 + (i == 5 ? 480.0 : 0.0);
    v[40 + i] = std::sin(i) * 3.0;
  }
  v[40 + 36] = -200.0;  // the tail block's amax
  const Tensor x = tensor(v, {2, 40});
  const auto xs = x.to_vector<float>();
  for (MxScaleRounding rounding : {MxScaleRounding::Up, MxScaleRounding::Spec}) {
    MXFP8BlockScaling mx;
    mx.scale_rounding = rounding;
    const Fp8Operand q = mx_quantize(x, 1, DType::Float8_e4m3fn, mx, "test");
    ASSERT_EQ(q.block_scales.sizes(), (IntList{2, 2}));
    const auto codes = q.block_scales.to_vector<int64_t>();
    const uint8_t* d = static_cast<const uint8_t*>(q.data.data_ptr());
    const auto back = dequantize(q).to_vector<float>();
    for (int r = 0; r < 2; ++r)
      for (int b = 0; b < 2; ++b) {
        const int lo = b * 32, hi = std::min(40, lo + 32);
        float amax = 0;
        for (int c = lo; c < hi; ++c) amax = std::max(amax, std::fabs(xs[r * 40 + c]));
        const int code = static_cast<int>(codes[r * 2 + b]);
        ASSERT_EQ(code, mx_scale_code(amax, DType::Float8_e4m3fn, rounding));
        for (int c = lo; c < hi; ++c) {
          const int i = r * 40 + c;
          const uint8_t want = float_to_e4m3fn_bits(std::ldexp(xs[i], 127 - code), Fp8Saturation::Finite);
          ASSERT_EQ(d[i], want) << i;
          ASSERT_EQ(bits_of(back[i]), bits_of(std::ldexp(e4m3fn_bits_to_float(want), code - 127))) << i;
        }
      }
    // The 480 block: rounding up keeps it exactly (480 / 2 = 240 is an E4M3 value); the spec's
    // scale saturates it to 448.
    EXPECT_EQ(back[5], rounding == MxScaleRounding::Up ? 480.0f : 448.0f);
  }
  // Blocks along dim 0 (a wgrad's reduction over rows): 40 rows, blocks of 32 and 8.
  const Fp8Operand q0 = mx_quantize(x.t().contiguous(), 0, DType::Float8_e5m2, MXFP8BlockScaling{}, "test");
  EXPECT_EQ(q0.block_scales.sizes(), (IntList{2, 2}));
  const auto back0 = dequantize(q0).t().contiguous().to_vector<float>();
  const auto back1 = dequantize(mx_quantize(x, 1, DType::Float8_e5m2, MXFP8BlockScaling{}, "test")).to_vector<float>();
  EXPECT_EQ(back0, back1);  // the same blocks, read along the other dim
}

TEST(MxBlock, ANonFiniteValueMakesItsBlockNan) {
  Tensor x = zeros({1, 64});
  x.data_ptr<float>()[3] = INFINITY;
  x.data_ptr<float>()[40] = 2.0f;
  const Fp8Operand q = mx_quantize(x, 1, DType::Float8_e4m3fn, MXFP8BlockScaling{}, "test");
  const auto back = dequantize(q).to_vector<float>();
  EXPECT_TRUE(std::isnan(back[0]) && std::isnan(back[31]));
  EXPECT_EQ(back[40], 2.0f);
  EXPECT_EQ(q.block_scales.to_vector<int64_t>()[0], 0xFF);
}

TEST(MxBlock, WidenedCastMatchesTheScalarConversionForEverySourceAndLayout) {
  // Each element against the scalar saturating conversion of v * 2^-e, and its widening against
  // that value times 2^e rounded to BF16, from f32 and BF16 sources, blocks along a contiguous
  // dim (inner 1) and along strided ones (inner 3: a partial vector; 37: two vectors and a tail).
  for (DType elem : {DType::Float8_e4m3fn, DType::Float8_e5m2})
    for (DType src : {DType::Float32, DType::BFloat16})
      for (const IntList& sizes : {IntList{3, 70, 1}, IntList{2, 40, 3}, IntList{1, 33, 37}}) {
        const Tensor x = (randn(sizes) * 40.0).to(src);
        const Fp8Operand q = mx_quantize_widened(x, 1, elem, MXFP8BlockScaling{}, "test");
        const auto xs = x.to(DType::Float32).to_vector<float>();
        const auto codes = q.block_scales.to_vector<int64_t>();
        const uint8_t* d = static_cast<const uint8_t*>(q.data.data_ptr());
        const uint16_t* w = &q.widened.data_ptr<BFloat16>()->bits;
        const int64_t len = sizes[1], inner = sizes[2], nb = (len + 31) / 32;
        for (int64_t o = 0; o < sizes[0]; ++o)
          for (int64_t c = 0; c < len; ++c)
            for (int64_t i = 0; i < inner; ++i) {
              const int64_t at = (o * len + c) * inner + i;
              const int code = static_cast<int>(codes[(o * nb + c / 32) * inner + i]);
              const float scaled = std::ldexp(xs[at], 127 - code);
              const uint8_t want = elem == DType::Float8_e4m3fn ? float_to_e4m3fn_bits(scaled, Fp8Saturation::Finite)
                                                                : float_to_e5m2_bits(scaled, Fp8Saturation::Finite);
              ASSERT_EQ(d[at], want) << at;
              const float value = elem == DType::Float8_e4m3fn ? e4m3fn_bits_to_float(want) : e5m2_bits_to_float(want);
              ASSERT_EQ(w[at], BFloat16(std::ldexp(value, code - 127)).bits) << at;
            }
      }
}

TEST(MxBlock, WideningSaturatesAboveBf16AndRoundsIntoItsSubnormals) {
  // The BF16 widening (the operand the BF16 kernels read) of value * 2^e, at both ends of BF16's
  // range; the GEMM's widen_to_bf16 of the FP8 data and codes gives the same bits.
  auto bits_of = [](const Tensor& bf16) {
    std::vector<uint16_t> b(static_cast<size_t>(bf16.numel()));
    std::memcpy(b.data(), bf16.data_ptr(), b.size() * 2);
    return b;
  };
  auto both = [&](const Fp8Operand& q) {
    Fp8Operand bare = q;
    bare.widened = Tensor();
    EXPECT_EQ(bits_of(widen_to_bf16(bare)), bits_of(q.widened));
    return bits_of(q.widened);
  };
  // Above: amax 0x1.fep127 takes e = 120 (448 * 2^120 >= amax); 0x1.fep127 / 2^120 = 254.98 rounds
  // up to 256 in E4M3, and 256 * 2^120 = 2^128 is past BF16's (and f32's) largest finite value.
  {
    Tensor x = zeros({1, 32});
    float* p = x.data_ptr<float>();
    p[0] = 0x1.fep127f;
    p[1] = -0x1.fep127f;
    p[2] = 0x1.8p127f;  // 192 * 2^120: exact
    const Fp8Operand q = mx_quantize(x, 1, DType::Float8_e4m3fn, MXFP8BlockScaling{}, "test");
    EXPECT_EQ(q.block_scales.to_vector<int64_t>()[0], 127 + 120);
    const auto b = both(q);
    EXPECT_EQ(b[0], 0x7F7F);  // +BF16 max, not +inf
    EXPECT_EQ(b[1], 0xFF7F);
    EXPECT_EQ(b[2], BFloat16(0x1.8p127f).bits);
    EXPECT_TRUE(std::isinf(dequantize(q).to_vector<float>()[0]));  // the real value itself overflows f32
  }
  // Below: an E5M2 block under the smallest scale, 2^-127 (amax 2^-112 <= 57344 * 2^-127).
  {
    Tensor x = zeros({1, 32});
    float* p = x.data_ptr<float>();
    p[0] = 0x1p-112f;
    p[1] = 0x1p-143f;     // E5M2's smallest subnormal 2^-16 times 2^-127: under BF16's 2^-134, flushes
    p[2] = 0x1p-133f;     // BF16's smallest subnormal: exact
    p[3] = 0x1.cp-133f;   // 1.75 * 2^-133 (E5M2-exact) rounds to even: 2 * 2^-133
    p[4] = -0x1.8p-132f;  // 3 * 2^-133: exact
    const Fp8Operand q = mx_quantize(x, 1, DType::Float8_e5m2, MXFP8BlockScaling{}, "test");
    EXPECT_EQ(q.block_scales.to_vector<int64_t>()[0], 0);
    const auto b = both(q);
    EXPECT_EQ(b[0], BFloat16(0x1p-112f).bits);
    EXPECT_EQ(b[1], 0x0000);
    EXPECT_EQ(b[2], 0x0001);
    EXPECT_EQ(b[3], 0x0002);
    EXPECT_EQ(b[4], 0x8003);
    EXPECT_EQ(dequantize(q).to_vector<float>()[1], 0x1p-143f);  // the element itself holds the value
  }
}

TEST(MxBlock, QuantizeWidenedBlocksAlongAnyDimOfAnNdTensor) {
  // (2, 40, 3): blocks along dim 1 at each (outer, inner) position, a short one of 8 at the end;
  // the same elements and codes as the 2-D cast of each (outer, inner) fibre.
  const Tensor x = randn({2, 40, 3}) * 5.0;
  const MXFP8BlockScaling mx;
  const Fp8Operand q = mx_quantize_widened(x, 1, DType::Float8_e4m3fn, mx, "test");
  ASSERT_EQ(q.block_scales.sizes(), (IntList{2, 2, 3}));
  const auto codes = q.block_scales.to_vector<int64_t>();
  const auto wide = q.widened.to(DType::Float32).to_vector<float>();
  for (int64_t o = 0; o < 2; ++o)
    for (int64_t i = 0; i < 3; ++i) {
      const Tensor fibre = contiguous(x.select(0, o).select(1, i)).reshape({1, 40});
      const Fp8Operand f = mx_quantize(fibre, 1, DType::Float8_e4m3fn, mx, "test");
      const auto fc = f.block_scales.to_vector<int64_t>();
      const auto fv = dequantize(f).to_vector<float>();
      for (int64_t b = 0; b < 2; ++b) EXPECT_EQ(codes[(o * 2 + b) * 3 + i], fc[b]);
      for (int64_t c = 0; c < 40; ++c) EXPECT_EQ(wide[(o * 40 + c) * 3 + i], fv[c]) << o << "," << c << "," << i;
    }
  MXFP8BlockScaling strict;
  strict.pad_tail = false;
  const std::string e =
      error_of([&] { mx_quantize_widened(x, 1, DType::Float8_e4m3fn, strict, "conv2d (Fp8Autocast)"); });
  EXPECT_TRUE(contains(e, "conv2d (Fp8Autocast): MXFP8 block size 32 does not divide the reduction dim (40 values "
                          "along dim 1 of")) << e;
}

}  // namespace
}  // namespace mixtape::testing
