// tests/ops/test_conv_pool_linear_vs_torch.cpp — conv2d, linear, max_pool2d, avg_pool2d and
// adaptive_avg_pool2d against PyTorch's numbers (the second proof of every op; the first is
// the Float64 gradcheck in test_conv_pool_linear.cpp).
//
// Owns the comparison of every case in tests/fixtures/conv_pool_linear.json, which
// tests/fixtures/gen_conv_pool_linear.py writes with Debian's torch 1.13 (CPU). A case names an op
// with the arguments of mixtape's C++ API, its inputs, torch's outputs and, for f64/f32 cases, the
// gradients of  loss = sum_i (out_i * w_i).sum()  for stored weights w_i, plus for every compared
// tensor its error scale S (per element: the sum of |terms| behind it, from the same op on |inputs|
// in f64) and k (the most terms any element sums). Values are stored exactly (hex floats, 16-bit
// bit patterns). Regenerate with
//   /usr/bin/python3 tests/fixtures/gen_conv_pool_linear.py
//
// ---- Tolerances, derived ----
// f64 / f32, outputs and gradients: element i passes when
//     |got_i - torch_i| <= 8 sqrt(k) eps S_i        (eps = 2^-52 for f64, 2^-23 for f32)
// Every value here is a sum of k terms (conv/linear: products, a GEMM inner product or a gradient
// summed over the batch and the output pixels; pooling: window values, then one division), which
// each side adds in its own order (torch: mkldnn / its own im2col and GEMM; mixtape: OpenBLAS),
// rounding each partial sum, itself at most S_i, to within u S_i (u = eps / 2). Worst case that is
// k u S_i per side, but rounding errors behave as independent zero-mean variables, and the
// probabilistic bound of Higham & Mary (SIAM J. Sci. Comput. 41(5), 2019) gives
// |error| <= lambda sqrt(k) u S_i per side except with probability <= 2k exp(-lambda^2 / 2). The
// two sides differ by at most twice that, lambda sqrt(k) eps S_i; lambda = 8 makes a false failure
// (probability ~ 1e-14 k per element) impossible in practice while staying sqrt(k) times tighter
// than the worst case — a wrong index, weight or window gives errors of order S_i, ~1e6 times
// (f32) above this. The final rounding of the result (<= u S_i) is inside the margin.
// max_pool2d moves values without arithmetic: its outputs are compared with the same formula at
// k = 1 (in practice they are equal), its gradients sum at most kH kW window contributions.
// f16 / bf16 forward cases compare with op(x.float()).to(dtype) (torch 1.13 has no f16 CPU conv):
//   max_pool2d: bit-exact (a selection: the f32 value is a 16-bit value, rounding is exact);
//   sums: the two f32 values differ by at most delta = 8 sqrt(k) 2^-23 S (the f32 bound above);
//   rounding each to the 16-bit type moves it by at most half a 16-bit ulp, so the results differ
//   by at most delta + ulp16 (the ulp at the larger magnitude). Without cancellation delta is far
//   below half an ulp (~1e-5 S for k <= 72, vs 2^-9 bf16 / 2^-12 f16 relative), which makes it
//   0 or 1 ulp; a sum that cancels to a small result can legitimately differ by a few of its ulps.
// i64 outputs (max_pool2d's indices) must be equal.
// MT_TORCH_VERBOSE=1 prints every comparison's worst |diff| / tolerance, to re-check the margins.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mixtape/mixtape.h"
#include "ops/conv.h"
#include "ops/linear.h"
#include "ops/pooling.h"

