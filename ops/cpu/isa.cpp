// ops/cpu/isa.cpp — the run-time answers of ops/cpu/isa.h: the hardware's, each probed once, and
// the cap (MIXTAPE_CPU_ISA, Override(IsaLevel)) they pass through.
#include "ops/cpu/isa.h"

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace mixtape::cpu {
namespace {

bool hw_avx512() {
  static const bool on = [] {
    const CpuFeatures& f = probed_cpu_features();
    return MIXTAPE_X86_KERNELS && f.avx512f && f.avx512bw && f.avx512vl && f.fma && f.os_zmm_state;
  }();
  return on;
}
bool hw_avx512bf16() {
  static const bool on = hw_avx512() && can_run_bf16_native(probed_cpu_features());
  return on;
}
bool hw_amx() {
  static const bool on = hw_avx512bf16() && can_run_bf16_amx(probed_cpu_features_with_amx());
  return on;
}

// What this CPU lacks for `level`, for the error.
std::string hw_lacks(IsaLevel level) {
  if (!MIXTAPE_X86_KERNELS) return "the x86 kernels (this build has none: x86-64 with GCC or Clang only)";
  if (level == IsaLevel::Amx) return bf16_amx_missing(probed_cpu_features_with_amx());
  if (level == IsaLevel::Avx512Bf16 || hw_avx512()) return bf16_native_missing(probed_cpu_features());
  std::string s = bf16_native_missing(probed_cpu_features());
  if (!probed_cpu_features().fma) s += ", FMA";
  return s;
}

void check_hardware_has(IsaLevel level) {
  MT_CHECK(isa_hardware_has(level), "MIXTAPE_CPU_ISA=", isa_level_name(level),
           ": this CPU cannot run that level, it lacks ", hw_lacks(level),
           "; choose a lower one or unset MIXTAPE_CPU_ISA");
}

IsaLevel cap_from_env() {
  const char* e = std::getenv("MIXTAPE_CPU_ISA");
  const std::string v = e ? e : "";
  if (v.empty()) return IsaLevel::Amx;  // no cap
  for (IsaLevel l : {IsaLevel::Baseline, IsaLevel::Avx512, IsaLevel::Avx512Bf16, IsaLevel::Amx}) {
    if (v != isa_level_name(l)) continue;
    check_hardware_has(l);
    return l;
  }
  MT_ERROR("MIXTAPE_CPU_ISA: expected 'baseline', 'avx512', 'avx512bf16' or 'amx', got '", v, "'");
}

}  // namespace

const char* isa_level_name(IsaLevel level) {
  switch (level) {
    case IsaLevel::Baseline: return "baseline";
    case IsaLevel::Avx512: return "avx512";
    case IsaLevel::Avx512Bf16: return "avx512bf16";
    case IsaLevel::Amx: return "amx";
  }
  return "?";
}

bool isa_hardware_has(IsaLevel level) {
  switch (level) {
    case IsaLevel::Baseline: return true;
    case IsaLevel::Avx512: return hw_avx512();
    case IsaLevel::Avx512Bf16: return hw_avx512bf16();
    case IsaLevel::Amx: return hw_amx();
  }
  return false;
}

IsaLevel isa_cap() {
  if (const intptr_t o = override_slot(Switch::IsaCap).load(std::memory_order_relaxed))
    return static_cast<IsaLevel>(o - 1);
  // A throwing initialiser leaves it uninitialised, so a bad value throws at every call.
  static const IsaLevel cap = cap_from_env();
  return cap;
}

// The cap is asked first, so a process capped below AMX never asks Linux for the tile state.
bool isa_avx512() { return isa_cap() >= IsaLevel::Avx512 && hw_avx512(); }
bool isa_avx512bf16() { return isa_cap() >= IsaLevel::Avx512Bf16 && hw_avx512bf16(); }
bool isa_amx() { return isa_cap() >= IsaLevel::Amx && hw_amx(); }

Override::Override(IsaLevel cap) : which_(Switch::IsaCap) {
  // Before the slot changes. A cap never lifts one already in force: the capped CPU lacks the rest.
  check_hardware_has(cap);
  MT_CHECK(cap <= isa_cap(), "MIXTAPE_CPU_ISA=", isa_level_name(cap), ": this process is capped at ",
           isa_level_name(isa_cap()),
           " (MIXTAPE_CPU_ISA or an enclosing cpu::Override(IsaLevel)); a cap only lowers it");
  mine_ = 1 + static_cast<intptr_t>(cap);
  previous_ = override_slot(which_).exchange(mine_);
}

#if !MIXTAPE_X86_KERNELS
NoX86Kernels no_x86_kernels(const char* function) {
  MT_ERROR(function, ": this build has no x86 kernels (x86-64 with GCC or Clang only)");
}
#endif

}  // namespace mixtape::cpu
