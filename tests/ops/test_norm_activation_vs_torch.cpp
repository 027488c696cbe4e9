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
// margins (at the time of writing: <= 0.07 for f32, <= 3e-4 for f64, 0 ulp for every 16-bit case).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mixtape/mixtape.h"
#include "ops/activation.h"
#include "ops/normalization.h"

namespace mixtape {
namespace {

using nlohmann::json;

std::string fixture_path() {
  std::string here = __FILE__;
  return here.substr(0, here.find_last_of("/\\")) + "/../fixtures/norm_activation.json";
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
      r.error = "cannot open " + fixture_path() + " (run /usr/bin/python3 tests/fixtures/gen_norm_activation.py)";
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
void PrintTo(const Case& c, std::ostream* os) { *os << c.name(); }

// ---- decoding ----
DType dtype_from(const std::string& s) {
  if (s == "f64") return DType::Float64;
  if (s == "f32") return DType::Float32;
  if (s == "f16") return DType::Float16;
  if (s == "bf16") return DType::BFloat16;
  if (s == "bool") return DType::Bool;
  throw std::runtime_error("fixture: unknown dtype " + s);
}

double hex_double(const json& v) { return std::strtod(v.get<std::string>().c_str(), nullptr); }

std::vector<double> values_of(const json& t) {
  const DType dt = dtype_from(t["dtype"]);
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

Tensor decode(const json& t) {
  if (t.is_null()) return Tensor();
  return tensor(values_of(t), IntList(t["shape"].get<std::vector<int64_t>>()), TensorOptions(dtype_from(t["dtype"])));
}

std::optional<double> opt_hex(const json& v) {
  return v.is_null() ? std::nullopt : std::optional<double>(hex_double(v));
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
int32_t ordered16(uint16_t b) { return (b & 0x8000u) ? -static_cast<int32_t>(b & 0x7FFFu) : static_cast<int32_t>(b); }
uint16_t bits16(double v, DType dt) {
  const float f = static_cast<float>(v);  // exact: v came from a 16-bit value
  return dt == DType::Float16 ? float_to_half_bits(f) : float_to_bfloat16_bits(f);
}
// The spacing of 16-bit values at |v| (the larger one at a binade boundary).
double ulp16(double v, DType dt) {
  const int mant = dt == DType::Float16 ? 10 : 7;
  const int min_exp = dt == DType::Float16 ? -14 : -126;
  const double a = std::abs(v);
  const int e = a > 0 ? std::max(static_cast<int>(std::floor(std::log2(a))), min_exp) : min_exp;
  return std::ldexp(1.0, e - mant);
}

struct Tolerance {
  double rtol;  // f32 / f64; for 16-bit normalisations the absolute-floor clause (see the top)
  int ulps16;   // f16 / bf16
};

Tolerance tolerance_for(const json& c, DType dt) {
  const std::string op = c["op"];
  const double k = static_cast<double>(std::max<int64_t>(1, c["k"].get<int64_t>()));
  const double rtol32 = (op == "gelu" ? 16.0 : 4.0) * k * 0x1p-23;
  if (dt == DType::Float64) return {1e-12, 0};
  if (dt == DType::Float32) return {rtol32, 0};
  if (op == "batch_norm" || op == "layer_norm") return {rtol32, 1};
  return {0, op == "gelu" ? 1 : 0};
}

void expect_matches(const Tensor& got, const json& ref, const json& c, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << ": mixtape produced no tensor";
  const DType dt = dtype_from(ref["dtype"]);
  const IntList shape(ref["shape"].get<std::vector<int64_t>>());
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
    if (dt == DType::Bool) {
      ok = g == w;
    } else if (dt == DType::Float16 || dt == DType::BFloat16) {
      const int d = std::abs(ordered16(bits16(g, dt)) - ordered16(ref["data"][i].get<uint16_t>()));
      if (std::isnan(w)) {
        ok = std::isnan(g);
      } else {
        ok = d <= tol.ulps16;
        ratio = tol.ulps16 ? static_cast<double>(d) / tol.ulps16 : d;
        if (!ok && tol.rtol > 0) {
          const double bound = ulp16(std::max(std::abs(g), std::abs(w)), dt) + tol.rtol * (std::abs(w) + scale);
          ok = std::abs(g - w) <= bound;
          ratio = std::abs(g - w) / bound;
        }
      }
    } else if (!std::isfinite(w)) {
      ok = std::isnan(w) ? std::isnan(g) : g == w;
    } else {
      const double bound = tol.rtol * (std::abs(w) + scale);
      ok = std::abs(g - w) <= bound;
      ratio = bound > 0 ? std::abs(g - w) / bound : (g == w ? 0 : INFINITY);
    }
    worst = std::max(worst, ratio);
    if (!ok && failures++ == 0)
      first << "element " << i << ": got " << std::hexfloat << g << " (" << std::defaultfloat << g << "), torch "
            << std::hexfloat << w << " (" << std::defaultfloat << w << ")";
  }
  EXPECT_EQ(failures, 0) << what << " (" << dtype_name(dt) << " " << shape_str(shape) << ", rtol " << tol.rtol
                         << ", ulps16 " << tol.ulps16 << "): " << failures << " of " << want.size()
                         << " elements differ; first: " << first.str() << "; worst |diff|/tol = " << worst;
  if (std::getenv("MT_TORCH_VERBOSE"))
    std::printf("  %-44s %-22s worst/tol %.3g\n", c["name"].get<std::string>().c_str(), what.c_str(), worst);
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
  (out * decode(c["weights"][0])).sum().backward();
  for (size_t i = 0; i < xs.size(); ++i) {
    if (c["grads"][i].is_null()) continue;
    expect_matches(xs[i].grad(), c["grads"][i], c, "grad of input " + std::to_string(i));
  }
}

class NormTorchCase : public ::testing::TestWithParam<Case> {};

#define MT_NORM_TORCH_FAMILY(Suite, family)                                                 \
  class Suite : public NormTorchCase {};                                                    \
  TEST_P(Suite, MatchesTorch) { run_case(*GetParam().j); }                                  \
  INSTANTIATE_TEST_SUITE_P(Fixture, Suite, ::testing::ValuesIn(cases_of(family)), case_name); \
  GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Suite)

MT_NORM_TORCH_FAMILY(NormActTorchActivation, "pointwise");  // gelu (none, tanh), leaky_relu, clamp
MT_NORM_TORCH_FAMILY(NormActTorchWhere, "where");           // broadcast cond (3,1) with (2,3,4) and (4)
MT_NORM_TORCH_FAMILY(NormActTorchBatchNorm, "batch_norm");  // train / eval, affine or not, (N,C) / (N,C,H,W)
MT_NORM_TORCH_FAMILY(NormActTorchLayerNorm, "layer_norm");  // 1 and 2 trailing dims, affine or not
MT_NORM_TORCH_FAMILY(NormActTorchNormHalf, "half");         // f16 / bf16 forward, batch_norm with f32 params

TEST(NormActTorchFixture, LoadsAndCoversEveryFamily) {
  ASSERT_TRUE(fixture().error.empty()) << fixture().error;
  for (const char* family : {"pointwise", "where", "batch_norm", "layer_norm", "half"})
    EXPECT_FALSE(cases_of(family).empty()) << "no cases for family " << family;
  std::map<std::string, int> seen;
  for (const json& c : fixture().doc["cases"]) ++seen[c["name"].get<std::string>()];
  for (const auto& [name, n] : seen) EXPECT_EQ(n, 1) << "duplicate case name " << name;
}

}  // namespace
}  // namespace mixtape
