// tests/cuda_ops/coverage/test_kernel_coverage.cpp — the CUDA kernel coverage table: every op of the
// registry x {CPU, CUDA} x the dtypes the parity tests of this folder exercise on CUDA. Runs on
// every machine (no GPU needed: it reads the registry), ctest label cuda_coverage, not gpu.
//
// Rules (in a build with CUDA; a -DMIXTAPE_CUDA=OFF build only prints the table):
//   - an op with a device kernel on the CPU must have one on CUDA, unless it is listed in
//     kPendingCudaKernels below;
//   - a listed op that has gained a CUDA kernel fails too, so the list is always exactly what is
//     left to do;
//   - an op with a CUDA kernel must name the dtypes its parity test covers in kParityDtypes (a
//     kernel without a CPU<->CUDA test fails), unless it is tested in another folder;
//   - a CUDA kernel must belong to an op with a CPU kernel (register_kernel creates the entry it
//     names, so a misspelt name would otherwise add a CUDA-only op silently).
// Composite ops and view ops (metadata only) need no kernel of their own.
#include <gtest/gtest.h>

#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <string>

#include "core/cuda_api.h"
#include "core/dispatcher.h"
#include "mixtape/mixtape.h"

namespace mixtape {
namespace {

// Ops whose CUDA kernel is not written yet (none now). Keep exact: the test fails both ways.
const std::set<std::string> kPendingCudaKernels = {};

// The dtypes each CUDA kernel's parity test in tests/cuda_ops/ compares against the CPU.
const std::map<std::string, std::string> kParityDtypes = {
    {"_amp_foreach_non_finite_check_and_unscale_", "f32 f16 bf16 f64"},
    {"_amp_update_scale_", "f32"},
    {"adam_step_", "f32 f64 masters; f16 bf16 models"},
    {"norm_pow_sum", "f32 f16 bf16 f64"},
    {"sgd_step_", "f32 f64 masters; f16 bf16 models"},
    {"mse_loss", "f32 f16 bf16 f64"},
    {"binary_cross_entropy", "f32 f16 bf16 f64"},
    {"binary_cross_entropy_backward", "f32 f16 bf16 f64"},
    {"binary_cross_entropy_with_logits", "f32 f16 bf16 f64"},
    {"layer_norm", "f32 f16 bf16 f64"},
    {"gather", "f32 f16 bf16 f64"},
    {"scatter_add", "f32 f16 bf16 f64"},
    {"index_select", "f32 f16 bf16 f64"},
    {"index_select_backward", "f32 f16 bf16 f64"},
    {"cat", "f32 f16 bf16 f64"},
    {"slice_backward", "f32 f16 bf16 f64"},
    {"avg_pool2d", "f32 f16 bf16 f64"},
    {"avg_pool2d_backward", "f32 f16 bf16 f64"},
    {"adaptive_avg_pool2d", "f32 f16 bf16 f64"},
    {"adaptive_avg_pool2d_backward", "f32 f16 bf16 f64"},
    {"conv2d", "f32 f16 bf16 f64"},
    {"conv2d_input_grad", "f32 f16 bf16 f64"},
    {"conv2d_weight_grad", "f32 f16 bf16 f64"},
    {"batch_norm", "f32 f16 bf16 f64"},
    {"batch_norm_backward", "f32 f16 bf16 f64"},
    {"dropout", "f32 f16 bf16 f64"},
    {"softmax", "f32 f16 bf16 f64"},
    {"log_softmax", "f32 f16 bf16 f64"},
    {"softmax_backward", "f32 f16 bf16 f64"},
    {"log_softmax_backward", "f32 f16 bf16 f64"},
    {"nll_loss", "f32 f16 bf16 f64"},
    {"nll_loss_backward", "f32 f16 bf16 f64"},
    {"max_pool2d", "f32 f16 bf16 f64"},
    {"max_pool2d_backward", "f32 f16 bf16 f64"},
    {"max_pool2d_input_backward", "f32 f16 bf16 f64"},
    {"max_pool2d_with_indices", "f32 f16 bf16 f64"},
    {"abs", "f32 f16 bf16 f64 i32 i64 u8"},
    {"add", "f32 f16 bf16 f64 i32 mixed"},
    {"add_", "f32 f16 bf16 f64"},
    {"amax", "f32 f16 bf16 f64 i32 i64"},
    {"argmax", "f32 f16 bf16 f64 i32 i64"},
    {"clamp", "f32 f16 bf16 f64 i32 i64 u8"},
    {"clamp_grad", "f32 f16 bf16 f64"},
    {"clone", "all 8"},
    {"copy_", "f32 f16 bf16 f64"},
    {"div", "f32 f16 bf16 f64 i32"},
    {"eq", "f32 f16 bf16 f64"},
    {"exp", "f32 f16 bf16 f64 i32 i64 u8"},
    {"fill_", "f32 f16 bf16 f64"},
    {"full_like", "f32 f16 bf16 f64"},
    {"gelu", "f32 f16 bf16 f64"},
    {"gelu_grad", "f32 f16 bf16 f64"},
    {"leaky_relu", "f32 f16 bf16 f64"},
    {"leaky_relu_grad", "f32 f16 bf16 f64"},
    {"linear", "f32 f16 bf16 f64"},
    {"log", "f32 f16 bf16 f64"},
    {"matmul", "f32 f16 bf16 f64"},
    {"max", "f32 f16 bf16 f64 i32 i64"},
    {"mean", "f32 f16 bf16 f64"},
    {"mul", "f32 f16 bf16 f64 mixed"},
    {"mul_", "f32 f16 bf16 f64"},
    {"neg", "f32 f16 bf16 f64 i32 i64"},
    {"pow", "f32 f16 bf16 f64"},
    {"random_fill_", "f32 f16 bf16 f64"},
    {"relu", "f32 f16 bf16 f64"},
    {"relu_grad", "f32 f16 bf16 f64"},
    {"sigmoid", "f32 f16 bf16 f64"},
    {"sign", "f32 f16 bf16 f64 i32 i64 u8"},
    {"sqrt", "f32 f16 bf16 f64"},
    {"sub", "f32 f16 bf16 f64"},
    {"sum", "f32 f16 bf16 f64 i32"},
    {"tanh", "f32 f16 bf16 f64"},
    {"to_dtype", "all 8 x all 8"},
    {"where", "f32 f16 bf16 f64"},
};
// CUDA kernels whose CPU<->CUDA tests live in another folder.
const std::map<std::string, std::string> kTestedElsewhere = {
    {"to_device", "tests/cuda_runtime"},
};

TEST(CudaKernelCoverage, EveryCpuKernelHasACudaKernelOrIsPending) {
  const bool cuda_built = cuda::built_with_cuda();
  std::ostringstream table;
  table << std::left << std::setw(44) << "op" << std::setw(6) << "CPU" << std::setw(9) << "CUDA"
        << "CUDA dtypes checked against the CPU\n";
  std::vector<std::string> missing, stale, untested;
  int with_cuda = 0, needing = 0;
  for (const OpSchema* op : all_ops()) {
    if (op->composite || op->any_device) continue;  // no kernel of their own on any device
    const bool cpu = op->kernels[static_cast<int>(DeviceType::CPU)] != nullptr;
    const bool gpu = op->kernels[static_cast<int>(DeviceType::CUDA)] != nullptr;
    if (!cpu && !gpu) continue;
    ++needing;
    with_cuda += gpu;
    const bool pending = kPendingCudaKernels.count(op->name) > 0;
    std::string dtypes = "-";
    if (auto it = kParityDtypes.find(op->name); it != kParityDtypes.end()) dtypes = it->second;
    if (auto it = kTestedElsewhere.find(op->name); it != kTestedElsewhere.end()) dtypes = "see " + it->second;
    table << std::setw(44) << op->name << std::setw(6) << (cpu ? "yes" : "-") << std::setw(9)
          << (gpu ? "yes" : pending ? "pending" : "MISSING") << (gpu ? dtypes : "") << "\n";
    if (!cuda_built) continue;
    if (cpu && !gpu && !pending) missing.push_back(op->name);
    if (gpu && pending) stale.push_back(op->name);
    if (gpu && !kParityDtypes.count(op->name) && !kTestedElsewhere.count(op->name)) untested.push_back(op->name);
    if (gpu && !cpu) missing.push_back(op->name + " (a CUDA kernel registered under a name no CPU op has: a typo?)");
  }
  table << with_cuda << " of " << needing << " ops with device kernels have a CUDA kernel"
        << (cuda_built ? "" : " (built without CUDA: table only)") << "\n";
  std::cout << table.str();
  for (const std::string& name : kPendingCudaKernels)
    if (!find_op(name)) stale.push_back(name + " (no such op)");

  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& n : v) s += (s.empty() ? "" : ", ") + n;
    return s;
  };
  EXPECT_TRUE(missing.empty()) << "ops with a CPU kernel but no CUDA kernel (write one, or add to kPendingCudaKernels): "
                               << join(missing);
  EXPECT_TRUE(stale.empty()) << "kPendingCudaKernels lists ops that have a CUDA kernel now (remove them): "
                             << join(stale);
  EXPECT_TRUE(untested.empty()) << "CUDA kernels without a parity test (add one and list its dtypes in kParityDtypes): "
                                << join(untested);
}

}  // namespace
}  // namespace mixtape
