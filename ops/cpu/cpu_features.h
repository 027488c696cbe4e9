// ops/cpu/cpu_features.h — run-time CPU feature detection for the BF16 GEMM, and the switch that
// chooses its kernel. Owns: the CPUID/XGETBV probe and Linux's AMX permission request (asked once
// per process), the parsing of MIXTAPE_CPU_BF16 and the in-process override tests and benchmarks
// use.
// Invariant: a kernel is chosen only where it can run — AVX512_BF16 needs AVX512F + BW + VL +
// AVX512_BF16 and the OS saving ZMM/opmask state (XCR0); AMX needs all of that plus AMX-TILE,
// AMX-BF16, the OS saving tile state (XCR0) and the kernel's permission for this process to use
// it — so neither ever faults.
//
//   MIXTAPE_CPU_BF16=auto (or unset/empty)  the fastest kernel the CPU has: amx, else avx512bf16,
//                                           else emulated
//   MIXTAPE_CPU_BF16=native                 the fastest native kernel (amx, else avx512bf16); an
//                                           Error naming the variable and the missing CPU feature
//                                           where there is none
//   MIXTAPE_CPU_BF16=amx | avx512bf16       that kernel, or an Error naming what the CPU lacks
//   MIXTAPE_CPU_BF16=emulated               widen BF16 to FP32 and run the FP32 GEMM
// Anything else is an Error naming the variable, the value and the accepted ones. The variable is
// read once, at the first bf16_gemm_kernel() (an invalid value throws there, and again at every
// later call, never silently picks a path).
#pragma once
#include <string>

namespace mixtape::cpu {

// What CPUID and XGETBV report (and, for AMX, Linux's answer); all false off x86-64.
struct CpuFeatures {
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512_bf16 = false;   // CPUID.(EAX=7, ECX=1):EAX[5], the vdpbf16ps instruction
  bool os_zmm_state = false;  // XCR0 has SSE, AVX, opmask, ZMM_Hi256 and Hi16_ZMM state enabled
  bool amx_tile = false;      // CPUID.(EAX=7, ECX=0):EDX[24], the tile registers
  bool amx_bf16 = false;      // CPUID.(EAX=7, ECX=0):EDX[22], the tdpbf16ps instruction
  bool os_amx_state = false;  // XCR0 has XTILECFG and XTILEDATA state enabled (bits 17, 18)
  bool amx_permitted = false;  // Linux granted this process the tile data state (ARCH_REQ_XCOMP_PERM)
  bool fma = false;            // CPUID.1:ECX[12], FMA3 (the AVX-512 kernels' targets include it)
};

// This CPU's features from CPUID and XGETBV (probed once, then cached), with amx_permitted false:
// nothing is asked of the OS here, so a program that never chooses AMX never holds the grant. It
// answers as the CPU capped at isa_cap() (MIXTAPE_CPU_ISA, ops/cpu/isa.h) would: the CPUID bits of
// the levels above the cap read false (AVX512F/BW/VL, AVX512_BF16, AMX-TILE/BF16).
const CpuFeatures& cpu_features();
// The probe itself, whatever the cap (ops/cpu/isa.cpp's hardware answers).
const CpuFeatures& probed_cpu_features();
const CpuFeatures& probed_cpu_features_with_amx();  // asks Linux, as cpu_features_with_amx() does
// cpu_features() with amx_permitted answered. The first call asks Linux for the tile data state
// (arch_prctl ARCH_REQ_XCOMP_PERM) when the CPU and XCR0 have AMX. The grant is process-wide and
// permanent, and makes the kernel refuse later sigaltstack() calls smaller than the larger signal
// frame AMX needs, so it is asked only where AMX may run: MIXTAPE_CPU_BF16 auto, native or amx
// (bf16_gemm_kernel()), an override for Native or Amx, bgemm_amx_available(). Capped like
// cpu_features(): below the amx cap it is cpu_features(), and Linux is not asked.
const CpuFeatures& cpu_features_with_amx();

// What `f` lacks for each native kernel, e.g. "AVX512_BF16 (the vdpbf16ps instruction)", comma
// separated; empty when nothing.
std::string bf16_native_missing(const CpuFeatures& f);  // the vdpbf16ps kernel
std::string bf16_amx_missing(const CpuFeatures& f);     // the AMX kernel (includes the above)
// True when `f` allows that kernel: its missing list is empty.
bool can_run_bf16_native(const CpuFeatures& f);
bool can_run_bf16_amx(const CpuFeatures& f);

// What a caller asks for (an override, or the variable's value).
enum class Bf16GemmPath { Native, Emulated, Avx512Bf16, Amx };
// What runs.
enum class Bf16Kernel { Emulated, Avx512Bf16, Amx };

// The kernel MIXTAPE_CPU_BF16 = `value` selects on a CPU with features `f` (nullptr or "" = auto).
// Throws mixtape::Error for an unknown value, or for a native kernel `f` cannot run (the message
// names MIXTAPE_CPU_BF16 and the missing features). Pure: tests call it with made-up CpuFeatures
// to check the messages on any machine.
Bf16Kernel parse_cpu_bf16(const char* value, const CpuFeatures& f);
// The kernel a requested path resolves to on `f` (Native: the fastest native one); throws as
// parse_cpu_bf16 does for the corresponding value.
Bf16Kernel resolve_bf16_path(Bf16GemmPath path, const CpuFeatures& f);

// Which kernel BF16 GEMMs run in this process: an active Override(Bf16GemmPath), else MIXTAPE_CPU_BF16
// as parsed once against cpu_features_with_amx() (cpu_features() for emulated and avx512bf16).
Bf16Kernel bf16_gemm_kernel();
// True when BF16 operands are multiplied natively (AMX or vdpbf16ps), false when widened to FP32.
// Under auto it does not resolve the kernel (so it never asks Linux for AMX): FP32 code paths call it.
bool bf16_native_gemm();
// True when BF16 GEMMs run on vdpbf16ps (bf16_gemm_kernel() is Avx512Bf16): the condition of the
// direct BF16 convolution kernels, which AMX and emulated BF16 leave to their own paths. Resolves
// the kernel only where BF16 runs natively.
bool bf16_on_vdpbf16ps();

// e.g. "native (AMX tdpbf16ps)", "native (AVX512_BF16 vdpbf16ps)" or "emulated (BF16 widened to
// FP32, FP32 GEMM)", for logs.
std::string bf16_gemm_description();

// cpu::Override(Bf16GemmPath) (ops/cpu/steering.h) makes bf16_gemm_kernel() answer for a path
// whatever MIXTAPE_CPU_BF16 says (the variable is not read, so an invalid value does not throw
// either); constructing it for a kernel the CPU cannot run throws the Error the corresponding
// MIXTAPE_CPU_BF16 value would.

}  // namespace mixtape::cpu
