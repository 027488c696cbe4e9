// ops/cpu/isa.cpp — the run-time answers of ops/cpu/isa.h, each probed once.
#include "ops/cpu/isa.h"

#include "core/error.h"

namespace mixtape::cpu {

bool isa_avx512() {
  static const bool on = [] {
    const CpuFeatures& f = cpu_features();
    return MIXTAPE_X86_KERNELS && f.avx512f && f.avx512bw && f.avx512vl && f.fma && f.os_zmm_state;
  }();
  return on;
}

bool isa_avx512bf16() {
  static const bool on = isa_avx512() && can_run_bf16_native(cpu_features());
  return on;
}

bool isa_amx() {
  static const bool on = isa_avx512bf16() && can_run_bf16_amx(cpu_features_with_amx());
  return on;
}

#if !MIXTAPE_X86_KERNELS
NoX86Kernels no_x86_kernels(const char* function) {
  MT_ERROR(function, ": this build has no x86 kernels (x86-64 with GCC or Clang only)");
}
#endif

}  // namespace mixtape::cpu
