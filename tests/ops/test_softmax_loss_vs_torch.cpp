// tests/ops/test_softmax_loss_vs_torch.cpp — softmax, the losses and the shape ops against
// PyTorch 1.13 (the second proof of every op: PyTorch's own numbers). The values come from
// tests/fixtures/softmax_loss.json, written by tests/fixtures/gen_softmax_loss.py (see its
// docstring for the encoding and the reference modes); every case runs the same mixtape function
// on the same inputs, compares the outputs, then backpropagates sum_i (out_i * w_i).sum() and
// compares the input gradients.
//
// Tolerances. A value v with expected w passes when
//   f64, f32:   |v - w| <= rtol * (|w| + scale),   scale = max |w| over the compared tensor
//   f16, bf16:  their bit patterns are at most ulps16 apart (adjacent values differ by 1).
// The dtype is the compared tensor's, or the case's "precision" param where a value went through
// a narrower dtype than it is stored in (an f64 input's gradient through softmax(dtype=f32)).
//   f64: rtol = 1e-12. Both sides compute in f64: at most k additions (k = the case's longest
//        sum: the softmax dim, the number of loss terms) and a few exp/log/divisions, each within
//        1 ulp in glibc and in torch's Sleef, so |diff| <= (k + 8) 2^-52 scale, ~2e-14 for
//        k = 64: 1e-12 leaves a factor 50.
//   f32: rtol = (k + 16) 2^-23. Per side, relative to scale (u = 2^-24): the k-term f32 sum,
//        sequential here and vectorised in torch, <= k u; exp/log/division within 2 ulp each,
//        at most 4 on one path, <= 8 u; the rounding of x - max (u |x - max| absolute) moves
//        exp(x - max) / s by <= u (x - max) e^-(max - x) y_max <= u scale / e and log_softmax by
//        <= u |y|, so <= u. Both sides: <= (2k + 18) u = (k + 9) 2^-23, and (k + 16) 2^-23 leaves
//        room for the gradients' extra product and difference (y (g - sum g y), w - t ...).
//        The losses accumulate Mean/Sum in f64 here, which only shrinks our side's k u.
//   16-bit: ulps16 = 0 for ops that only move or compare values (cat, stack, index_select,
//        argmax); 1 for one op computed in f32 and rounded once ("torch_f32_round_once", and
//        torch's own bf16 kernels where they are round-once -- not log_softmax over the innermost
//        dim, see gen_softmax_loss.py): the two f32 results differ by far less than a 16-bit ulp
//        but may straddle a rounding boundary, so the roundings can land one ulp apart; 2 for
//        cross_entropy's per-op replay ("torch_f32_per_op"), where a one-ulp difference in an
//        intermediate (a log-probability) can move the final rounding by one more.
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
#include "ops/loss.h"
#include "ops/shape_ops.h"
#include "ops/softmax.h"

