// tests/common/torch_fixture.h — the PyTorch reference fixtures as the *_vs_torch tests read them:
// loading tests/fixtures/<file>.json (written by tests/fixtures/gen_*.py), decoding its tensors and
// typed attributes, a registry call from a fixture entry, and the element-wise comparison every
// such test makes. Header-only (tests/CMakeLists.txt compiles tests/<layer>/*.cpp, nothing here).
//
// Invariants. Decoding is exact: f64/f32 values are hex-float strings (strtod reads them back
// exactly), f16/bf16 values their 16-bit patterns, i64/bool JSON integers, so every difference a
// comparison sees is one of arithmetic. A fixture that fails to load yields no cases and an error
// string, which each test's LoadsAndCovers... check reports (gtest would otherwise pass an empty
// suite). The tolerances are derived in each test's header; this file only applies them.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <ostream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mixtape/mixtape.h"

namespace mixtape::testing {

using nlohmann::json;

// ---- the fixture file ----
// tests/fixtures/<file>, found from this header's own path (the tests run from any directory).
inline std::string torch_fixture_path(const std::string& file) {
  std::string here = __FILE__;
  return here.substr(0, here.find_last_of("/\\")) + "/../fixtures/" + file;
}

// One case of a fixture (an element of doc["cases"]); the gtest parameter of the *_vs_torch suites.
struct FixtureCase {
  const json* j;
  std::string name() const { return (*j)["name"].get<std::string>(); }
};
inline std::string fixture_case_name(const ::testing::TestParamInfo<FixtureCase>& info) { return info.param.name(); }
inline void PrintTo(const FixtureCase& c, std::ostream* os) { *os << c.name(); }  // the case, not its bytes

struct TorchFixture {
  json doc;
  std::string error;  // why loading failed; empty on success

  // file: the JSON under tests/fixtures; generator: the script that writes it (named in the error).
  TorchFixture(const std::string& file, const std::string& generator) {
    const std::string path = torch_fixture_path(file);
    std::ifstream in(path);
    if (!in) {
      error = "cannot open " + path + " (run /usr/bin/python3 tests/fixtures/" + generator + ")";
      return;
    }
    try {
      doc = json::parse(in);
    } catch (const std::exception& e) {
      error = "cannot parse " + path + ": " + e.what();
    }
  }

  // The cases whose string field `key` ("family", "op") is `value`, in file order.
  std::vector<FixtureCase> cases_where(const std::string& key, const std::string& value) const {
    std::vector<FixtureCase> out;
    if (!error.empty()) return out;
    for (const json& c : doc["cases"])
      if (c.value(key, std::string()) == value) out.push_back(FixtureCase{&c});
    return out;
  }
  // The cases whose `key` is none of `values` (a suite for whatever the listed suites leave).
  std::vector<FixtureCase> cases_not_in(const std::string& key, const std::set<std::string>& values) const {
    std::vector<FixtureCase> out;
    if (!error.empty()) return out;
    for (const json& c : doc["cases"])
      if (!values.count(c.value(key, std::string()))) out.push_back(FixtureCase{&c});
    return out;
  }
  // How often each case name occurs (a duplicate would shadow a case in gtest's list).
  std::map<std::string, int> name_counts() const {
    std::map<std::string, int> seen;
    if (error.empty())
      for (const json& c : doc["cases"]) ++seen[c["name"].get<std::string>()];
    return seen;
  }
};

// One parameterised gtest suite over `cases` (a std::vector<FixtureCase>), one test per case named
// after it, each running run(const json& case).
#define MT_TORCH_FIXTURE_SUITE(Suite, cases, run)                                           \
  class Suite : public ::testing::TestWithParam<::mixtape::testing::FixtureCase> {};        \
  TEST_P(Suite, MatchesTorch) { run(*GetParam().j); }                                        \
  INSTANTIATE_TEST_SUITE_P(Fixture, Suite, ::testing::ValuesIn(cases),                       \
                           ::mixtape::testing::fixture_case_name);                          \
  GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Suite)

