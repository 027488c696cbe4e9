// tests/ops/test_norm_activation_vs_torch.cpp — gelu, leaky_relu, clamp, where, batch_norm and
// layer_norm against PyTorch's numbers (the second proof of every op; the first is the
// Float64 gradcheck in test_norm_activation.cpp).
//
// Owns the comparison of every case in tests/fixtures/norm_activation.json, which
// tests/fixtures/gen_norm_activation.py writes with Debian's torch 1.13 (CPU). Each case names an
// op with the arguments of mixtape's C++ API, its inputs (null = an undefined optional tensor),
// torch's output and, for f32/f64 cases, the gradient of loss = (out * w).sum() with respect to
// each differentiable input, w stored too; training-mode batch_norm cases also store the running
// statistics after the call. Values are stored exactly (hex floats, 16-bit bit patterns).
// Regenerate with  /usr/bin/python3 tests/fixtures/gen_norm_activation.py
//
// ---- Tolerances, derived ----
// f64 / f32, element i passes when |got_i - ref_i| <= rtol * (|ref_i| + max_j |ref_j|); the max
// term is the absolute floor every sum needs (a K-term sum errs by ~K eps sum|terms|, bounded by
// the tensor's magnitude, not by the possibly cancelled element).
//   f64: rtol = 1e-12. Each value is a few dozen roundings on either side (K <= 100 here:
//        100 * 2^-53 = 1.1e-14 for the statistics), and libm vs. Sleef erf/tanh differ by
//        <= 1-2 ulp; 1e-12 leaves a margin of ~100 and is still ~1e8 tighter than a wrong formula.
//   f32: rtol = c * K * eps32 (eps32 = 2^-23), K = the case's "k": the longest sum a value
//        involves (N*H*W for batch_norm statistics and weight gradients, the normalised size or
//        the leading size for layer_norm, the broadcast size for where's gradient; 1 for
//        elementwise work). c = 4 for exact-rounding arithmetic (clamp, leaky_relu, where and the
//        normalisations: torch accumulates statistics in f32 (pairwise / Welford), mixtape in
//        f64 with one rounding, a difference <= ~log2(K) + 1 ulp of the terms' scale, and every
//        forward or backward formula is a product of <= 3 rounded factors on top). c = 16 for
//        gelu: torch 1.13 evaluates erf in f32 with a polynomial whose absolute error is
//        <= 1.5e-7 (~1.3 eps32 against the 1 + erf term), mixtape calls libm (<= 1 ulp); the
//        tanh form and the gradients add <= 4 rounded operations.
// f16 / bf16 forward values, by distance in units in the last place of the 16-bit type:
//   0 ulp for clamp, leaky_relu and where: one correctly rounded float operation (or none)
//        then one rounding, on both sides -- the same value. (torch rounds clamp's bounds to
//        bf16 first; for bf16 x that gives the same result, since rounding is monotone and x is
//        already a bf16 value.)
//   1 ulp for gelu: the float values differ by a few float ulps (erf as above), so their
//        roundings differ only when a 16-bit rounding boundary lies between them.
//   batch_norm / layer_norm: 1 ulp, or |got - ref| <= ulp16 + rtol32 * (|ref| + max|ref|) with
//        rtol32 = 4 K eps32: the float values before the rounding agree to the f32 bound above;
//        each rounding moves a value by <= half a 16-bit ulp. (Near zero the absolute f32 bound
//        may span several of the fine 16-bit ulps there, hence the second clause.)
//   Running statistics of the 16-bit cases are f32: the f32 bound.
// MT_TORCH_VERBOSE=1 prints every comparison's worst |diff| / tolerance, to re-check the
// margins (at the time of writing: <= 0.04 for f32, <= 3e-4 for f64; 16-bit: 1 ulp, the bound, in
// gelu_none_f16 and batch_norm_train_f16_x_f32_params, 0 ulp elsewhere).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/torch_fixture.h"
#include "mixtape/mixtape.h"
#include "ops/activation.h"
#include "ops/normalization.h"

