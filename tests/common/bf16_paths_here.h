// tests/common/bf16_paths_here.h — the BF16 GEMM paths this CPU can run, for tests that repeat a
// check on each (under cpu::Override(path)): emulated (widened to FP32) always, vdpbf16ps and AMX
// where the CPU and OS allow them; and each path's short name for failure messages.
#pragma once
#include <vector>

#include "ops/cpu/cpu_features.h"
#include "ops/cpu/steering.h"

namespace mixtape::testing {

inline std::vector<cpu::Bf16GemmPath> bf16_paths_here() {
  std::vector<cpu::Bf16GemmPath> k = {cpu::Bf16GemmPath::Emulated};
  if (cpu::can_run_bf16_native(cpu::cpu_features())) k.push_back(cpu::Bf16GemmPath::Avx512Bf16);
  if (cpu::can_run_bf16_amx(cpu::cpu_features_with_amx())) k.push_back(cpu::Bf16GemmPath::Amx);
  return k;
}

inline const char* bf16_path_name(cpu::Bf16GemmPath p) {
  return p == cpu::Bf16GemmPath::Amx ? "amx" : p == cpu::Bf16GemmPath::Avx512Bf16 ? "avx512bf16" : "emulated";
}

}  // namespace mixtape::testing
