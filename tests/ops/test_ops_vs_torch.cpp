// tests/ops/test_ops_vs_torch.cpp — mixtape's ops against PyTorch's numbers (the second
// proof of every op; the first is the Float64 gradcheck).
//
// Owns the comparison of every case in tests/fixtures/ops_reference.json, which
// tests/fixtures/gen_ops_reference.py writes with Debian's torch 1.13 (CPU). Each case names an op
// with the arguments of mixtape's C++ API, its inputs, torch's outputs and, for f32/f64 cases, the
// gradient of  loss = sum_i (out_i * w_i).sum()  with respect to each floating input, w_i stored
// too. Values are stored exactly (hex floats, 16-bit bit patterns), so every difference seen here
// is a difference in arithmetic, never in printing. Regenerate with
//   /usr/bin/python3 tests/fixtures/gen_ops_reference.py
//
// One parameterised suite per op family (TorchBinary, TorchUnary, ...), one test per fixture case,
// so a failing case is named on its own and a known bug can be skipped for exactly that case
// (kKnownBugs below).
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
// MT_TORCH_VERBOSE=1 prints every comparison's worst |diff| / tolerance, to re-check the margins
// (at the time of writing: <= 0.16 for f32, <= 3e-4 for f64, 0 for every 16-bit case).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mixtape/mixtape.h"

