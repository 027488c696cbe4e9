// ops/cpu/cpu_features.cpp — CPUID/XGETBV probe and MIXTAPE_CPU_BF16 (see cpu_features.h).
// The probe reads CPUID itself rather than __builtin_cpu_supports: it has to report *which*
// requirement is missing (the error names it), and it reads XCR0 explicitly, since a CPUID bit
// alone does not mean the OS saves the ZMM registers on a context switch.
#include "ops/cpu/cpu_features.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "core/error.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#define MIXTAPE_HAVE_X86_CPUID 1
#else
#define MIXTAPE_HAVE_X86_CPUID 0
#endif

namespace mixtape::cpu {
namespace {

CpuFeatures probe() {
  CpuFeatures f;
#if MIXTAPE_HAVE_X86_CPUID
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool osxsave = ecx & (1u << 27);  // XGETBV is usable: without it, executing it faults
  if (osxsave) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    // XCR0 bits 1 (SSE), 2 (AVX), 5 (opmask), 6 (ZMM_Hi256), 7 (Hi16_ZMM).
    f.os_zmm_state = (lo & 0xE6u) == 0xE6u;
  }
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  const unsigned max_subleaf = eax;
  f.avx512f = ebx & (1u << 16);
  f.avx512bw = ebx & (1u << 30);
  f.avx512vl = ebx & (1u << 31);
  if (max_subleaf >= 1) {
    __cpuid_count(7, 1, eax, ebx, ecx, edx);
    f.avx512_bf16 = eax & (1u << 5);
  }
#endif
  return f;
}

// 0: no override; else 1 + Bf16GemmPath.
std::atomic<int> g_override{0};

}  // namespace

std::string bf16_native_missing(const CpuFeatures& f) {
  std::string s;
  auto add = [&](bool have, const char* name) {
    if (!have) s += (s.empty() ? "" : ", ") + std::string(name);
  };
  add(f.avx512f, "AVX512F");
  add(f.avx512bw, "AVX512BW");
  add(f.avx512vl, "AVX512VL");
  add(f.avx512_bf16, "AVX512_BF16 (the vdpbf16ps instruction)");
  add(f.os_zmm_state, "OS support for AVX-512 register state (XCR0 ZMM/opmask bits, read with XGETBV)");
  return s;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = probe();
  return f;
}

bool can_run_bf16_native(const CpuFeatures& f) { return bf16_native_missing(f).empty(); }

Bf16GemmPath parse_cpu_bf16(const char* value, const CpuFeatures& f) {
  const std::string v = value ? value : "";
  if (v.empty() || v == "auto") return can_run_bf16_native(f) ? Bf16GemmPath::Native : Bf16GemmPath::Emulated;
  if (v == "emulated") return Bf16GemmPath::Emulated;
  if (v == "native") {
    const std::string m = bf16_native_missing(f);
    MT_CHECK(m.empty(), "MIXTAPE_CPU_BF16=native: this CPU cannot run the native BF16 GEMM, it lacks ", m,
             "; unset MIXTAPE_CPU_BF16 or set it to 'emulated'");
    return Bf16GemmPath::Native;
  }
  MT_ERROR("MIXTAPE_CPU_BF16: expected 'native', 'emulated' or 'auto', got '", v, "'");
}

bool bf16_native_gemm() {
  if (const int o = g_override.load(std::memory_order_relaxed)) return o - 1 == static_cast<int>(Bf16GemmPath::Native);
  // A throwing initialiser leaves `native` uninitialised, so a bad value throws at every call.
  static const bool native = parse_cpu_bf16(std::getenv("MIXTAPE_CPU_BF16"), cpu_features()) == Bf16GemmPath::Native;
  return native;
}

std::string bf16_gemm_description() {
  return bf16_native_gemm() ? "native (AVX512_BF16 vdpbf16ps)" : "emulated (BF16 widened to FP32, FP32 GEMM)";
}

Bf16GemmOverride::Bf16GemmOverride(Bf16GemmPath path) : previous_(g_override.load()) {
  if (path == Bf16GemmPath::Native) parse_cpu_bf16("native", cpu_features());  // throws where it cannot run
  g_override.store(1 + static_cast<int>(path));
}

Bf16GemmOverride::~Bf16GemmOverride() { g_override.store(previous_); }

}  // namespace mixtape::cpu