// The values (families, or ops) this test file's suites run, as MT_TORCH_SUITE_OF records them
// when it defines each suite: the file's coverage checks read this one list (the cases of a value
// no suite runs are an error there). One list per file: the unnamed namespace gives each
// translation unit its own.
namespace {
inline std::set<std::string>& suite_values() {
  static std::set<std::string> values;
  return values;
}
}  // namespace

// The suite of one value's cases, cases_of(value) run through run(const json&), the value
// recorded in suite_values().
#define MT_TORCH_SUITE_OF(Suite, value, cases_of, run)                                                      \
  [[maybe_unused]] const bool Suite##_listed = ::mixtape::testing::suite_values().insert(value).second; \
  MT_TORCH_FIXTURE_SUITE(Suite, cases_of(value), run)

// ---- decoding ----
inline DType fixture_dtype(const std::string& s) {
  if (s == "f64") return DType::Float64;
  if (s == "f32") return DType::Float32;
  if (s == "f16") return DType::Float16;
  if (s == "bf16") return DType::BFloat16;
  if (s == "i64") return DType::Int64;
  if (s == "bool") return DType::Bool;
  throw std::runtime_error("fixture: unknown dtype " + s);
}
inline double hex_double(const json& v) { return std::strtod(v.get<std::string>().c_str(), nullptr); }
inline IntList int_list(const json& v) { return IntList(v.get<std::vector<int64_t>>()); }

// An encoded tensor's logical values, as doubles (exact for every dtype stored).
inline std::vector<double> values_of(const json& t) {
  const DType dt = fixture_dtype(t["dtype"]);
  std::vector<double> v;
  v.reserve(t["data"].size());
  for (const json& e : t["data"]) {
    if (dt == DType::Float64 || dt == DType::Float32)
      v.push_back(hex_double(e));
    else if (dt == DType::Float16)
      v.push_back(static_cast<float>(Half::from_bits(e.get<uint16_t>())));
    else if (dt == DType::BFloat16)
      v.push_back(static_cast<float>(BFloat16::from_bits(e.get<uint16_t>())));
    else
      v.push_back(static_cast<double>(e.get<int64_t>()));  // i64, bool (0 / 1)
  }
  return v;
}

// A leaf tensor from its encoding. null: an undefined tensor (an absent optional input).
// {"scalar": hex}: a wrapped number, what mixtape's operators make of a double (x + 0.5).
// "layout": "transposed": stored by its logical values; rebuilt as torch's .t() view (a
// non-contiguous leaf) so the kernels' strided paths are what gets compared.
inline Tensor decode(const json& t) {
  if (t.is_null()) return Tensor();
  if (t.contains("scalar")) return wrapped_scalar(Scalar(hex_double(t["scalar"])));
  const DType dt = fixture_dtype(t["dtype"]);
  const IntList sizes = int_list(t["shape"]);
  const std::vector<double> v = values_of(t);
  if (t.value("layout", std::string()) == "transposed") {
    const int64_t r = sizes[0], c = sizes[1];
    std::vector<double> tv(v.size());
    for (int64_t i = 0; i < r; ++i)
      for (int64_t k = 0; k < c; ++k) tv[static_cast<size_t>(k * r + i)] = v[static_cast<size_t>(i * c + k)];
    Tensor x = tensor(tv, {c, r}, TensorOptions(dt)).t().detach();
    EXPECT_FALSE(x.is_contiguous());
    return x;
  }
  return tensor(v, sizes, TensorOptions(dt));
}

// Attributes typed as core/attrs.h's AttrValue alternatives: {"dim": {"int64_t": 1},
// "exponent": {"double": "0x1p+1"}, "keepdim": {"bool": false}, "dims": {"IntList": [0, 2]},
// "dtype": {"DType": "f16"}}. Attrs keeps its names as const char*: they are interned here for the
// whole run (autograd nodes copy a call's Attrs and may outlive the json they came from).
inline const char* interned_attr_name(const std::string& name) {
  static std::set<std::string> names;
  return names.insert(name).first->c_str();
}
inline Attrs decode_attrs(const json& a) {
  Attrs out;
  if (a.is_null()) return out;
  for (const auto& [name, typed] : a.items()) {
    if (!typed.is_object() || typed.size() != 1)
      throw std::runtime_error("fixture: attr '" + name + "' is not {type: value}: " + typed.dump());
    const std::string& type = typed.begin().key();
    const json& v = typed.begin().value();
    const char* n = interned_attr_name(name);
    if (type == "int64_t")
      out.set(n, v.get<int64_t>());
    else if (type == "double")
      out.set(n, hex_double(v));
    else if (type == "bool")
      out.set(n, v.get<bool>());
    else if (type == "IntList")
      out.set(n, int_list(v));
    else if (type == "DType")
      out.set(n, fixture_dtype(v.get<std::string>()));
    else
      throw std::runtime_error("fixture: attr '" + name + "' has unknown type " + type);
  }
  return out;
}

