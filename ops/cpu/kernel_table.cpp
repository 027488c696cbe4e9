// ops/cpu/kernel_table.cpp — the kernel trace (see kernel_table.h).
#include "ops/cpu/kernel_table.h"

#include "core/trace.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/conv_implicit_gemm.h"
#include "ops/cpu/cpu_features.h"

namespace mixtape::cpu {

std::string kernel_choice_line(const char* op_pass, const std::string& problem, const char* kernel,
                               const std::string& skipped) {
  std::string s = std::string(op_pass) + " " + problem + " -> " + kernel;
  if (!skipped.empty()) s += " (skipped: " + skipped + ")";
  return s;
}

bool kernel_trace_on() { return trace_enabled(TraceKind::Kernel); }

std::string steering_tags(bool bf16, bool conv) {
  std::string t;
  auto add = [&](const char* s) { t += (t.empty() ? "" : ", ") + std::string(s); };
  if (bf16) {
    switch (bf16_gemm_kernel()) {
      case Bf16Kernel::Amx: add("bf16 amx"); break;
      case Bf16Kernel::Avx512Bf16: add("bf16 avx512bf16"); break;
      case Bf16Kernel::Emulated: add("bf16 emulated"); break;
    }
  }
  if (conv && !conv_implicit_gemm_enabled()) add("conv im2col");
  if (!own_float_gemm()) add("gemm blas");
  return t.empty() ? t : " [" + t + "]";
}

void emit_kernel_choice(const std::string& line) { trace_line(TraceKind::Kernel, "[kernel] " + line); }

}  // namespace mixtape::cpu