namespace mixtape {
namespace {

using nlohmann::json;

// Known mismatches with PyTorch, by case name: the case is skipped (not silently passed) until the
// op is fixed. Each entry must carry a "// KNOWN BUG:" comment naming op, inputs, expected, got.
const std::map<std::string, std::string>& known_bugs() {
  static const std::map<std::string, std::string> kKnownBugs = {
  };
  return kKnownBugs;
}

// ---- the fixture ----
std::string fixture_path() {
  std::string here = __FILE__;
  return here.substr(0, here.find_last_of("/\\")) + "/../fixtures/ops_reference.json";
}

struct Fixture {
  json doc;
  std::string error;  // why loading failed; empty on success
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture r;
    std::ifstream in(fixture_path());
    if (!in) {
      r.error = "cannot open " + fixture_path() + " (run /usr/bin/python3 tests/fixtures/gen_ops_reference.py)";
      return r;
    }
    try {
      r.doc = json::parse(in);
    } catch (const std::exception& e) {
      r.error = "cannot parse " + fixture_path() + ": " + e.what();
    }
    return r;
  }();
  return f;
}

struct Case {
  const json* j;  // one element of fixture().doc["cases"]
  std::string name() const { return (*j)["name"].get<std::string>(); }
};

std::vector<Case> cases_of(const std::string& family) {
  std::vector<Case> out;
  const Fixture& f = fixture();
  if (!f.error.empty()) return out;
  for (const json& c : f.doc["cases"])
    if (c["family"] == family) out.push_back(Case{&c});
  return out;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return info.param.name(); }
void PrintTo(const Case& c, std::ostream* os) { *os << c.name(); }  // gtest names the case, not its bytes

// ---- decoding ----
DType dtype_from(const std::string& s) {
  if (s == "f64") return DType::Float64;
  if (s == "f32") return DType::Float32;
  if (s == "f16") return DType::Float16;
  if (s == "bf16") return DType::BFloat16;
  if (s == "i64") return DType::Int64;
  throw std::runtime_error("fixture: unknown dtype " + s);
}

double hex_double(const json& v) { return std::strtod(v.get<std::string>().c_str(), nullptr); }

IntList int_list(const json& v) { return IntList(v.get<std::vector<int64_t>>()); }

// An encoded tensor's logical values, as doubles (exact for every dtype stored here).
std::vector<double> values_of(const json& t) {
  DType dt = dtype_from(t["dtype"]);
  std::vector<double> v;
  for (const json& e : t["data"]) {
    if (dt == DType::Float64 || dt == DType::Float32)
      v.push_back(hex_double(e));
    else if (dt == DType::Float16)
      v.push_back(static_cast<float>(Half::from_bits(e.get<uint16_t>())));
    else if (dt == DType::BFloat16)
      v.push_back(static_cast<float>(BFloat16::from_bits(e.get<uint16_t>())));
    else
      v.push_back(static_cast<double>(e.get<int64_t>()));
  }
  return v;
}

// Builds a leaf tensor from an encoding; "layout": "transposed" rebuilds torch's .t() view (a
// non-contiguous leaf) so the kernels' strided paths are what gets compared.
Tensor decode(const json& t) {
  DType dt = dtype_from(t["dtype"]);
  IntList sizes = int_list(t["shape"]);
  std::vector<double> v = values_of(t);
  if (t.contains("layout") && t["layout"] == "transposed") {
    int64_t r = sizes[0], c = sizes[1];
    std::vector<double> tv(v.size());
    for (int64_t i = 0; i < r; ++i)
      for (int64_t k = 0; k < c; ++k) tv[static_cast<size_t>(k * r + i)] = v[static_cast<size_t>(i * c + k)];
    Tensor base = tensor(tv, {c, r}, TensorOptions(dt));
    Tensor x = base.t().detach();
    EXPECT_FALSE(x.is_contiguous());
    return x;
  }
  return tensor(v, sizes, TensorOptions(dt));
}

// ---- mixtape's side of each op (names and arguments as in gen_ops_reference.py's apply) ----
Tensor apply_view(const json& s, const Tensor& y) {
  const std::string op = s["op"];
  if (op == "transpose") return y.transpose(s["d0"], s["d1"]);
  if (op == "permute") return y.permute(int_list(s["dims"]));
  if (op == "expand") return y.expand(int_list(s["sizes"]));
  if (op == "reshape") return y.reshape(int_list(s["sizes"]));
  if (op == "view") return y.view(int_list(s["sizes"]));
  if (op == "slice") return y.slice(s["dim"], s["start"], s["end"], s["step"]);
  if (op == "select") return y.select(s["dim"], s["index"]);
  if (op == "narrow") return y.narrow(s["dim"], s["start"], s["length"]);
  if (op == "unsqueeze") return y.unsqueeze(s["dim"]);
  if (op == "squeeze") return y.squeeze(s["dim"]);
  if (op == "flatten") return y.flatten(s["start_dim"], s["end_dim"]);
  throw std::runtime_error("fixture: unknown view op " + op);
}

TensorList apply(const std::string& op, const json& p, const TensorList& xs) {
  if (op == "add") return {xs[0] + xs[1]};
  if (op == "sub") return {xs[0] - xs[1]};
  if (op == "mul") return {xs[0] * xs[1]};
  if (op == "div") return {xs[0] / xs[1]};
  if (op.ends_with("_scalar")) {
    const double s = hex_double(p["scalar"]);
    if (op == "add_scalar") return {xs[0] + s};
    if (op == "sub_scalar") return {xs[0] - s};
    if (op == "rsub_scalar") return {s - xs[0]};
    if (op == "mul_scalar") return {xs[0] * s};
    if (op == "div_scalar") return {xs[0] / s};
    if (op == "rdiv_scalar") return {s / xs[0]};
  }
  static const std::map<std::string, std::function<Tensor(const Tensor&)>> unary = {
      {"neg", [](const Tensor& x) { return neg(x); }},         {"exp", [](const Tensor& x) { return exp(x); }},
      {"log", [](const Tensor& x) { return log(x); }},         {"sqrt", [](const Tensor& x) { return sqrt(x); }},
      {"abs", [](const Tensor& x) { return abs(x); }},         {"relu", [](const Tensor& x) { return relu(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }}, {"tanh", [](const Tensor& x) { return tanh(x); }},
  };
  if (auto it = unary.find(op); it != unary.end()) return {it->second(xs[0])};
  if (op == "pow") return {pow(xs[0], p["exponent"].get<double>())};
  if (op == "sum") return {p["dims"].is_null() ? sum(xs[0]) : sum(xs[0], int_list(p["dims"]), p["keepdim"])};
  if (op == "mean") return {p["dims"].is_null() ? mean(xs[0]) : mean(xs[0], int_list(p["dims"]), p["keepdim"])};
  if (op == "amax") {
    if (p["dim"].is_array()) return {amax(xs[0], int_list(p["dim"]), p["keepdim"].get<bool>())};
    return {amax(xs[0], p["dim"].get<int64_t>(), p["keepdim"].get<bool>())};
  }
  if (op == "max") {
    auto [values, indices] = max(xs[0], p["dim"].get<int64_t>(), p["keepdim"].get<bool>());
    return {values, indices};
  }
  if (op == "matmul") return {matmul(xs[0], xs[1])};
  if (op == "view_mul") {
    Tensor y = xs[0];
    for (const json& s : p["steps"]) y = apply_view(s, y);
    return {y * xs[1]};
  }
  if (op == "gather") return {gather(xs[0], p["dim"], xs[1])};
  if (op == "addcmul") return {addcmul(xs[0], xs[1], xs[2], p["value"].get<double>())};
  if (op == "to") return {xs[0].to(dtype_from(p["dtype"]))};
  throw std::runtime_error("fixture: unknown op " + op);
}

// ---- comparison ----
// Orders 16-bit float patterns so that adjacent values differ by 1 (sign-magnitude -> integer).
int32_t ordered16(uint16_t b) { return (b & 0x8000u) ? -static_cast<int32_t>(b & 0x7FFFu) : static_cast<int32_t>(b); }

uint16_t bits16(double v, DType dt) {
  const float f = static_cast<float>(v);  // exact: v came from a 16-bit value
  return dt == DType::Float16 ? float_to_half_bits(f) : float_to_bfloat16_bits(f);
}

struct Tolerance {
  double rtol;  // f32 / f64
  int ulps16;   // f16 / bf16
};

// See the derivation at the top of the file.
Tolerance tolerance_for(const json& c, DType dt) {
  const std::string family = c["family"], op = c["op"];
  const double k = static_cast<double>(std::max<int64_t>(1, c["k"].get<int64_t>()));
  if (dt == DType::Int64) return {0, 0};
  const bool transcendental = family == "unary" || family == "pow";
  if (dt == DType::Float64) return {1e-12, 0};
  if (dt == DType::Float32) return {(transcendental ? 16.0 : 4.0) * k * 0x1p-23, 0};
  const bool exact16 = op == "add" || op == "mul" || op == "add_scalar" || op == "mul_scalar" || op == "to";
  return {0, exact16 ? 0 : 1};
}

// Compares got against the encoded reference `ref`; `what` names it in failures.
void expect_matches(const Tensor& got, const json& ref, const json& c, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << ": mixtape produced no tensor";
  const DType dt = dtype_from(ref["dtype"]);
  const IntList shape = int_list(ref["shape"]);
  ASSERT_EQ(got.dtype(), dt) << what << ": dtype";
  ASSERT_EQ(shape_str(got.sizes()), shape_str(shape)) << what << ": shape";
  const std::vector<double> want = values_of(ref);
  ASSERT_EQ(static_cast<int64_t>(want.size()), got.numel()) << what;
  const Tolerance tol = tolerance_for(c, dt);
  double scale = 0;
  for (double w : want)
    if (std::isfinite(w)) scale = std::max(scale, std::abs(w));
  int failures = 0;
  double worst = 0;  // in units of the tolerance
  std::ostringstream first;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = get_element(got, static_cast<int64_t>(i)), w = want[i];
    bool ok;
    double ratio = 0;
    if (dt == DType::Int64) {
      ok = g == w;
    } else if (dt == DType::Float16 || dt == DType::BFloat16) {
      const uint16_t gb = bits16(g, dt), wb = ref["data"][i].get<uint16_t>();
      if (std::isnan(w)) {
        ok = std::isnan(g);
      } else {
        const int d = std::abs(ordered16(gb) - ordered16(wb));
        ok = d <= tol.ulps16;
        ratio = tol.ulps16 ? static_cast<double>(d) / tol.ulps16 : d;
      }
    } else if (!std::isfinite(w)) {
      ok = std::isnan(w) ? std::isnan(g) : g == w;
    } else {
      const double bound = tol.rtol * (std::abs(w) + scale);
      ok = std::abs(g - w) <= bound;
      ratio = bound > 0 ? std::abs(g - w) / bound : (g == w ? 0 : INFINITY);
    }
    worst = std::max(worst, ratio);
    if (!ok && failures++ == 0) {
      first << "element " << i << ": got " << std::hexfloat << g << " (" << std::defaultfloat << g << "), torch "
            << std::hexfloat << w << " (" << std::defaultfloat << w << ")";
      if (dt == DType::Float16 || dt == DType::BFloat16)
        first << " bits got 0x" << std::hex << bits16(g, dt) << " torch 0x" << ref["data"][i].get<uint16_t>()
              << std::dec;
    }
  }
  EXPECT_EQ(failures, 0) << what << " (" << dtype_name(dt) << " " << shape_str(shape) << ", rtol " << tol.rtol
                         << ", ulps16 " << tol.ulps16 << "): " << failures << " of " << want.size()
                         << " elements differ; first: " << first.str() << "; worst |diff|/tol = " << worst;
  ::testing::Test::RecordProperty(what + "_worst_over_tol", std::to_string(worst));
  if (std::getenv("MT_TORCH_VERBOSE"))
    std::printf("  %-40s %-18s worst/tol %.3g\n", c["name"].get<std::string>().c_str(), what.c_str(), worst);
}

void run_case(const json& c) {
  const std::string name = c["name"];
  if (auto it = known_bugs().find(name); it != known_bugs().end()) GTEST_SKIP() << "KNOWN BUG: " << it->second;
  SCOPED_TRACE("case " + name + " (op " + c["op"].get<std::string>() + ", reference " +
               c["reference"].get<std::string>() + ")");
  const bool with_grad = c.contains("grads");
  TensorList xs;
  for (const json& in : c["inputs"]) {
    Tensor x = decode(in);
    if (with_grad && x.is_floating_point()) x.requires_grad_(true);
    xs.push_back(x);
  }
  TensorList outs = apply(c["op"], c["params"], xs);
  ASSERT_EQ(outs.size(), c["outputs"].size()) << "number of outputs";
  for (size_t i = 0; i < outs.size(); ++i) expect_matches(outs[i], c["outputs"][i], c, "output " + std::to_string(i));
  if (!with_grad) return;

  Tensor loss;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (c["weights"][i].is_null()) continue;
    Tensor term = (outs[i] * decode(c["weights"][i])).sum();
    loss = loss.defined() ? loss + term : term;
  }
  ASSERT_TRUE(loss.defined());
  loss.backward();
  for (size_t i = 0; i < xs.size(); ++i) {
    if (c["grads"][i].is_null()) continue;
    expect_matches(xs[i].grad(), c["grads"][i], c, "grad of input " + std::to_string(i));
  }
}