// dispatch(find_op(call["op"]), inputs, call["attrs"]): the registry entry a fixture call names.
inline TensorList dispatch_fixture_op(const json& call, const TensorList& inputs) {
  const std::string name = call["op"];
  const OpSchema* op = find_op(name);
  if (!op) throw std::runtime_error("fixture: no op '" + name + "' in the registry");
  return dispatch(*op, inputs, decode_attrs(call.value("attrs", json())));
}

// ---- comparison ----
// Orders 16-bit float patterns so that adjacent values differ by 1 (sign-magnitude -> integer).
inline int32_t ordered16(uint16_t b) {
  return (b & 0x8000u) ? -static_cast<int32_t>(b & 0x7FFFu) : static_cast<int32_t>(b);
}
inline uint16_t bits16(double v, DType dt) {
  const float f = static_cast<float>(v);  // exact: v came from a 16-bit value
  return dt == DType::Float16 ? float_to_half_bits(f) : float_to_bfloat16_bits(f);
}
// The spacing of 16-bit values at magnitude |v| (subnormal spacing below the normal range); at a
// binade boundary, the spacing above it. ilogb is exact where floor(log2(v)) may round up.
inline double ulp16(double v, DType dt) {
  const int mantissa_bits = dt == DType::Float16 ? 10 : 7, min_exp = dt == DType::Float16 ? -14 : -126;
  const int e = v == 0 ? min_exp : std::max(min_exp, std::ilogb(v));
  return std::ldexp(1.0, e - mantissa_bits);
}

// What one comparison allows; every field defaults to "exactly equal". The derivations are in the
// test files' headers. Element i with got g, reference w, scale = max_j |w_j| (finite ones):
//   integer, bool:  g == w.
//   f64 / f32:      |g - w| <= rtol (|w| + scale) + abs[i]   (a non-finite w: the same NaN / inf).
//   f16 / bf16:     the bit patterns are at most ulps16 apart (adjacent values differ by 1; a NaN w
//                   needs a NaN); failing that, when rtol > 0 or abs is given,
//                   |g - w| <= ulp16(max(|g|, |w|)) + rtol (|w| + scale) + abs[i].
//                   exact_bits16: "0 apart" means the same pattern (+0 and -0 differ, as do NaNs).
struct Tolerance {
  double rtol = 0;
  const std::vector<double>* abs = nullptr;  // per-element absolute bounds; null: none
  int ulps16 = 0;
  bool exact_bits16 = false;
  std::string detail;  // shown in a failure (e.g. "k 144")
};

