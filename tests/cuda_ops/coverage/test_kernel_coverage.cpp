// tests/cuda_ops/coverage/test_kernel_coverage.cpp — the kernel coverage table: every op of the
// registry x {CPU, CUDA}, with the samples it declares and, for a CPU-only op, why. Runs on every
// machine (no GPU needed: it reads the registry), ctest label cuda_coverage, not gpu.
// What it checks is derived, never listed here: kernel_registry_problems() (core/dispatcher.h) is
// empty — in a CUDA build every op with a CPU kernel has a CUDA kernel or says cpu_only(why), and
// every CUDA kernel belongs to an op with a CPU kernel. That the samples reach every CUDA kernel is
// tests/cuda_ops/test_sample_parity.cpp's EveryCudaKernelRunsInASample (it needs a device).
#include <gtest/gtest.h>

#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>

#include "core/cuda_api.h"
#include "core/dispatcher.h"
#include "mixtape/mixtape.h"

namespace mixtape {
namespace {

TEST(CudaKernelCoverage, RegistryHasACudaKernelForEveryCpuKernel) {
  const bool cuda_built = cuda::built_with_cuda();
  std::ostringstream table;
  table << std::left << std::setw(44) << "op" << std::setw(6) << "CPU" << std::setw(9) << "CUDA" << std::setw(9)
        << "samples"
        << "note\n";
  int with_cuda = 0, needing = 0;
  for (const OpSchema* op : all_ops()) {
    if (op->composite || op->any_device) continue;  // no kernel of their own on any device
    const bool cpu = op->kernels[static_cast<int>(DeviceType::CPU)] != nullptr;
    const bool gpu = op->kernels[static_cast<int>(DeviceType::CUDA)] != nullptr;
    if (!cpu && !gpu) continue;
    ++needing;
    with_cuda += gpu;
    table << std::setw(44) << op->name << std::setw(6) << (cpu ? "yes" : "-") << std::setw(9)
          << (gpu ? "yes" : op->cpu_only_reason.empty() ? "-" : "cpu-only") << std::setw(9) << op->samples.size()
          << op->cpu_only_reason << "\n";
  }
  table << with_cuda << " of " << needing << " ops with device kernels have a CUDA kernel"
        << (cuda_built ? "" : " (built without CUDA: nothing to check)") << "\n";
  std::cout << table.str();
  std::string problems;
  for (const std::string& p : kernel_registry_problems()) problems += "\n  " + p;
  EXPECT_TRUE(problems.empty()) << "the registry is incomplete:" << problems;
}

}  // namespace
}  // namespace mixtape