namespace mixtape {
namespace {

using nlohmann::json;
using testing::decode;
using testing::fixture_dtype;
using testing::FixtureCase;
using testing::Tolerance;

// Known mismatches with PyTorch, by case name: skipped (not silently passed) until fixed. Each
// entry must carry a "// KNOWN BUG:" comment naming op, inputs, expected, got.
const std::map<std::string, std::string>& known_bugs() {
  static const std::map<std::string, std::string> kKnownBugs = {};
  return kKnownBugs;
}

const testing::TorchFixture& fixture() {
  static const testing::TorchFixture f("softmax_loss.json", "gen_softmax_loss.py");
  return f;
}
std::vector<FixtureCase> cases_of(const std::string& family) { return fixture().cases_where("family", family); }

Reduction reduction_from(const json& r) {
  const std::string s = r;
  if (s == "none") return Reduction::None;
  if (s == "mean") return Reduction::Mean;
  if (s == "sum") return Reduction::Sum;
  throw std::runtime_error("fixture: unknown reduction " + s);
}

// ---- mixtape's side (input positions as in gen_softmax_loss.py's apply) ----
TensorList apply(const std::string& op, const json& p, const TensorList& xs) {
  if (op == "softmax" || op == "log_softmax") {
    std::optional<DType> dt;
    if (p.contains("dtype")) dt = fixture_dtype(p["dtype"]);
    const int64_t dim = p["dim"];
    return {op == "softmax" ? softmax(xs[0], dim, dt) : log_softmax(xs[0], dim, dt)};
  }
  if (op == "nll_loss")
    return {nll_loss(xs[0], xs[1], p["weight"].get<bool>() ? xs[2] : Tensor(), p["ignore_index"].get<int64_t>(),
                     reduction_from(p["reduction"]))};
  if (op == "cross_entropy")
    return {cross_entropy(xs[0], xs[1], p["weight"].get<bool>() ? xs[2] : Tensor(), p["ignore_index"].get<int64_t>(),
                          reduction_from(p["reduction"]), p["label_smoothing"].get<double>())};
  if (op == "mse_loss") return {mse_loss(xs[0], xs[1], reduction_from(p["reduction"]))};
  if (op == "binary_cross_entropy")
    return {binary_cross_entropy(xs[0], xs[1], p["weight"].get<bool>() ? xs[2] : Tensor(),
                                 reduction_from(p["reduction"]))};
  if (op == "binary_cross_entropy_with_logits") {
    size_t i = 2;
    Tensor w = p["weight"].get<bool>() ? xs[i++] : Tensor();
    Tensor pw = p["pos_weight"].get<bool>() ? xs[i++] : Tensor();
    return {binary_cross_entropy_with_logits(xs[0], xs[1], w, pw, reduction_from(p["reduction"]))};
  }
  if (op == "cat") return {cat(xs, p["dim"].get<int64_t>())};
  if (op == "stack") return {stack(xs, p["dim"].get<int64_t>())};
  if (op == "argmax") {
    std::optional<int64_t> dim;
    if (!p["dim"].is_null()) dim = p["dim"].get<int64_t>();
    return {argmax(xs[0], dim, p["keepdim"].get<bool>())};
  }
  if (op == "index_select") return {index_select(xs[0], p["dim"].get<int64_t>(), xs[1])};
  throw std::runtime_error("fixture: unknown op " + op);
}

// ---- comparison ----
// See the derivation at the top of the file.
Tolerance tolerance_for(const json& c, DType dt) {
  if (dt == DType::Int64) return {};
  if (dt == DType::Float64 && c["params"].contains("precision")) dt = fixture_dtype(c["params"]["precision"]);
  const double k = static_cast<double>(std::max<int64_t>(1, c["k"].get<int64_t>()));
  if (dt == DType::Float64) return {.rtol = 1e-12};
  if (dt == DType::Float32) return {.rtol = (k + 16.0) * 0x1p-23};
  const std::string op = c["op"], ref = c["reference"];
  if (op == "cat" || op == "stack" || op == "index_select" || op == "argmax") return {};
  return {.ulps16 = ref == "torch_f32_per_op" ? 2 : 1};
}

void expect_matches(const Tensor& got, const json& ref, const json& c, const std::string& what) {
  testing::expect_matches(got, ref, tolerance_for(c, fixture_dtype(ref["dtype"])), what, c["name"]);
}

void run_case(const json& c) {
  const std::string name = c["name"];
  if (auto it = known_bugs().find(name); it != known_bugs().end()) GTEST_SKIP() << "KNOWN BUG: " << it->second;
  SCOPED_TRACE("case " + name + " (op " + c["op"].get<std::string>() + ", reference " +
               c["reference"].get<std::string>() + ")");
  const bool with_grad = c.contains("grads");
  TensorList xs;
  for (size_t i = 0; i < c["inputs"].size(); ++i) {
    Tensor x = decode(c["inputs"][i]);
    if (with_grad && c["requires_grad"][i].get<bool>()) x.requires_grad_(true);
    xs.push_back(x);
  }
  TensorList outs = apply(c["op"], c["params"], xs);
  ASSERT_EQ(outs.size(), c["outputs"].size()) << "number of outputs";
  for (size_t i = 0; i < outs.size(); ++i) expect_matches(outs[i], c["outputs"][i], c, "output " + std::to_string(i));
  if (!with_grad) return;
  testing::backward_weighted(outs, c["weights"]);
  for (size_t i = 0; i < xs.size(); ++i) {
    if (c["grads"][i].is_null()) continue;
    expect_matches(xs[i].grad(), c["grads"][i], c, "grad of input " + std::to_string(i));
  }
}

#define MT_TORCH_FAMILY(Suite, family) MT_TORCH_SUITE_OF(Suite, family, cases_of, run_case)

MT_TORCH_FAMILY(TorchSoftmax, "softmax");            // dims 0, 1, -1; large logits; dtype=
MT_TORCH_FAMILY(TorchNllLoss, "nll_loss");           // weight, ignore_index, (N, C, d1, d2)
MT_TORCH_FAMILY(TorchCrossEntropy, "cross_entropy");  // index and probability targets; smoothing, weight, ignore_index
MT_TORCH_FAMILY(TorchMseLoss, "mse_loss");
MT_TORCH_FAMILY(TorchBce, "bce");                    // with weight; target gradient
MT_TORCH_FAMILY(TorchBceLogits, "bce_logits");       // weight and pos_weight; large logits
MT_TORCH_FAMILY(TorchShapeOps, "shape");             // cat, stack, index_select, argmax
MT_TORCH_FAMILY(TorchSoftmaxLossHalf, "half");       // f16 / bf16 forward values

TEST(TorchSoftmaxLossFixture, LoadsAndCoversEveryFamily) {
  ASSERT_TRUE(fixture().error.empty()) << fixture().error;
  for (const std::string& family : testing::suite_values())
    EXPECT_FALSE(cases_of(family).empty()) << "no cases for family " << family;
  // A case of an op or family no suite above runs would be skipped without a word.
  for (const FixtureCase& c : fixture().cases_not_in("family", testing::suite_values()))
    ADD_FAILURE() << "case " << (*c.j)["name"] << " has family " << (*c.j).value("family", std::string()) << ", which no suite of this file runs";
  const std::map<std::string, int> seen = fixture().name_counts();
  int probability_targets = 0;  // cross_entropy's second form: a floating target of the logits' shape
  for (const json& c : fixture().doc["cases"])
    if (c["op"] == "cross_entropy" && c["inputs"][1]["dtype"] != "i64") ++probability_targets;
  EXPECT_GT(probability_targets, 0) << "no cross_entropy case with class-probability targets";
  for (const auto& [name, n] : seen) EXPECT_EQ(n, 1) << "duplicate case name " << name;
  for (const auto& [name, why] : known_bugs()) EXPECT_EQ(seen.count(name), 1u) << "known bug for missing case " << name;
}

}  // namespace
}  // namespace mixtape
