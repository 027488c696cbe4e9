// ops/cpu/cpu_features.cpp — CPUID/XGETBV probe, Linux's AMX permission and MIXTAPE_CPU_BF16 (see
// cpu_features.h). The probe reads CPUID itself rather than __builtin_cpu_supports: it has to
// report *which* requirement is missing (the error names it), and it reads XCR0 explicitly, since
// a CPUID bit alone does not mean the OS saves the ZMM (or tile) registers on a context switch.
#include "ops/cpu/cpu_features.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <string>

#include "core/error.h"

#include "ops/cpu/isa.h"
#include "ops/cpu/steering.h"
#if MIXTAPE_X86_KERNELS
#include <cpuid.h>
#endif
#if MIXTAPE_X86_KERNELS && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace mixtape::cpu {
namespace {

// Linux (5.16+) enables AMX's 8 KiB of tile data per thread only for processes that ask: without
// the grant the first tile instruction faults (SIGILL). The grant is process-wide and permanent.
bool request_amx_permission() {
#if MIXTAPE_X86_KERNELS && defined(__linux__) && defined(SYS_arch_prctl)
  constexpr long kArchReqXcompPerm = 0x1023;  // ARCH_REQ_XCOMP_PERM (asm/prctl.h)
  constexpr long kXfeatureXtiledata = 18;     // XFEATURE_XTILEDATA
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

CpuFeatures probe() {
  CpuFeatures f;
#if MIXTAPE_X86_KERNELS
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  f.fma = ecx & (1u << 12);
  const bool osxsave = ecx & (1u << 27);  // XGETBV is usable: without it, executing it faults
  if (osxsave) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    // XCR0 bits 1 (SSE), 2 (AVX), 5 (opmask), 6 (ZMM_Hi256), 7 (Hi16_ZMM); 17 (XTILECFG), 18 (XTILEDATA).
    f.os_zmm_state = (lo & 0xE6u) == 0xE6u;
    f.os_amx_state = (lo & 0x60000u) == 0x60000u;
  }
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  const unsigned max_subleaf = eax;
  f.avx512f = ebx & (1u << 16);
  f.avx512bw = ebx & (1u << 30);
  f.avx512vl = ebx & (1u << 31);
  f.amx_bf16 = edx & (1u << 22);
  f.amx_tile = edx & (1u << 24);
  if (max_subleaf >= 1) {
    __cpuid_count(7, 1, eax, ebx, ecx, edx);
    f.avx512_bf16 = eax & (1u << 5);
  }
#endif
  return f;
}


void add_missing(std::string& s, bool have, const char* name) {
  if (!have) s += (s.empty() ? "" : ", ") + std::string(name);
}

const char* kAccepted = "'auto', 'native', 'amx', 'avx512bf16' or 'emulated'";

}  // namespace

std::string bf16_native_missing(const CpuFeatures& f) {
  std::string s;
  add_missing(s, f.avx512f, "AVX512F");
  add_missing(s, f.avx512bw, "AVX512BW");
  add_missing(s, f.avx512vl, "AVX512VL");
  add_missing(s, f.avx512_bf16, "AVX512_BF16 (the vdpbf16ps instruction)");
  add_missing(s, f.os_zmm_state, "OS support for AVX-512 register state (XCR0 ZMM/opmask bits, read with XGETBV)");
  return s;
}

std::string bf16_amx_missing(const CpuFeatures& f) {
  // The AMX kernel packs its operands with the AVX512_BF16 kernel's AVX-512 code.
  std::string s = bf16_native_missing(f);
  add_missing(s, f.amx_tile, "AMX-TILE (the tile registers)");
  add_missing(s, f.amx_bf16, "AMX-BF16 (the tdpbf16ps instruction)");
  add_missing(s, f.os_amx_state, "OS support for AMX tile state (XCR0 XTILECFG/XTILEDATA bits)");
  // Only worth naming when the rest is there: it is asked for only then.
  if (s.empty())
    add_missing(s, f.amx_permitted,
                "the kernel's permission to use AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM was refused)");
  return s;
}

const CpuFeatures& probed_cpu_features() {
  static const CpuFeatures f = probe();
  return f;
}

const CpuFeatures& probed_cpu_features_with_amx() {
  static const CpuFeatures f = [] {
    CpuFeatures g = probed_cpu_features();
    g.amx_permitted = g.amx_tile && g.amx_bf16 && g.os_amx_state && request_amx_permission();
    return g;
  }();
  return f;
}

const CpuFeatures& cpu_features() {
  // One view per cap level, indexed by IsaLevel.
  static const std::array<CpuFeatures, 4> views = [] {
    std::array<CpuFeatures, 4> v;
    for (int l = 0; l < 4; ++l) {
      CpuFeatures& f = v[l] = probed_cpu_features();
      if (l < static_cast<int>(IsaLevel::Avx512)) f.avx512f = f.avx512bw = f.avx512vl = false;
      if (l < static_cast<int>(IsaLevel::Avx512Bf16)) f.avx512_bf16 = false;
      if (l < static_cast<int>(IsaLevel::Amx)) f.amx_tile = f.amx_bf16 = false;
    }
    return v;
  }();
  return views[static_cast<int>(isa_cap())];
}

const CpuFeatures& cpu_features_with_amx() {
  return isa_cap() < IsaLevel::Amx ? cpu_features() : probed_cpu_features_with_amx();
}

bool can_run_bf16_native(const CpuFeatures& f) { return bf16_native_missing(f).empty(); }
bool can_run_bf16_amx(const CpuFeatures& f) { return bf16_amx_missing(f).empty(); }