namespace mixtape {
namespace {

using nlohmann::json;

// ---- the fixture ----
std::string fixture_path() {
  std::string here = __FILE__;
  return here.substr(0, here.find_last_of("/\\")) + "/../fixtures/conv_pool_linear.json";
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
      r.error = "cannot open " + fixture_path() + " (run /usr/bin/python3 tests/fixtures/gen_conv_pool_linear.py)";
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

std::vector<Case> cases_of(const std::string& op) {
  std::vector<Case> out;
  const Fixture& f = fixture();
  if (!f.error.empty()) return out;
  for (const json& c : f.doc["cases"])
    if (c["op"] == op) out.push_back(Case{&c});
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
  if (s == "i64") return DType::Int64;
  throw std::runtime_error("fixture: unknown dtype " + s);
}

IntList ints(const json& v) { return IntList(v.get<std::vector<int64_t>>()); }

std::vector<double> values_of(const json& t) {
  DType dt = dtype_from(t["dtype"]);
  std::vector<double> v;
  v.reserve(t["data"].size());
  for (const json& e : t["data"]) {
    if (dt == DType::Float64 || dt == DType::Float32)
      v.push_back(std::strtod(e.get<std::string>().c_str(), nullptr));
    else if (dt == DType::Float16)
      v.push_back(static_cast<float>(Half::from_bits(e.get<uint16_t>())));
    else if (dt == DType::BFloat16)
      v.push_back(static_cast<float>(BFloat16::from_bits(e.get<uint16_t>())));
    else
      v.push_back(static_cast<double>(e.get<int64_t>()));
  }
  return v;
}

Tensor decode(const json& t) { return tensor(values_of(t), ints(t["shape"]), TensorOptions(dtype_from(t["dtype"]))); }

// ---- mixtape's side (the same calls as gen_conv_pool_linear.py's apply) ----
TensorList apply(const std::string& op, const json& p, const TensorList& xs) {
  const Tensor none;
  if (op == "conv2d") {
    Tensor x = p.value("transpose_input", false) ? xs[0].transpose(2, 3) : xs[0];
    return {conv2d(x, xs[1], xs.size() > 2 ? xs[2] : none, ints(p["stride"]), ints(p["padding"]), ints(p["dilation"]),
                   p["groups"].get<int64_t>())};
  }
  if (op == "linear") {
    Tensor w = p.value("transpose_weight", false) ? xs[1].t() : xs[1];
    return {linear(xs[0], w, xs.size() > 2 ? xs[2] : none)};
  }
  if (op == "max_pool2d") {
    auto [y, idx] = max_pool2d_with_indices(xs[0], ints(p["kernel_size"]), ints(p["stride"]), ints(p["padding"]),
                                            ints(p["dilation"]), p["ceil_mode"].get<bool>());
    return {y, idx};
  }
  if (op == "avg_pool2d")
    return {avg_pool2d(xs[0], ints(p["kernel_size"]), ints(p["stride"]), ints(p["padding"]), p["ceil_mode"].get<bool>(),
                       p["count_include_pad"].get<bool>())};
  if (op == "adaptive_avg_pool2d") return {adaptive_avg_pool2d(xs[0], ints(p["output_size"]))};
  throw std::runtime_error("fixture: unknown op " + op);
}

// ---- comparison (tolerances derived at the top of the file) ----
uint16_t bits16(double v, DType dt) {
  const float f = static_cast<float>(v);  // exact: v came from a 16-bit value
  return dt == DType::Float16 ? float_to_half_bits(f) : float_to_bfloat16_bits(f);
}

// The spacing of 16-bit values at magnitude |v| (subnormal spacing below the normal range).
double ulp16(double v, DType dt) {
  const int mantissa_bits = dt == DType::Float16 ? 10 : 7, min_exp = dt == DType::Float16 ? -14 : -126;
  const int e = v == 0 ? min_exp : std::max(min_exp, std::ilogb(v));
  return std::ldexp(1.0, e - mantissa_bits);
}

// scale: the f64 error scale tensor (null: compare exactly); k: its term count.
void expect_matches(const Tensor& got, const json& ref, const json* scale, int64_t k, const std::string& what,
                    const std::string& case_name) {
  ASSERT_TRUE(got.defined()) << what << ": mixtape produced no tensor";
  const DType dt = dtype_from(ref["dtype"]);
  ASSERT_EQ(got.dtype(), dt) << what << ": dtype";
  ASSERT_EQ(shape_str(got.sizes()), shape_str(ints(ref["shape"]))) << what << ": shape";
  const std::vector<double> want = values_of(ref);
  const std::vector<double> s = scale ? values_of(*scale) : std::vector<double>();
  const double eps = dt == DType::Float64 ? 0x1p-52 : 0x1p-23;  // 16-bit: the f32 they are computed in
  const double factor = 8.0 * std::sqrt(static_cast<double>(std::max<int64_t>(k, 1))) * eps;
  Tensor g = got.contiguous();
  int failures = 0;
  double worst = 0;
  size_t worst_i = 0;
  std::ostringstream first;
  for (size_t i = 0; i < want.size(); ++i) {
    const double gv = get_element(g, static_cast<int64_t>(i)), wv = want[i];
    bool ok;
    double ratio = 0;
    if (dt == DType::Int64) {
      ok = gv == wv;
      ratio = ok ? 0 : INFINITY;
    } else if (dt == DType::Float16 || dt == DType::BFloat16) {
      const bool same_bits = bits16(gv, dt) == ref["data"][i].get<uint16_t>();
      const double diff = std::abs(gv - wv);
      const double tol = s.empty() ? 0 : factor * s.at(i) + ulp16(std::max(std::abs(gv), std::abs(wv)), dt);
      ok = same_bits || diff <= tol;
      ratio = same_bits ? 0 : tol > 0 ? diff / tol : INFINITY;
    } else if (s.empty()) {
      ok = gv == wv;
      ratio = ok ? 0 : INFINITY;
    } else {
      const double tol = factor * s.at(i);
      const double diff = std::abs(gv - wv);
      ok = diff <= tol;
      ratio = tol > 0 ? diff / tol : (diff == 0 ? 0 : INFINITY);
    }
    if (ratio > worst) {
      worst = ratio;
      worst_i = i;
    }
    if (!ok && failures++ == 0)
      first << "element " << i << ": got " << std::hexfloat << gv << " (" << std::defaultfloat << gv << "), torch "
            << std::hexfloat << wv << " (" << std::defaultfloat << wv << ")";
  }
  EXPECT_EQ(failures, 0) << what << " (" << dtype_name(dt) << " " << shape_str(got.sizes()) << ", k " << k << "): "
                         << failures << " of " << want.size() << " elements differ; first: " << first.str()
                         << "; worst |diff|/tol = " << worst;
  if (std::getenv("MT_TORCH_VERBOSE"))
    std::printf("  %-36s %-16s worst/tol %.3g (element %zu: got %.9g, torch %.9g)\n", case_name.c_str(), what.c_str(),
                worst, worst_i, get_element(g, static_cast<int64_t>(worst_i)), want.empty() ? 0.0 : want[worst_i]);
}

void run_case(const json& c) {
  const std::string name = c["name"], op = c["op"];
  SCOPED_TRACE("case " + name + " (op " + op + ", reference " + c["reference"].get<std::string>() + ")");
  const bool with_grad = c["reference"] == "torch";
  TensorList xs;
  for (const json& in : c["inputs"]) {
    Tensor x = decode(in);
    if (with_grad) x.requires_grad_(true);
    xs.push_back(x);
  }
  TensorList outs = apply(op, c["params"], xs);
  ASSERT_EQ(outs.size(), c["outputs"].size()) << "number of outputs";
  for (size_t i = 0; i < outs.size(); ++i) {
    // max_pool2d's 16-bit values and every index compare exactly (no scale).
    const json& sc = c["output_scales"][i];
    const bool exact = sc.is_null() || (op == "max_pool2d" && !with_grad);
    expect_matches(outs[i], c["outputs"][i], exact ? nullptr : &sc, c["k_out"][std::min<size_t>(i, c["k_out"].size() - 1)],
                   "output " + std::to_string(i), name);
  }
  if (!with_grad) return;
  Tensor loss;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (c["weights"][i].is_null()) continue;
    Tensor term = (outs[i] * decode(c["weights"][i])).sum();
    loss = loss.defined() ? loss + term : term;
  }
  ASSERT_TRUE(loss.defined());
  loss.backward();
  for (size_t i = 0; i < xs.size(); ++i)
    expect_matches(xs[i].grad(), c["grads"][i], &c["grad_scales"][i], c["k_grad"][i], "grad of input " + std::to_string(i),
                   name);
}

// ---- one suite per op ----
class TorchCase : public ::testing::TestWithParam<Case> {};

#define MT_TORCH_OP(Suite, op)                                                              \
  class Suite : public TorchCase {};                                                        \
  TEST_P(Suite, MatchesTorch) { run_case(*GetParam().j); }                                  \
  INSTANTIATE_TEST_SUITE_P(Fixture, Suite, ::testing::ValuesIn(cases_of(op)), case_name);   \
  GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Suite)

MT_TORCH_OP(TorchConv2d, "conv2d");                     // stride, padding, dilation, groups, 1x1, no bias,
                                                        // transposed input, unbatched, batch-parallel path
MT_TORCH_OP(TorchLinear, "linear");                     // 1-D, 2-D, 3-D, no bias, transposed weight, K = 64
MT_TORCH_OP(TorchMaxPool2d, "max_pool2d");              // values, indices, gradients; ceil_mode, dilation
MT_TORCH_OP(TorchAvgPool2d, "avg_pool2d");              // count_include_pad on/off, ceil_mode, padding
MT_TORCH_OP(TorchAdaptiveAvgPool2d, "adaptive_avg_pool2d");  // down, up, global, identity, unbatched

TEST(TorchConvPoolLinearFixture, LoadsAndCoversEveryOp) {
  ASSERT_TRUE(fixture().error.empty()) << fixture().error;
  for (const char* op : {"conv2d", "linear", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"}) {
    EXPECT_FALSE(cases_of(op).empty()) << "no cases for " << op;
    bool has16 = false;
    for (const Case& c : cases_of(op)) has16 = has16 || (*c.j)["reference"] == "torch_f32_round_once";
    EXPECT_TRUE(has16) << "no 16-bit case for " << op;
  }
  std::map<std::string, int> seen;
  for (const json& c : fixture().doc["cases"]) ++seen[c["name"].get<std::string>()];
  for (const auto& [name, n] : seen) EXPECT_EQ(n, 1) << "duplicate case name " << name;
}

}  // namespace
}  // namespace mixtape
