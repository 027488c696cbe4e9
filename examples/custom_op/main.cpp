// examples/custom_op/main.cpp — proves the example op the way mixtape proves its own: a float64
// gradcheck of its samples, the 16-bit contract (computes in float, rounds once) and its AMP
// policy under autocast. Exit 0 when all hold.
#include <cmath>
#include <cstring>
#include <iostream>

#include <mixtape/mixtape.h>

#include "core/dispatcher.h"
#include "softplus.h"

using namespace mixtape;

namespace {
int failures = 0;
void check(bool ok, const std::string& what) {
  std::cout << (ok ? "  ok    " : "  FAIL  ") << what << "\n";
  failures += !ok;
}
}  // namespace

int main() {
  std::cout << "example_softplus, defined outside mixtape:\n";
  // 1. Backward against central differences, in float64, on the op's declared samples.
  const OpSchema* op = find_op("example_softplus");
  check(op != nullptr && op->samples.size() == 2, "the op and its two samples are in the registry");
  if (!op) return 1;
  for (const OpSample& s : op->samples) {  // both samples are a Float argument in (lo, hi)
    Generator g(7);
    Tensor x = (rand(s.args[0].sizes, DType::Float64, &g) * (s.args[0].hi - s.args[0].lo) + s.args[0].lo);
    autograd::GradcheckResult r = autograd::gradcheck(
        [](const TensorList& in) { return TensorList{example::softplus(in[0])}; }, {x.requires_grad_()});
    check(r.ok, "gradcheck " + s.name + (r.ok ? "" : ": " + r.report));
  }
  // 2. Values: softplus(0) = ln 2; large x is x itself; very negative x is e^x, not 0 - 0.
  Tensor y = example::softplus(tensor({0.0, 50.0, -50.0}, DType::Float64));
  check(std::abs(get_element(y, 0) - std::log(2.0)) < 1e-15, "softplus(0) = ln 2");
  check(get_element(y, 1) == 50.0, "softplus(50) = 50");
  check(std::abs(get_element(y, 2) / std::exp(-50.0) - 1.0) < 1e-12, "softplus(-50) = e^-50 (no cancellation)");
  // 3. 16-bit: computed in float and rounded once.
  Tensor h = (randn({64}) * 4.0).to(DType::BFloat16);
  Tensor want = example::softplus(h.to(DType::Float32)).to(DType::BFloat16);
  Tensor got = example::softplus(h);
  check(std::memcmp(got.data_ptr(), want.data_ptr(), got.nbytes()) == 0, "bf16 result = round(f32 result)");
  // 4. AMP: under autocast the op runs in f32 (policy FP32), whatever the region's dtype.
  {
    amp::AutocastGuard guard(DeviceType::CPU, DType::BFloat16);
    Tensor a = matmul(randn({2, 3}), randn({3, 3}));  // bf16 inside the region
    check(a.dtype() == DType::BFloat16, "matmul runs in bf16 inside the region");
    check(example::softplus(a).dtype() == DType::Float32, "softplus runs in f32 inside the region");
  }
  if (failures) {
    std::cerr << "custom_op: " << failures << " check(s) failed\n";
    return 1;
  }
  std::cout << "custom_op: all checks passed\n";
  return 0;
}
