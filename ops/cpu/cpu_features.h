// ops/cpu/cpu_features.h — run-time CPU feature detection for the BF16 GEMM, and the switch that
// chooses its path. Owns: the CPUID/XGETBV probe (asked once per process), the parsing of
// MIXTAPE_CPU_BF16 and the in-process override tests and benchmarks use.
// Invariant: bf16_native_gemm() is true only when the CPU has AVX512F + AVX512BW + AVX512VL +
// AVX512_BF16 *and* the OS saves ZMM/opmask state (XCR0), so the native kernel
// (ops/cpu/bgemm_avx512bf16.h) never runs where it would fault.
//
//   MIXTAPE_CPU_BF16=auto (or unset/empty)  native where the CPU has AVX512_BF16, else emulated
//   MIXTAPE_CPU_BF16=native                 native; an Error naming the variable and the missing
//                                           CPU feature where the CPU lacks it
//   MIXTAPE_CPU_BF16=emulated               widen BF16 to FP32 and run the FP32 GEMM
// Anything else is an Error naming the variable, the value and the accepted ones. The variable is
// read once, at the first bf16_native_gemm() (an invalid value throws there, and again at every
// later call, never silently picks a path).
#pragma once
#include <string>

namespace mixtape::cpu {

// What CPUID and XGETBV report; all false off x86-64.
struct CpuFeatures {
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512_bf16 = false;  // CPUID.(EAX=7, ECX=1):EAX[5], the vdpbf16ps instruction
  bool os_zmm_state = false;  // XCR0 has SSE, AVX, opmask, ZMM_Hi256 and Hi16_ZMM state enabled
};

// This CPU's features (probed once, then cached).
const CpuFeatures& cpu_features();

// What `f` lacks for the native BF16 GEMM, e.g. "AVX512_BF16 (the vdpbf16ps instruction)", comma
// separated; empty when nothing.
std::string bf16_native_missing(const CpuFeatures& f);
// True when `f` allows the native BF16 GEMM: every flag of CpuFeatures set.
bool can_run_bf16_native(const CpuFeatures& f);

enum class Bf16GemmPath { Native, Emulated };

// The path MIXTAPE_CPU_BF16 = `value` selects on a CPU with features `f` (nullptr or "" = auto).
// Throws mixtape::Error for an unknown value, or for "native" when `f` lacks a feature (the
// message names MIXTAPE_CPU_BF16 and the missing features). Pure: tests call it with made-up
// CpuFeatures to check the messages on any machine.
Bf16GemmPath parse_cpu_bf16(const char* value, const CpuFeatures& f);

// Which path BF16 GEMMs take in this process: an active Bf16GemmOverride, else MIXTAPE_CPU_BF16
// as parsed once against cpu_features().
bool bf16_native_gemm();

// "native (AVX512_BF16 vdpbf16ps)" or "emulated (BF16 widened to FP32, FP32 GEMM)", for logs.
std::string bf16_gemm_description();

// While alive, bf16_native_gemm() answers for `path` whatever MIXTAPE_CPU_BF16 says (the variable
// is not read, so an invalid value does not throw either). Process-wide, not per thread: meant for
// tests and benchmarks that compare the two paths in one process; nests (the destructor restores
// the previous override). Constructing it with Native on a CPU that cannot run it throws the same
// Error as MIXTAPE_CPU_BF16=native would.
class Bf16GemmOverride {
 public:
  explicit Bf16GemmOverride(Bf16GemmPath path);
  ~Bf16GemmOverride();
  Bf16GemmOverride(const Bf16GemmOverride&) = delete;
  Bf16GemmOverride& operator=(const Bf16GemmOverride&) = delete;

 private:
  int previous_;
};

}  // namespace mixtape::cpu