Bf16Kernel resolve_bf16_path(Bf16GemmPath path, const CpuFeatures& f) {
  switch (path) {
    case Bf16GemmPath::Emulated:
      return Bf16Kernel::Emulated;
    case Bf16GemmPath::Native: {
      if (can_run_bf16_amx(f)) return Bf16Kernel::Amx;
      const std::string m = bf16_native_missing(f);
      MT_CHECK(m.empty(), "MIXTAPE_CPU_BF16=native: this CPU cannot run a native BF16 GEMM, it lacks ", m,
               "; unset MIXTAPE_CPU_BF16 or set it to 'emulated'");
      return Bf16Kernel::Avx512Bf16;
    }
    case Bf16GemmPath::Avx512Bf16: {
      const std::string m = bf16_native_missing(f);
      MT_CHECK(m.empty(), "MIXTAPE_CPU_BF16=avx512bf16: this CPU cannot run the AVX512_BF16 GEMM, it lacks ", m,
               "; unset MIXTAPE_CPU_BF16 or set it to 'emulated'");
      return Bf16Kernel::Avx512Bf16;
    }
    case Bf16GemmPath::Amx: {
      const std::string m = bf16_amx_missing(f);
      MT_CHECK(m.empty(), "MIXTAPE_CPU_BF16=amx: this CPU cannot run the AMX BF16 GEMM, it lacks ", m,
               "; unset MIXTAPE_CPU_BF16 or set it to 'avx512bf16' or 'emulated'");
      return Bf16Kernel::Amx;
    }
  }
  MT_ERROR("MIXTAPE_CPU_BF16: unknown path");
}

Bf16Kernel parse_cpu_bf16(const char* value, const CpuFeatures& f) {
  const std::string v = value ? value : "";
  if (v.empty() || v == "auto")
    return can_run_bf16_amx(f)      ? Bf16Kernel::Amx
           : can_run_bf16_native(f) ? Bf16Kernel::Avx512Bf16
                                    : Bf16Kernel::Emulated;
  if (v == "emulated") return Bf16Kernel::Emulated;
  if (v == "native") return resolve_bf16_path(Bf16GemmPath::Native, f);
  if (v == "avx512bf16") return resolve_bf16_path(Bf16GemmPath::Avx512Bf16, f);
  if (v == "amx") return resolve_bf16_path(Bf16GemmPath::Amx, f);
  MT_ERROR("MIXTAPE_CPU_BF16: expected ", kAccepted, ", got '", v, "'");
}

Bf16Kernel bf16_gemm_kernel() {
  if (const intptr_t o = override_slot(Switch::Bf16Gemm).load(std::memory_order_relaxed))
    return static_cast<Bf16Kernel>(o - 1);
  auto from_env = [] {
    const char* v = std::getenv("MIXTAPE_CPU_BF16");
    const std::string s = v ? v : "";
    const bool amx_possible = s.empty() || s == "auto" || s == "native" || s == "amx";  // only then is Linux asked
    return parse_cpu_bf16(v, amx_possible ? cpu_features_with_amx() : cpu_features());
  };
  // An in-process ISA cap (tests) comes and goes: the variable is parsed against it at each call.
  if (override_slot(Switch::IsaCap).load(std::memory_order_relaxed)) return from_env();
  // A throwing initialiser leaves `kernel` uninitialised, so a bad value throws at every call.
  static const Bf16Kernel kernel = from_env();
  return kernel;
}

bool bf16_native_gemm() {
  if (override_slot(Switch::Bf16Gemm).load(std::memory_order_relaxed))
    return bf16_gemm_kernel() != Bf16Kernel::Emulated;
  // FP32 convs and the BLAS set-up ask this too: under auto it is answered without resolving the
  // kernel, so Linux is asked for AMX only at the first BF16 GEMM (AMX's requirements include
  // these). An explicit value is parsed, and checked, now.
  auto from_env = [] {
    const char* v = std::getenv("MIXTAPE_CPU_BF16");
    const std::string s = v ? v : "";
    if (s.empty() || s == "auto") return can_run_bf16_native(cpu_features());
    return bf16_gemm_kernel() != Bf16Kernel::Emulated;
  };
  if (override_slot(Switch::IsaCap).load(std::memory_order_relaxed)) return from_env();  // as bf16_gemm_kernel()
  static const bool native = from_env();
  return native;
}

bool bf16_on_vdpbf16ps() { return bf16_native_gemm() && bf16_gemm_kernel() == Bf16Kernel::Avx512Bf16; }

std::string bf16_gemm_description() {
  switch (bf16_gemm_kernel()) {
    case Bf16Kernel::Amx:
      return "native (AMX tdpbf16ps)";
    case Bf16Kernel::Avx512Bf16:
      return "native (AVX512_BF16 vdpbf16ps)";
    case Bf16Kernel::Emulated:
      break;
  }
  return "emulated (BF16 widened to FP32, FP32 GEMM)";
}

Override::Override(Bf16GemmPath path) : which_(Switch::Bf16Gemm) {
  const bool amx_possible = path == Bf16GemmPath::Native || path == Bf16GemmPath::Amx;
  // Throws where the kernel cannot run (before the slot changes).
  const Bf16Kernel k = resolve_bf16_path(path, amx_possible ? cpu_features_with_amx() : cpu_features());
  mine_ = 1 + static_cast<intptr_t>(k);
  previous_ = override_slot(which_).exchange(mine_);
}

}  // namespace mixtape::cpu
