// ops/cpu/steering.h — the process-wide switches that steer the CPU kernel lists, and the one
// in-process override that sets any of them (tests and benchmarks that compare paths in one
// process). Owns: the switches' value types and the override slots.
// Invariant: while an Override is alive its switch answers from it, whatever the environment
// says; destroying it restores the answer before it (overrides nest). Process-wide, not per thread.
//
//   switch                  environment variable (parsed once, in the file named)   read by
//   Bf16GemmPath            MIXTAPE_CPU_BF16 (ops/cpu/cpu_features.cpp)            bf16_gemm_kernel()
//   FloatGemm               MIXTAPE_GEMM (ops/cpu/blas.cpp)                         own_kernels_enabled()
//   ConvAlgo                MIXTAPE_CPU_CONV (ops/cpu/conv_implicit_gemm.cpp)       conv_kernels_enabled()
//   KernelSpec              MIXTAPE_CPU_KERNEL (ops/cpu/kernel_table.cpp)           forced_kernel()
//   IsaLevel                MIXTAPE_CPU_ISA (ops/cpu/isa.cpp)                       isa_*(), cpu_features()
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

#include "ops/cpu/cpu_features.h"  // Bf16GemmPath

namespace mixtape::cpu {

enum class FloatGemm { Auto, Blas };    // Blas: as MIXTAPE_GEMM=blas
enum class ConvAlgo { Auto, Im2col };   // Im2col: as MIXTAPE_CPU_CONV=im2col
// MIXTAPE_CPU_ISA's levels, each including the ones before it: the highest the kernels may use.
enum class IsaLevel { Baseline, Avx512, Avx512Bf16, Amx };
struct KernelSpec {                     // MIXTAPE_CPU_KERNEL's syntax; "" forces nothing
  std::string spec;
};

enum class Switch { Bf16Gemm, FloatGemm, ConvAlgo, Kernels, IsaCap, Count };
// A switch's override: 0 when none, else the value its file encodes (1 + an enum value; for
// Kernels, the address of the parsed spec).
std::atomic<intptr_t>& override_slot(Switch s);

class Override {
 public:
  explicit Override(Bf16GemmPath path);  // throws the MIXTAPE_CPU_BF16 Error where the CPU cannot run it
  explicit Override(FloatGemm choice);
  explicit Override(ConvAlgo algo);
  explicit Override(const KernelSpec& kernels);  // throws the MIXTAPE_CPU_KERNEL Error for an invalid spec
  // Caps the ISA (throws the MIXTAPE_CPU_ISA Error for a level this CPU lacks, or one above the
  // cap in force: a cap only lowers it). Construct it before a Bf16GemmPath override: that one
  // was checked against the ISA in force at its own construction.
  explicit Override(IsaLevel cap);
  ~Override();
  Override(const Override&) = delete;
  Override& operator=(const Override&) = delete;

 private:
  Switch which_;
  intptr_t previous_ = 0;
  intptr_t mine_ = 0;
  void (*release_)(intptr_t) = nullptr;  // frees what mine_ points to (Kernels)
};

}  // namespace mixtape::cpu
