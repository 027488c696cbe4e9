// ops/cpu/isa.h — the one place that says which x86 ISA levels the CPU kernels are compiled for and
// which of them this CPU runs. Owns: MIXTAPE_X86_KERNELS (1 where the build can compile them:
// x86-64 with GCC or Clang, which have the target attributes and <immintrin.h>), the three target
// attributes every kernel function carries, the warning pragmas their intrinsics need, and the
// run-time answers for each level (built on the CPUID probe, ops/cpu/cpu_features.h), capped by
// MIXTAPE_CPU_ISA or an Override(IsaLevel) (ops/cpu/steering.h), so that this CPU can run the
// paths of a lesser one.
// Invariant: a function with MT_TARGET_<level> runs only after isa_<level>() said yes (its file's
// entry point checks, and throws an Error naming what the CPU lacks otherwise); the rest of the
// library stays baseline x86-64.
//
//   level       target attribute                        isa_*() needs
//   AVX-512     MT_TARGET_AVX512 (data movement,        AVX-512 F, BW, VL, FMA and the OS saving
//               elementwise), MT_TARGET_AVX512_FMA      ZMM/opmask state
//               (GEMM and conv kernels)
//   AVX512-BF16 MT_TARGET_AVX512BF16                    that and AVX512_BF16 (vdpbf16ps)
//   AMX         MT_TARGET_AMX                           that and AMX-TILE, AMX-BF16, XCR0's tile
//                                                       state and Linux's permission (asked at the
//                                                       first isa_amx())
// Fusing: GCC's C++ default (-ffp-contract=fast) may contract a product and a sum written apart
// (_mm512_add_ps(_mm512_mul_ps(a, b), c)) into one FMA under any of these targets, AVX-512F's
// included; where the two roundings are the contract, use an explicitly rounded product
// (_mm512_mul_round_ps) or compile the file with -ffp-contract=off (CMakeLists.txt does for batch norm).
#pragma once
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/steering.h"  // IsaLevel

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__CUDACC__)
#include <immintrin.h>
#define MIXTAPE_X86_KERNELS 1
#define MT_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define MT_TARGET_AVX512_FMA __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
#define MT_TARGET_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))
#define MT_TARGET_AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma,amx-tile,amx-bf16")))
// GCC 12's shuffle, permute and convert intrinsics start from an undefined vector (a
// self-initialised variable) that -W(maybe-)uninitialized reports in every caller, depending on
// -O; the value is never read. A kernel section opens with MT_KERNELS_BEGIN and closes with
// MT_KERNELS_END.
#if defined(__clang__)
#define MT_KERNELS_BEGIN _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#else
#define MT_KERNELS_BEGIN                                                                 \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"") \
      _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#endif
#define MT_KERNELS_END _Pragma("GCC diagnostic pop")
// A kernel file's entry points exist in every build; their calls into its target code are written
// MT_X86_ONLY(call), which is the call where the kernels are built.
#define MT_X86_ONLY(...) __VA_ARGS__
#else
#define MIXTAPE_X86_KERNELS 0
#define MT_TARGET_AVX512
#define MT_TARGET_AVX512_FMA
#define MT_TARGET_AVX512BF16
#define MT_TARGET_AMX
#define MT_KERNELS_BEGIN
#define MT_KERNELS_END
// Elsewhere it throws an Error naming the function (never reached: isa_*() is false, so the entry
// point's own check, or its caller's, declined first).
#define MT_X86_ONLY(...) ::mixtape::cpu::no_x86_kernels(__func__)
#endif

namespace mixtape::cpu {

// True when this build has the kernels, this CPU (and OS) runs the level (probed once) and
// isa_cap() allows it.
bool isa_avx512();
bool isa_avx512bf16();
bool isa_amx();  // asks Linux for the AMX tile state (cpu_features_with_amx()) the first time

// The highest level the kernels may use: an active Override(IsaLevel), else MIXTAPE_CPU_ISA =
// baseline | avx512 | avx512bf16 | amx (unset or empty: no cap, i.e. amx), read once. A level this
// CPU lacks, or an unknown value, is an Error naming the variable (and what the CPU lacks, or the
// accepted values), thrown at every call. cpu_features() answers as the capped CPU too.
IsaLevel isa_cap();
// Whether this CPU (and OS) runs `level`, whatever the cap (amx asks Linux, as isa_amx() does).
bool isa_hardware_has(IsaLevel level);
const char* isa_level_name(IsaLevel level);  // "baseline", "avx512", "avx512bf16", "amx"

#if !MIXTAPE_X86_KERNELS
// What MT_X86_ONLY(call) is in a build without the kernels: converts to the call's result type.
struct NoX86Kernels {
  template <typename T>
  operator T() const {
    return T();
  }
};
[[noreturn]] NoX86Kernels no_x86_kernels(const char* function);
#endif

}  // namespace mixtape::cpu