// ---- one suite per op family ----
class TorchCase : public ::testing::TestWithParam<Case> {};

#define MT_TORCH_FAMILY(Suite, family)                           \
  class Suite : public TorchCase {};                             \
  TEST_P(Suite, MatchesTorch) { run_case(*GetParam().j); }       \
  INSTANTIATE_TEST_SUITE_P(Fixture, Suite, ::testing::ValuesIn(cases_of(family)), case_name); \
  GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Suite)

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

// The fixture loads, and every family above has cases (an empty family would pass vacuously).
TEST(TorchFixture, LoadsAndCoversEveryFamily) {
  ASSERT_TRUE(fixture().error.empty()) << fixture().error;
  for (const char* family :
       {"binary", "unary", "pow", "sum", "mean", "amax", "max", "matmul", "views", "gather", "cast", "half", "addcmul"})
    EXPECT_FALSE(cases_of(family).empty()) << "no cases for family " << family;
  std::map<std::string, int> seen;
  for (const json& c : fixture().doc["cases"]) ++seen[c["name"].get<std::string>()];
  for (const auto& [name, n] : seen) EXPECT_EQ(n, 1) << "duplicate case name " << name;
  for (const auto& [name, why] : known_bugs()) EXPECT_EQ(seen.count(name), 1u) << "known bug for missing case " << name;
}

}  // namespace
}  // namespace mixtape
