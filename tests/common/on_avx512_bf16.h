// tests/common/on_avx512_bf16.h — for the tests of kernels that run where BF16 GEMMs run on
// vdpbf16ps: while alive, BF16 GEMMs take that path on any CPU that has the instruction, AMX CPUs
// included (whose default is AMX), whatever MIXTAPE_CPU_BF16 says; elsewhere it does nothing (the
// tests then skip).
#pragma once
#include <optional>

#include "ops/cpu/cpu_features.h"
#include "ops/cpu/steering.h"

namespace mixtape::testing {

struct OnAvx512Bf16 {
  std::optional<cpu::Override> path;
  OnAvx512Bf16() {
    if (cpu::can_run_bf16_native(cpu::cpu_features())) path.emplace(cpu::Bf16GemmPath::Avx512Bf16);
  }
};

}  // namespace mixtape::testing