// Compares got against the encoded reference `ref`; `what` ("output 0") names it in failures,
// case_name in MT_TORCH_VERBOSE=1's line (every comparison's worst |diff| / tolerance, to
// re-check the margins).
inline void expect_matches(const Tensor& got, const json& ref, const Tolerance& tol, const std::string& what,
                           const std::string& case_name) {
  ASSERT_TRUE(got.defined()) << what << ": mixtape produced no tensor";
  const DType dt = fixture_dtype(ref["dtype"]);
  const IntList shape = int_list(ref["shape"]);
  ASSERT_EQ(got.dtype(), dt) << what << ": dtype";
  ASSERT_EQ(shape_str(got.sizes()), shape_str(shape)) << what << ": shape";
  const std::vector<double> want = values_of(ref);
  ASSERT_EQ(static_cast<int64_t>(want.size()), got.numel()) << what;
  if (tol.abs) {
    ASSERT_EQ(tol.abs->size(), want.size()) << what << ": error scale";
  }
  const bool is16 = dt == DType::Float16 || dt == DType::BFloat16;
  const bool is_float = is16 || dt == DType::Float32 || dt == DType::Float64;
  double scale = 0;
  for (double w : want)
    if (std::isfinite(w)) scale = std::max(scale, std::abs(w));
  int failures = 0;
  double worst = 0;  // in units of the tolerance
  size_t worst_i = 0;
  std::ostringstream first;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = get_element(got, static_cast<int64_t>(i)), w = want[i];
    const double extra = tol.abs ? (*tol.abs)[i] : 0.0;
    bool ok;
    double ratio = 0;
    if (!is_float) {
      ok = g == w;
      ratio = ok ? 0 : INFINITY;
    } else if (is16) {
      const uint16_t gb = bits16(g, dt), wb = ref["data"][i].get<uint16_t>();
      if (std::isnan(w) && !tol.exact_bits16) {
        ok = std::isnan(g);
        ratio = ok ? 0 : INFINITY;
      } else {
        int d = std::abs(ordered16(gb) - ordered16(wb));
        if (tol.exact_bits16 && gb != wb) d = std::max(d, 1);
        ok = d <= tol.ulps16;
        ratio = tol.ulps16 ? static_cast<double>(d) / tol.ulps16 : d;
        if (!ok && (tol.rtol > 0 || tol.abs)) {
          const double bound = ulp16(std::max(std::abs(g), std::abs(w)), dt) + tol.rtol * (std::abs(w) + scale) + extra;
          ok = std::abs(g - w) <= bound;
          ratio = std::abs(g - w) / bound;
        }
      }
    } else if (!std::isfinite(w)) {
      ok = std::isnan(w) ? std::isnan(g) : g == w;
      ratio = ok ? 0 : INFINITY;
    } else {
      const double bound = tol.rtol * (std::abs(w) + scale) + extra;
      ok = std::abs(g - w) <= bound;
      ratio = bound > 0 ? std::abs(g - w) / bound : (g == w ? 0 : INFINITY);
    }
    if (ratio > worst) {
      worst = ratio;
      worst_i = i;
    }
    if (!ok && failures++ == 0) {
      first << "element " << i << ": got " << std::hexfloat << g << " (" << std::defaultfloat << g << "), torch "
            << std::hexfloat << w << " (" << std::defaultfloat << w << ")";
      if (is16)
        first << " bits got 0x" << std::hex << bits16(g, dt) << " torch 0x" << ref["data"][i].get<uint16_t>()
              << std::dec;
    }
  }
  EXPECT_EQ(failures, 0) << what << " (" << dtype_name(dt) << " " << shape_str(shape) << ", rtol " << tol.rtol
                         << ", ulps16 " << tol.ulps16 << (tol.abs ? ", per-element bound" : "")
                         << (tol.detail.empty() ? "" : ", " + tol.detail) << "): " << failures << " of "
                         << want.size() << " elements differ; first: " << first.str()
                         << "; worst |diff|/tol = " << worst;
  ::testing::Test::RecordProperty(what + "_worst_over_tol", std::to_string(worst));
  if (std::getenv("MT_TORCH_VERBOSE"))
    std::printf("  %-44s %-22s worst/tol %.3g (element %zu: got %.9g, torch %.9g)\n", case_name.c_str(),
                what.c_str(), worst, worst_i, want.empty() ? 0.0 : get_element(got, static_cast<int64_t>(worst_i)),
                want.empty() ? 0.0 : want[worst_i]);
}

// Backpropagates  loss = sum_i (outs[i] * w_i).sum()  for the stored weights w_i (null: an output
// without one, e.g. indices), the loss every fixture's gradients are taken of.
inline void backward_weighted(const TensorList& outs, const json& weights) {
  ASSERT_EQ(outs.size(), weights.size()) << "one weight (or null) per output";
  Tensor loss;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (weights[i].is_null()) continue;
    Tensor term = (outs[i] * decode(weights[i])).sum();
    loss = loss.defined() ? loss + term : term;
  }
  ASSERT_TRUE(loss.defined()) << "no output has a weight";
  loss.backward();
}

}  // namespace mixtape::testing
