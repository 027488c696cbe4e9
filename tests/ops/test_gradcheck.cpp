// tests/ops/test_gradcheck.cpp — Float64 gradchecks, against central differences (tolerances in
// autograd/gradcheck.h), of the ops that do not declare samples with their definition yet (those
// that do are gradchecked by tests/ops/test_op_samples.cpp), plus the op coverage table.
#include <gtest/gtest.h>

#include <iomanip>
#include <iostream>
#include <sstream>

#include "common/op_sample_run.h"
#include "op_samples.h"

namespace mixtape::testing {
namespace {

// Inputs kept away from kinks (relu/abs at 0, max ties) and poles (log/div at 0).
MT_GRAD_SAMPLE("sum/all", [] { return TensorList{leaf({2, 3})}; }, [](const TensorList& x) { return TensorList{sum(x[0])}; });
MT_GRAD_SAMPLE("sum/dims-keepdim", [] { return TensorList{leaf({2, 3, 4})}; },
               [](const TensorList& x) { return TensorList{sum(x[0], {0, 2}, true)}; });
MT_GRAD_SAMPLE("sum/dim", [] { return TensorList{leaf({2, 3, 4})}; },
               [](const TensorList& x) { return TensorList{sum(x[0], {-1})}; });
MT_GRAD_SAMPLE("mean/all", [] { return TensorList{leaf({2, 3})}; }, [](const TensorList& x) { return TensorList{mean(x[0])}; });
MT_GRAD_SAMPLE("mean/dim", [] { return TensorList{leaf({2, 3, 4})}; },
               [](const TensorList& x) { return TensorList{mean(x[0], {1})}; });
MT_GRAD_SAMPLE("max/dim", [] { return TensorList{leaf({3, 5})}; },
               [](const TensorList& x) { return TensorList{max(x[0], 1).first}; });
MT_GRAD_SAMPLE("max/keepdim", [] { return TensorList{leaf({3, 4, 2})}; },
               [](const TensorList& x) { return TensorList{max(x[0], 1, true).first}; });
MT_GRAD_SAMPLE("amax/dims", [] { return TensorList{leaf({3, 4, 2})}; },
               [](const TensorList& x) { return TensorList{amax(x[0], {0, 2})}; });
MT_GRAD_SAMPLE("amax/ties", [] { return TensorList{tensor({{1.0, 3.0, 3.0}, {2.0, 0.0, -1.0}}, DType::Float64).requires_grad_()}; },
               [](const TensorList& x) { return TensorList{amax(x[0], 1) * 1.0}; },
               // Ties make amax non-differentiable; with eps = 1e-6 a central difference
               // sees slope 1/2 for each tied entry — exactly PyTorch's even split.
               autograd::GradcheckOptions{});
MT_GRAD_SAMPLE("matmul/2d", [] { return TensorList{leaf({4, 5}), leaf({5, 3}, -1, 1, 2)}; },
               [](const TensorList& x) { return TensorList{matmul(x[0], x[1])}; });
MT_GRAD_SAMPLE("matmul/batched-broadcast", [] { return TensorList{leaf({2, 1, 3, 4}), leaf({3, 4, 2}, -1, 1, 2)}; },
               [](const TensorList& x) { return TensorList{matmul(x[0], x[1])}; });
MT_GRAD_SAMPLE("matmul/transposed-operand", [] { return TensorList{leaf({5, 4}), leaf({5, 3}, -1, 1, 2)}; },
               [](const TensorList& x) { return TensorList{matmul(x[0].t(), x[1])}; });
MT_GRAD_SAMPLE("matmul/vector", [] { return TensorList{leaf({4}), leaf({4, 3}, -1, 1, 2), leaf({3}, -1, 1, 3)}; },
               [](const TensorList& x) { return TensorList{matmul(matmul(x[0], x[1]), x[2])}; });
MT_GRAD_SAMPLE("view", [] { return TensorList{leaf({2, 6})}; },
               [](const TensorList& x) { return TensorList{x[0].view({3, -1}) * tensor({1.0, 2.0, 3.0, 4.0}, DType::Float64)}; });
MT_GRAD_SAMPLE("reshape/non-contiguous", [] { return TensorList{leaf({3, 4})}; },
               [](const TensorList& x) { return TensorList{x[0].t().reshape({2, 6}) * 2.0}; });
MT_GRAD_SAMPLE("permute", [] { return TensorList{leaf({2, 3, 4})}; },
               [](const TensorList& x) { return TensorList{x[0].permute({2, 0, 1}) * leaf({4, 2, 3}, -1, 1, 9).detach()}; });
MT_GRAD_SAMPLE("expand", [] { return TensorList{leaf({3, 1})}; },
               [](const TensorList& x) { return TensorList{x[0].expand({2, 3, 4}) * leaf({2, 3, 4}, -1, 1, 9).detach()}; });
MT_GRAD_SAMPLE("squeeze-unsqueeze", [] { return TensorList{leaf({3, 1, 2})}; },
               [](const TensorList& x) { return TensorList{x[0].squeeze(1).unsqueeze(0) * 3.0}; });
MT_GRAD_SAMPLE("slice/step", [] { return TensorList{leaf({4, 7})}; },
               [](const TensorList& x) { return TensorList{x[0].slice(1, 1, 7, 2) * x[0].slice(1, -3, 100)}; });
MT_GRAD_SAMPLE("select-narrow", [] { return TensorList{leaf({4, 5})}; },
               [](const TensorList& x) { return TensorList{x[0].select(0, -1) * x[0].narrow(0, 1, 1).squeeze(0)}; });
MT_GRAD_SAMPLE("slice_backward/double", [] { return TensorList{leaf({2, 2})}; },
               [](const TensorList& x) { return TensorList{slice_backward(x[0], {5, 2}, 0, 1, 5, 2)}; });
MT_GRAD_SAMPLE("gather", [] { return TensorList{leaf({3, 4})}; },
               [](const TensorList& x) {
                 Tensor idx = tensor({{0.0, 3.0}, {1.0, 1.0}, {2.0, 0.0}}, DType::Int64);
                 return TensorList{gather(x[0], 1, idx)};
               });
MT_GRAD_SAMPLE("scatter_add", [] { return TensorList{leaf({3, 2})}; },
               [](const TensorList& x) {
                 Tensor idx = tensor({{0.0, 3.0}, {1.0, 1.0}, {2.0, 0.0}}, DType::Int64);
                 return TensorList{scatter_add_into_zeros(x[0], 1, idx, {3, 4})};
               });
MT_GRAD_SAMPLE("to_dtype/f32-roundtrip", [] { return TensorList{leaf({4})}; },
               [](const TensorList& x) { return TensorList{x[0].to(DType::Float32).to(DType::Float64)}; },
               // f32 keeps 24 bits: with eps = 1e-3 the rounding error of a central difference
               // is ~2^-24 / 1e-3 ~ 6e-5, well inside rtol = 1e-3.
               autograd::GradcheckOptions{1e-3, 1e-4, 1e-3});
MT_GRAD_SAMPLE("clone", [] { return TensorList{leaf({2, 3})}; },
               [](const TensorList& x) { return TensorList{x[0].t().clone() * 2.0}; });
MT_GRAD_SAMPLE("to_device/cpu", [] { return TensorList{leaf({2, 3})}; },
               [](const TensorList& x) {
                 // CPU -> CPU through the op (to() would return x itself).
                 return TensorList{dispatch1(*find_op("to_device"), {x[0]}, {{"device", int64_t(-1)}})};
               });
MT_GRAD_SAMPLE("composite/mlp", [] { return TensorList{leaf({3, 4}), leaf({4, 2}, -1, 1, 2), leaf({2}, -1, 1, 3)}; },
               [](const TensorList& x) {
                 Tensor h = tanh(matmul(x[0], x[1]) + x[2]);
                 return TensorList{(sigmoid(h) * exp(h)).sum({1})};
               });

TEST(Gradcheck, EverySamplePasses) {
  for (auto& s : grad_samples()) {
    try {
      auto r = autograd::gradcheck(s.fn, s.make_inputs(), s.options);
      EXPECT_TRUE(r.ok) << s.name << ": " << r.report;
    } catch (const Error& e) {
      ADD_FAILURE() << s.name << " threw: " << e.what();
    }
  }
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
  for (const SampleRef& r : registry_samples()) {  // the samples ops declare
    if (!r.op->differentiable) continue;
    try {
      gradcheck_sample(*r.op, *r.sample);
    } catch (const Error&) {
      // reported by SampleGradcheck; here the op simply stays unchecked
    }
  }
  for (auto& s : grad_samples()) {  // the samples of this folder's files
    try {
      autograd::gradcheck(s.fn, s.make_inputs(), s.options);
    } catch (const Error&) {
      // reported by Gradcheck.EverySamplePasses; here the op simply stays unchecked
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
