// ops/cpu/elementwise_kernels.cpp — the kernel lists of BF16 elementwise rows (op.pass
// "elementwise.fwd", see ops/cpu/elementwise.h). Invariant: the choice depends on the functor's
// kind, the rows' byte strides, a wrapped-scalar operand, isa_avx512() and MIXTAPE_CPU_KERNEL only;
// every entry gives the generic loop's bits, so the choice changes speed, never results.
#include <string>

#include "ops/cpu/elementwise.h"
#include "ops/cpu/kernel_table.h"

namespace mixtape::cpu {
namespace {

struct RowProblem {
  const int64_t* strides;  // bytes, one per operand (output first); null with a wrapped scalar
  int operands;
  bool scalar;
};

// No thresholds: the row kernels win at every length (2.7-3.5x on ResNet-8's tensors for
// rows_avx512, docs/CPU.md "16-bit storage"); only the layout and the ISA decide.
const char* rows_declines(const RowProblem& p) {
  if (p.scalar) return "an operand is a wrapped scalar (the block loop reads it in f32)";
  for (int k = 0; k < p.operands; ++k)
    if (p.strides[k] != 2) return "rows not contiguous (an inner stride is not 2 bytes)";
  return nullptr;
}
const char* avx512_rows_declines(const RowProblem& p) {
  if (const char* why = rows_declines(p)) return why;
  return isa_avx512() ? nullptr : "no AVX-512 F/BW/VL (isa_avx512)";
}

using RowEntry = FixedKernelEntry<RowProblem>;
const RowEntry kArithmeticRows[] = {{"rows_avx512", avx512_rows_declines}, {"generic", nullptr}};
const RowEntry kBitsRows[] = {{"bits_avx512", avx512_rows_declines}, {"bits", rows_declines}, {"generic", nullptr}};
const bool kRowsRegistered =
    register_kernel_list("elementwise.fwd", kArithmeticRows) && register_kernel_list("elementwise.fwd", kBitsRows);

}  // namespace

Bf16RowKernel choose_bf16_rows(const char* op, bool arithmetic, const int64_t* row_strides, int operands,
                               bool scalar_operand, bool trace) {
  const RowProblem p{row_strides, operands, scalar_operand};
  const KernelPick k = arithmetic ? choose_kernel("elementwise.fwd", kArithmeticRows, p)
                                  : choose_kernel("elementwise.fwd", kBitsRows, p);
  if (trace) trace_kernel_choice(
      "elementwise.fwd",
      [&] {
        std::string s = std::string("bf16 op=") + op + " strides=";
        if (scalar_operand) s += "scalar";
        for (int i = 0; !scalar_operand && i < operands; ++i) s += (i ? "x" : "") + std::to_string(row_strides[i]);
        return s + isa_tag();
      },
      k.name, k.skipped);
  if (arithmetic) return k.index == 0 ? Bf16RowKernel::RowsAvx512 : Bf16RowKernel::Generic;
  return static_cast<Bf16RowKernel>(k.index + 1);
}

}  // namespace mixtape::cpu
