// ops/cpu/kernel_table.h — which CPU kernel runs, in one place: an ordered list of kernels per
// (op, pass, dtype), the first one that applies runs, and MIXTAPE_TRACE=kernel names the choice.
// Invariant: the choice is a pure function of the problem (shape, dtype) and the process's
// steering (MIXTAPE_CPU_KERNEL and its aliases, overrides), never of timing or thread count.
#pragma once
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "core/profiler.h"

namespace mixtape::cpu {

bool kernel_trace_on();  // MIXTAPE_TRACE=kernel, or a ScopedTrace with TraceKind::Kernel

// One entry of an ordered kernel list: its name and why it declines a problem ("" when it takes
// it). The op walks its list (one per op, pass and dtype) in order and runs the first entry that
// takes the problem; the last entry, the generic reference, takes every problem.
template <typename P>
struct KernelEntry {
  const char* name;
  std::string (*declines)(const P&);
};

// The same with fixed-word reasons (a const char*, null when it takes the problem), for lists on
// a hot path whose choice must not allocate (the BF16 elementwise rows, per pointwise call).
template <typename P>
struct FixedKernelEntry {
  const char* name;
  const char* (*declines)(const P&);
};

// The entry chosen for a problem and, when the kernel trace is on, "name: why; ..." for the
// entries before it.
struct KernelPick {
  int index = -1;
  const char* name = nullptr;
  std::string skipped;
};

// A declines() answer is a std::string, or a const char* (null or "" when it takes the problem)
// for lists on a hot path, such as cpu::gemm's, whose reasons are fixed words and must not allocate.
inline bool takes(const std::string& why) { return why.empty(); }
inline bool takes(const char* why) { return why == nullptr || *why == '\0'; }

// Entry: any type with `name` and `declines` like KernelEntry's (cpu::gemm's entries also carry
// their run function).
template <typename Entry, size_t N, typename P>
KernelPick choose_kernel(const Entry (&list)[N], const P& p) {
  KernelPick k;
  int tracing = -1;  // asked at the first decline: most calls take their first entry
  for (size_t i = 0; i < N; ++i) {
    if (!list[i].declines) {
      k.index = static_cast<int>(i);
      k.name = list[i].name;
      return k;
    }
    const auto why = list[i].declines(p);
    if (takes(why)) {
      k.index = static_cast<int>(i);
      k.name = list[i].name;
      return k;
    }
    if (tracing < 0) tracing = kernel_trace_on();
    if (!tracing) continue;
    if (!k.skipped.empty()) k.skipped.append("; ");
    k.skipped.append(list[i].name).append(": ").append(why);
  }
  return k;  // unreachable: every list ends with a reference that declines nothing
}

// ---- forcing an entry: MIXTAPE_CPU_KERNEL=<op.pass>:<name>[,...] ----
// e.g. MIXTAPE_CPU_KERNEL=conv2d.fwd:im2col_gemm,matmul.fwd:blas_sgemm. A forced name steers every
// list of its op.pass that holds it (lists are per dtype: conv2d.fwd:pairs_avx512bf16 steers BF16
// convs and leaves FP32 ones to their list); where it declines the problem, the op throws an Error
// naming the op.pass, the entry and its declines() reason. Read once, at the first choice; an
// invalid value (not op.pass:name, an unknown op.pass, a name no list of that op.pass holds) throws
// an Error naming the variable and the accepted values, at every choice.

// The name forced for `op_pass`, or nullptr (an Override(KernelSpec) answers first).
const char* forced_kernel(const char* op_pass);
// Records a list's names under `op_pass`, for the checks above (static initialisation: every
// forceable list calls it once).
bool register_kernel_names(const char* op_pass, const std::vector<const char*>& names);
template <typename Entry, size_t N>
bool register_kernel_list(const char* op_pass, const Entry (&list)[N]) {
  std::vector<const char*> names;
  for (const Entry& e : list) names.push_back(e.name);
  return register_kernel_names(op_pass, names);
}
// Every op.pass with a forceable list, and the names its lists hold (in list order, first list
// first): what tests/ops/test_kernel_entries.cpp runs every entry from.
std::vector<std::string> kernel_op_passes();
std::vector<std::string> kernel_names(const std::string& op_pass);
[[noreturn]] void refuse_forced_kernel(const char* op_pass, const char* name, const std::string& why);

// cpu::Override(KernelSpec{spec}) (ops/cpu/steering.h) makes forced_kernel() answer from `spec`
// (MIXTAPE_CPU_KERNEL's syntax) whatever the variable says: MIXTAPE_CPU_KERNEL's in-process twin.

// choose_kernel for a forceable list of `op_pass`: a forced name in this list runs if it takes
// the problem and is refused if not; otherwise the list's own choice.
template <typename Entry, size_t N, typename P>
KernelPick choose_kernel(const char* op_pass, const Entry (&list)[N], const P& p) {
  if (const char* f = forced_kernel(op_pass)) {
    for (size_t i = 0; i < N; ++i) {
      if (std::strcmp(list[i].name, f) != 0) continue;
      if (list[i].declines) {
        const auto why = list[i].declines(p);
        if (!takes(why)) refuse_forced_kernel(op_pass, f, why);
      }
      KernelPick k;
      k.index = static_cast<int>(i);
      k.name = list[i].name;
      return k;
    }
  }
  return choose_kernel(list, p);
}

// MIXTAPE_TRACE=kernel: prints (or captures) one line,
//   [kernel] <op_pass> <problem> -> <kernel> (skipped: <name>: <why>; ...)
// e.g. "[kernel] conv2d.wgrad bf16 N=128 C=16 H=28 W=28 O=32 k3 s1 p1 d1 g1 -> pairs_avx512bf16";
// `skipped` lists the entries before the chosen one and why each declined ("" for none). Calls
// describe() only when the trace is on. Under MIXTAPE_PROFILE it also names the kernel to the
// profiler, whose table then has a row per op and kernel.
template <typename Describe>
void trace_kernel_choice(const char* op_pass, Describe&& describe, const char* kernel, const std::string& skipped);

// The line itself (without the "[kernel] " prefix), as the trace prints it.
std::string kernel_choice_line(const char* op_pass, const std::string& problem, const char* kernel,
                               const std::string& skipped);
// The process state a choice depends on beyond the problem, as the trace shows it after the
// problem: " [bf16 <amx|avx512bf16|emulated>]" for a BF16 problem, "conv im2col" when the AVX-512
// conv kernels are off (MIXTAPE_CPU_CONV=im2col, an override, or no AVX-512), "gemm blas" when the
// own float GEMM is (MIXTAPE_GEMM=blas, or no AVX-512); "" when none applies.
std::string steering_tags(bool bf16, bool conv);
// The steering the lists of batch norm, max pooling and the BF16 elementwise rows depend on:
// " [no avx512]" where isa_avx512() is false, "" otherwise.
const char* isa_tag();
void emit_kernel_choice(const std::string& line);

template <typename Describe>
void trace_kernel_choice(const char* op_pass, Describe&& describe, const char* kernel, const std::string& skipped) {
  if (kernel_trace_on()) emit_kernel_choice(kernel_choice_line(op_pass, describe(), kernel, skipped));
  if (profiler::enabled()) profiler::note_kernel(kernel);  // MIXTAPE_PROFILE's kernel column
}

}  // namespace mixtape::cpu