namespace mixtape {
namespace {

using nlohmann::json;
using testing::decode;
using testing::fixture_dtype;
using testing::FixtureCase;
using testing::Tolerance;

const testing::TorchFixture& fixture() {
  static const testing::TorchFixture f("norm_activation.json", "gen_norm_activation.py");
  return f;
}
std::vector<FixtureCase> cases_of(const std::string& family) { return fixture().cases_where("family", family); }

std::optional<double> opt_hex(const json& v) {
  return v.is_null() ? std::nullopt : std::optional<double>(testing::hex_double(v));
}

// ---- mixtape's side (names and arguments as in gen_norm_activation.py's apply) ----
Tensor apply(const std::string& op, const json& p, const TensorList& xs) {
  if (op == "gelu") return gelu(xs[0], p["approximate"].get<std::string>());
  if (op == "leaky_relu") return leaky_relu(xs[0], p["negative_slope"].get<double>());
  if (op == "clamp") return clamp(xs[0], opt_hex(p["min"]), opt_hex(p["max"]));
  if (op == "where") return where(xs[0], xs[1], xs[2]);
  if (op == "batch_norm")
    return batch_norm(xs[0], xs[1], xs[2], xs[3], xs[4], p["training"].get<bool>(), p["momentum"].get<double>(),
                      p["eps"].get<double>());
  if (op == "layer_norm")
    return layer_norm(xs[0], IntList(p["normalized_shape"].get<std::vector<int64_t>>()), xs[1], xs[2],
                      p["eps"].get<double>());
  throw std::runtime_error("fixture: unknown op " + op);
}

// ---- comparison ----
// See the derivation at the top of the file. For the 16-bit normalisations, rtol is the second
// clause's f32 bound (|got - ref| <= ulp16 + rtol32 (|ref| + max|ref|), when 1 ulp is not met).
Tolerance tolerance_for(const json& c, DType dt) {
  const std::string op = c["op"];
  const double k = static_cast<double>(std::max<int64_t>(1, c["k"].get<int64_t>()));
  const double rtol32 = (op == "gelu" ? 16.0 : 4.0) * k * 0x1p-23;
  if (dt == DType::Float64) return {.rtol = 1e-12};
  if (dt == DType::Float32) return {.rtol = rtol32};
  if (dt == DType::Bool) return {};
  if (op == "batch_norm" || op == "layer_norm") return {.rtol = rtol32, .ulps16 = 1};
  return {.ulps16 = op == "gelu" ? 1 : 0};
}

void expect_matches(const Tensor& got, const json& ref, const json& c, const std::string& what) {
  testing::expect_matches(got, ref, tolerance_for(c, fixture_dtype(ref["dtype"])), what, c["name"]);
}

void run_case(const json& c) {
  SCOPED_TRACE("case " + c["name"].get<std::string>() + " (op " + c["op"].get<std::string>() + ", reference " +
               c["reference"].get<std::string>() + ")");
  const bool with_grad = c.contains("grads");
  TensorList xs;
  for (size_t i = 0; i < c["inputs"].size(); ++i) {
    Tensor x = decode(c["inputs"][i]);
    if (with_grad && !c["grads"][i].is_null()) x.requires_grad_(true);
    xs.push_back(x);
  }
  Tensor out = apply(c["op"], c["params"], xs);
  expect_matches(out, c["outputs"][0], c, "output");
  if (c.contains("running_after")) {
    // Running statistics: compared with the f32/f64 bound of their own dtype.
    json stat_case = c;
    stat_case["op"] = "batch_norm";
    expect_matches(xs[1], c["running_after"][0], stat_case, "running_mean after");
    expect_matches(xs[2], c["running_after"][1], stat_case, "running_var after");
  }
  if (!with_grad) return;
  testing::backward_weighted({out}, c["weights"]);
  for (size_t i = 0; i < xs.size(); ++i) {
    if (c["grads"][i].is_null()) continue;
    expect_matches(xs[i].grad(), c["grads"][i], c, "grad of input " + std::to_string(i));
  }
}

#define MT_NORM_TORCH_FAMILY(Suite, family) MT_TORCH_SUITE_OF(Suite, family, cases_of, run_case)

MT_NORM_TORCH_FAMILY(NormActTorchActivation, "pointwise");  // gelu (none, tanh), leaky_relu, clamp
MT_NORM_TORCH_FAMILY(NormActTorchWhere, "where");           // broadcast cond (3,1) with (2,3,4) and (4)
MT_NORM_TORCH_FAMILY(NormActTorchBatchNorm, "batch_norm");  // train / eval, affine or not, (N,C) / (N,C,H,W)
MT_NORM_TORCH_FAMILY(NormActTorchLayerNorm, "layer_norm");  // 1 and 2 trailing dims, affine or not
MT_NORM_TORCH_FAMILY(NormActTorchNormHalf, "half");         // f16 / bf16 forward, batch_norm with f32 params

TEST(NormActTorchFixture, LoadsAndCoversEveryFamily) {
  ASSERT_TRUE(fixture().error.empty()) << fixture().error;
  for (const std::string& family : testing::suite_values())
    EXPECT_FALSE(cases_of(family).empty()) << "no cases for family " << family;
  // A case of an op or family no suite above runs would be skipped without a word.
  for (const FixtureCase& c : fixture().cases_not_in("family", testing::suite_values()))
    ADD_FAILURE() << "case " << (*c.j)["name"] << " has family " << (*c.j).value("family", std::string()) << ", which no suite of this file runs";
  for (const auto& [name, n] : fixture().name_counts()) EXPECT_EQ(n, 1) << "duplicate case name " << name;
}

}  // namespace
}  // namespace mixtape
