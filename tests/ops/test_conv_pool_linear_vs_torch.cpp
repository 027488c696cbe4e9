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
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/torch_fixture.h"
#include "mixtape/mixtape.h"
#include "ops/conv.h"
#include "ops/linear.h"
#include "ops/pooling.h"

namespace mixtape {
namespace {

using nlohmann::json;
using testing::decode;
using testing::fixture_dtype;
using testing::FixtureCase;
constexpr auto& ints = testing::int_list;

const testing::TorchFixture& fixture() {
  static const testing::TorchFixture f("conv_pool_linear.json", "gen_conv_pool_linear.py");
  return f;
}
std::vector<FixtureCase> cases_of(const std::string& op) { return fixture().cases_where("op", op); }

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
// scale: the f64 error scale tensor (null: compare exactly); k: its term count. The bound per
// element is 8 sqrt(k) eps S_i; a 16-bit value passes with the same bits or within that bound
// plus one 16-bit ulp; no scale means the same value (the same bits for 16-bit values).
void expect_matches(const Tensor& got, const json& ref, const json* scale, int64_t k, const std::string& what,
                    const std::string& case_name) {
  const DType dt = fixture_dtype(ref["dtype"]);
  const double eps = dt == DType::Float64 ? 0x1p-52 : 0x1p-23;  // 16-bit: the f32 they are computed in
  const double factor = 8.0 * std::sqrt(static_cast<double>(std::max<int64_t>(k, 1))) * eps;
  std::vector<double> bounds;
  if (scale)
    for (double s : testing::values_of(*scale)) bounds.push_back(factor * s);
  testing::Tolerance tol{.abs = scale ? &bounds : nullptr, .exact_bits16 = true, .detail = "k " + std::to_string(k)};
  testing::expect_matches(got, ref, tol, what, case_name);
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
  testing::backward_weighted(outs, c["weights"]);
  for (size_t i = 0; i < xs.size(); ++i)
    expect_matches(xs[i].grad(), c["grads"][i], &c["grad_scales"][i], c["k_grad"][i], "grad of input " + std::to_string(i),
                   name);
}

// ---- one suite per op ----
#define MT_TORCH_OP(Suite, op) MT_TORCH_SUITE_OF(Suite, op, cases_of, run_case)

MT_TORCH_OP(TorchConv2d, "conv2d");                     // stride, padding, dilation, groups, 1x1, no bias,
                                                        // transposed input, unbatched, batch-parallel path
MT_TORCH_OP(TorchLinear, "linear");                     // 1-D, 2-D, 3-D, no bias, transposed weight, K = 64
MT_TORCH_OP(TorchMaxPool2d, "max_pool2d");              // values, indices, gradients; ceil_mode, dilation
MT_TORCH_OP(TorchAvgPool2d, "avg_pool2d");              // count_include_pad on/off, ceil_mode, padding
MT_TORCH_OP(TorchAdaptiveAvgPool2d, "adaptive_avg_pool2d");  // down, up, global, identity, unbatched

TEST(TorchConvPoolLinearFixture, LoadsAndCoversEveryOp) {
  ASSERT_TRUE(fixture().error.empty()) << fixture().error;
  for (const std::string& op : testing::suite_values()) {
    EXPECT_FALSE(cases_of(op).empty()) << "no cases for " << op;
    bool has16 = false;
    for (const FixtureCase& c : cases_of(op)) has16 = has16 || (*c.j)["reference"] == "torch_f32_round_once";
    EXPECT_TRUE(has16) << "no 16-bit case for " << op;
  }
  // A case of an op no suite above runs would be skipped without a word.
  for (const FixtureCase& c : fixture().cases_not_in("op", testing::suite_values()))
    ADD_FAILURE() << "case " << (*c.j)["name"] << " has op " << (*c.j).value("op", std::string()) << ", which no suite of this file runs";
  for (const auto& [name, n] : fixture().name_counts()) EXPECT_EQ(n, 1) << "duplicate case name " << name;
}

}  // namespace
}  // namespace mixtape
