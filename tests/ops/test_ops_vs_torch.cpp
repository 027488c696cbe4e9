// tests/ops/test_ops_vs_torch.cpp — mixtape's ops against PyTorch's numbers (the second
// proof of every op; the first is the Float64 gradcheck).
//
// Owns the comparison of every case in tests/fixtures/ops_reference.json, which
// tests/fixtures/gen_ops_reference.py writes with Debian's torch 1.13 (CPU). Each case names its
// call -- an op of the registry ("op", run as dispatch(find_op(op), inputs, attrs) with the typed
// attrs the case stores) or one of the few public functions below that are more than one dispatch
// ("fn") -- its inputs, torch's outputs and, for f32/f64 cases, the gradient of
// loss = sum_i (out_i * w_i).sum()  with respect to each floating input, w_i stored too. Values
// are stored exactly (hex floats, 16-bit bit patterns), so every difference seen here is a
// difference in arithmetic, never in printing. A case for a new op is a line in the script and a
// regenerated fixture; nothing here names it. Regenerate with
//   /usr/bin/python3 tests/fixtures/gen_ops_reference.py
//
// One parameterised suite per op family (TorchBinary, TorchUnary, ...; TorchOtherFamily runs any
// family not listed), one test per fixture case, so a failing case is named on its own and a
// known bug can be skipped for exactly that case (kKnownBugs below).
//
// ---- Tolerances, derived ----
// f64 / f32, forward and gradients, element i passes when
//     |got_i - ref_i| <= rtol * (|ref_i| + max_j |ref_j|)
// The max_j term is the absolute floor every sum needs: a K-term sum (a reduction, a matmul inner
// product, a gradient reduced over broadcast dims) carries an error of order K * eps * sum|terms|,
// which is bounded by the tensor's magnitude, not by the (possibly cancelled) element itself.
//   f64: rtol = 1e-12. Both sides round at most a few dozen times per value (K <= 24 here), and
//        libm vs. torch's Sleef transcendentals differ by <= 1-2 ulp: <= ~100 ulp = 2.2e-14 even
//        after the ~20x amplification of 1 - y^2 near |y| = 1 in tanh/sigmoid gradients. 1e-12 is
//        that with margin, and still ~1e4 times tighter than any wrong formula.
//   f32: rtol = c * K * eps32 (eps32 = 2^-23), K = the case's "k" (longest sum it involves, 1 for
//        elementwise work). c = 4 for exact-rounding arithmetic (+ - * /, sqrt, sums: torch sums
//        pairwise in f32, mixtape in f64 with one rounding; their difference is <= ~log2(K) + 1
//        ulp of the terms' scale, and every backward formula is a product of <= 3 rounded
//        factors). c = 16 for transcendentals and their gradients (unary, pow): torch uses Sleef
//        (<= 1 ulp), mixtape libm (<= 1 ulp), then a backward formula of <= 3 rounded ops, and
//        sigmoid'/tanh' = y(1 - y), 1 - y^2 amplify a 1-ulp difference in y by y/(1 - y) <= ~5 for
//        the inputs used (|x| <~ 3).
// f16 / bf16 forward values are compared as bit patterns, by their distance in units in the last
// place of the 16-bit type:
//   0 ulp (bit-exact) for single elementwise ops that both sides compute in float and round once
//        (add, mul, add/mul with a scalar, casts): the float result is the same IEEE-correct value
//        on both sides, so its one rounding is the same.
//   1 ulp where the float value may differ in its last bits between the two sides: exp (Sleef vs.
//        libm, <= 1 float ulp), sum and matmul (different float accumulation orders; the
//        difference is <= K * eps32 * sum|terms| = 64 * 2^-24 ~ 4e-6 relative for K <= 64, far
//        below half a 16-bit ulp (2^-9 bf16, 2^-11 f16), so the rounded values differ only when
//        the float value lies within that distance of a rounding boundary -- by exactly one ulp).
// i64 outputs (max's indices) must be equal.
// A case with "precision" (mul_f32_by_0d_f64: a 0-d f64 tensor does not promote the f32 one, so
// both sides compute the product and the 0-d input's 12-term gradient in f32, then widen it to
// f64) compares its f64 values with the bound of that dtype: the f64 bound assumes f64 arithmetic.
// MT_TORCH_VERBOSE=1 prints every comparison's worst |diff| / tolerance, to re-check the margins
// (at the time of writing: <= 0.16 for f32, <= 3e-4 for f64, 0 for every 16-bit case).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/torch_fixture.h"
#include "mixtape/mixtape.h"

