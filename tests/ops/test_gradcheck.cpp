// tests/ops/test_gradcheck.cpp — the op coverage table (every op has a CPU kernel, a backward
// unless it is not differentiable, and a float64 gradcheck from the samples it declares), that
// gradcheck can fail, and a gradcheck of a chain of ops. The samples' own gradchecks are
// tests/ops/test_op_samples.cpp.
#include <gtest/gtest.h>

#include <iomanip>
#include <iostream>
#include <sstream>

#include "common/op_sample_run.h"
#include "leaf.h"

namespace mixtape::testing {
namespace {

TEST(Gradcheck, MlpChain) {
  const auto r = autograd::gradcheck(
      [](const TensorList& x) {
        Tensor h = tanh(matmul(x[0], x[1]) + x[2]);
        return TensorList{(sigmoid(h) * exp(h)).sum({1})};
      },
      {leaf({3, 4}), leaf({4, 2}, -1, 1, 2), leaf({2}, -1, 1, 3)});
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(Gradcheck, DetectsAWrongBackward) {
  // A deliberately wrong gradient (hook doubles it) must fail: gradcheck can fail.
  auto r = autograd::gradcheck(
      [](const TensorList& x) {
        Tensor y = x[0] * 1.0;
        if (y.requires_grad()) y.register_hook([](const Tensor& g) { return g * 2.0; });
        return TensorList{y * y};
      },
      {leaf({3})});
  EXPECT_FALSE(r.ok);
}

// The coverage table: every op in the registry has a CPU kernel, a backward (unless marked
// non-differentiable), and passed a gradcheck in this process.
TEST(OpCoverage, EveryOpHasKernelBackwardAndGradcheck) {
  for (const SampleRef& r : registry_samples()) {
    if (!r.op->differentiable) continue;
    try {
      gradcheck_sample(*r.op, *r.sample);
    } catch (const Error&) {
      // reported by SampleGradcheck; here the op simply stays unchecked
    }
  }
  const auto& checked = autograd::gradchecked_ops();
  std::ostringstream table;
  table << std::left << std::setw(32) << "op" << std::setw(6) << "cpu" << std::setw(6) << "cuda" << std::setw(10)
        << "backward" << std::setw(12) << "gradcheck" << "amp policy\n";
  std::vector<std::string> missing;
  for (const OpSchema* op : all_ops()) {
    bool cpu = op->has_kernel(DeviceType::CPU);
    bool cuda = op->has_kernel(DeviceType::CUDA);
    bool needs_backward = op->differentiable && !op->composite;
    bool has_backward = op->backward != nullptr;
    bool gc = checked.count(op->name) > 0;
    table << std::setw(32) << op->name << std::setw(6) << (cpu ? "yes" : "NO") << std::setw(6) << (cuda ? "yes" : "-")
          << std::setw(10) << (!needs_backward ? "n/a" : has_backward ? "yes" : "NO") << std::setw(12)
          << (!needs_backward ? "n/a" : gc ? "yes" : "NO") << amp_policy_name(op->amp_policy) << '\n';
    if (!cpu) missing.push_back(op->name + ": no CPU kernel");
    if (needs_backward && !has_backward) missing.push_back(op->name + ": no backward");
    if (needs_backward && !gc) missing.push_back(op->name + ": no gradcheck sample");
  }
  std::cout << table.str();
  for (auto& m : missing) ADD_FAILURE() << m;
}

}  // namespace
}  // namespace mixtape::testing