namespace mixtape {
namespace {

using nlohmann::json;
using testing::FixtureCase;
using testing::Tolerance;

// Known mismatches with PyTorch, by case name: the case is skipped (not silently passed) until the
// op is fixed. Each entry must carry a "// KNOWN BUG:" comment naming op, inputs, expected, got.
const std::map<std::string, std::string>& known_bugs() {
  static const std::map<std::string, std::string> kKnownBugs = {
  };
  return kKnownBugs;
}

const testing::TorchFixture& fixture() {
  static const testing::TorchFixture f("ops_reference.json", "gen_ops_reference.py");
  return f;
}

// ---- the calls that are not one registry op ("fn"): mixtape's public function runs, as
// gen_ops_reference.py's TORCH_FNS runs torch's. Keep this list to what the registry cannot say
// (TorchFixture.LoadsAndCoversEveryFamily fails on an entry no case uses).
using PublicFn = TensorList (*)(const TensorList& x, const Attrs& a);
const std::map<std::string, PublicFn>& public_functions() {
  static const std::map<std::string, PublicFn> kFns = {
      // Composites of the view ops (permute, slice, squeeze, view, clone), not registry entries.
      {"transpose", [](const TensorList& x, const Attrs& a) {
         return TensorList{transpose(x[0], a.get<int64_t>("dim0"), a.get<int64_t>("dim1"))};
       }},
      {"reshape", [](const TensorList& x, const Attrs& a) {
         return TensorList{reshape(x[0], a.get<IntList>("sizes"))};
       }},
      {"select", [](const TensorList& x, const Attrs& a) {
         return TensorList{select(x[0], a.get<int64_t>("dim"), a.get<int64_t>("index"))};
       }},
      {"narrow", [](const TensorList& x, const Attrs& a) {
         return TensorList{narrow(x[0], a.get<int64_t>("dim"), a.get<int64_t>("start"), a.get<int64_t>("length"))};
       }},
      {"flatten", [](const TensorList& x, const Attrs& a) {
         return TensorList{flatten(x[0], a.get<int64_t>("start_dim"), a.get<int64_t>("end_dim"))};
       }},
      // The registry's squeeze removes the (non-negative) size-1 dim it is given; the function
      // wraps a negative dim and leaves a dim of another size alone, PyTorch's rule.
      {"squeeze", [](const TensorList& x, const Attrs& a) {
         return TensorList{squeeze(x[0], a.get<int64_t>("dim"))};
       }},
      // The registry's matmul takes operands of >= 2 dims; the function gives 1-D operands
      // PyTorch's meaning (a dot product, a vector-matrix or matrix-vector product).
      {"matmul", [](const TensorList& x, const Attrs&) { return TensorList{matmul(x[0], x[1])}; }},
  };
  return kFns;
}

// Runs a fixture call ({"op" | "fn": name, "attrs": {...}}) on xs.
TensorList run_call(const json& call, const TensorList& xs) {
  if (call.contains("op")) return testing::dispatch_fixture_op(call, xs);
  const std::string name = call["fn"];
  auto it = public_functions().find(name);
  if (it == public_functions().end()) throw std::runtime_error("fixture: no public function '" + name + "' here");
  return it->second(xs, testing::decode_attrs(call.value("attrs", json())));
}

std::string call_name(const json& call) { return call.contains("op") ? call["op"] : call["fn"]; }

// See the derivation at the top of the file.
Tolerance tolerance_for(const json& c, DType dt) {
  const std::string family = c["family"], op = call_name(c);
  const double k = static_cast<double>(std::max<int64_t>(1, c["k"].get<int64_t>()));
  if (dt == DType::Int64) return {};
  if (dt == DType::Float64 && c.contains("precision")) dt = testing::fixture_dtype(c["precision"]);
  const bool transcendental = family == "unary" || family == "pow";
  if (dt == DType::Float64) return {.rtol = 1e-12};
  if (dt == DType::Float32) return {.rtol = (transcendental ? 16.0 : 4.0) * k * 0x1p-23};
  // add / mul with a tensor or a scalar (a wrapped number), and casts: one float op, one rounding.
  const bool exact16 = op == "add" || op == "mul" || op == "to_dtype";
  return {.ulps16 = exact16 ? 0 : 1};
}

void run_case(const json& c) {
  const std::string name = c["name"];
  if (auto it = known_bugs().find(name); it != known_bugs().end()) GTEST_SKIP() << "KNOWN BUG: " << it->second;
  SCOPED_TRACE("case " + name + " (" + (c.contains("op") ? "op " : "function ") + call_name(c) + ", reference " +
               c["reference"].get<std::string>() + ")");
  const bool with_grad = c.contains("grads");
  TensorList leaves, xs;
  for (size_t i = 0; i < c["inputs"].size(); ++i) {
    const json& in = c["inputs"][i];
    Tensor x = testing::decode(in);
    if (with_grad && !c["grads"][i].is_null()) x.requires_grad_(true);
    leaves.push_back(x);
    // "through": calls (views) between the leaf and the op; the gradient is the leaf's.
    if (in.contains("through"))
      for (const json& step : in["through"]) x = run_call(step, {x}).at(0);
    xs.push_back(x);
  }
  TensorList outs = run_call(c, xs);
  // An op may return more than PyTorch's outputs only as internal state it keeps for backward
  // (relu's bit mask, max_pool2d's tap codes: integer tensors), never another floating result.
  ASSERT_GE(outs.size(), c["outputs"].size()) << "number of outputs";
  for (size_t i = c["outputs"].size(); i < outs.size(); ++i)
    EXPECT_TRUE(!outs[i].defined() || !outs[i].is_floating_point()) << "output " << i << " beyond PyTorch's";
  outs.resize(c["outputs"].size());
  for (size_t i = 0; i < outs.size(); ++i) {
    const json& ref = c["outputs"][i];
    testing::expect_matches(outs[i], ref, tolerance_for(c, testing::fixture_dtype(ref["dtype"])),
                            "output " + std::to_string(i), name);
  }
  if (!with_grad) return;
  testing::backward_weighted(outs, c["weights"]);
  for (size_t i = 0; i < leaves.size(); ++i) {
    const json& ref = c["grads"][i];
    if (ref.is_null()) continue;
    testing::expect_matches(leaves[i].grad(), ref, tolerance_for(c, testing::fixture_dtype(ref["dtype"])),
                            "grad of input " + std::to_string(i), name);
  }
}

// ---- one suite per op family ----
std::vector<FixtureCase> cases_of(const std::string& family) { return fixture().cases_where("family", family); }

#define MT_TORCH_FAMILY(Suite, family) MT_TORCH_SUITE_OF(Suite, family, cases_of, run_case)

MT_TORCH_FAMILY(TorchBinary, "binary");      // add sub mul div, broadcast, Python scalars
MT_TORCH_FAMILY(TorchUnary, "unary");        // neg exp log sqrt abs relu sigmoid tanh
MT_TORCH_FAMILY(TorchPow, "pow");            // exponents 2, 3, 0.5, -1.5
MT_TORCH_FAMILY(TorchSum, "sum");            // all, dims [0,2] keepdim on/off, strided input
MT_TORCH_FAMILY(TorchMean, "mean");          // all, dim 1
MT_TORCH_FAMILY(TorchAmax, "amax");          // dim 1, no ties
MT_TORCH_FAMILY(TorchMax, "max");            // values, indices and gradient
MT_TORCH_FAMILY(TorchMatmul, "matmul");      // 2-D, batched broadcast, 1-D cases
MT_TORCH_FAMILY(TorchViews, "views");        // each view op, then * m
MT_TORCH_FAMILY(TorchGather, "gather");      // repeated indices: the gradient accumulates
MT_TORCH_FAMILY(TorchCast, "cast");          // to(dtype) between f64 f32 f16 bf16, and its gradient
MT_TORCH_FAMILY(TorchHalfForward, "half");   // f16 / bf16 forward values
MT_TORCH_FAMILY(TorchAddcmul, "addcmul");    // self + value * t1 * t2, broadcasting
// Cases of a family not listed above (a new op's family needs no line here).
MT_TORCH_FIXTURE_SUITE(TorchOtherFamily, fixture().cases_not_in("family", testing::suite_values()), run_case);

// The fixture loads, every family above has cases (an empty family would pass vacuously), every
// call names a registry op or a function above, and every function above is used.
TEST(TorchFixture, LoadsAndCoversEveryFamily) {
  ASSERT_TRUE(fixture().error.empty()) << fixture().error;
  for (const std::string& family : testing::suite_values())
    EXPECT_FALSE(cases_of(family).empty()) << "no cases for family " << family;
  const std::map<std::string, int> seen = fixture().name_counts();
  for (const auto& [name, n] : seen) EXPECT_EQ(n, 1) << "duplicate case name " << name;
  for (const auto& [name, why] : known_bugs()) EXPECT_EQ(seen.count(name), 1u) << "known bug for missing case " << name;
  std::set<std::string> fns_used;
  auto check_call = [&](const json& call, const std::string& where) {
    if (call.contains("op")) {
      EXPECT_NE(find_op(call["op"].get<std::string>()), nullptr) << where << ": no registry op " << call["op"];
    } else {
      ASSERT_TRUE(call.contains("fn")) << where << ": neither \"op\" nor \"fn\"";
      const std::string fn = call["fn"];
      EXPECT_EQ(public_functions().count(fn), 1u) << where << ": no public function " << fn << " in this file";
      fns_used.insert(fn);
    }
  };
  for (const json& c : fixture().doc["cases"]) {
    const std::string name = c["name"];
    check_call(c, name);
    for (const json& in : c["inputs"])
      if (!in.is_null() && in.contains("through"))
        for (const json& step : in["through"]) check_call(step, name + " (through)");
  }
  for (const auto& [fn, f] : public_functions()) EXPECT_EQ(fns_used.count(fn), 1u) << "no case calls function " << fn;
}

}  // namespace
}  // namespace mixtape
