// ops/cpu/blas.h — the one door to the CPU BLAS (OpenBLAS): every CPU GEMM of mixtape goes
// through cpu::gemm, and the library behind it is chosen and loaded here, at the first call.
//
// Which library, and why it is loaded rather than linked (ops/cpu/blas.cpp has the details):
//   1. $MIXTAPE_BLAS_LIBRARY when set (a path or soname of any CBLAS);
//   2. OpenBLAS's OpenMP build (Debian's libopenblas0-openmp) when installed: it runs its
//      threads on mixtape's OpenMP pool, so BLAS and mixtape's loops never oversubscribe the
//      cores, and a GEMM called inside an OpenMP parallel region runs on its calling thread;
//   3. the OpenBLAS the build found (Debian's default, the pthread build), then libopenblas.so.0.
// Float GEMMs run on mixtape's own AVX-512 kernel instead (ops/cpu/sgemm_avx512.h) when the CPU
// has AVX-512 (isa_avx512(), ops/cpu/isa.h), unless MIXTAPE_GEMM=blas.
// Results are bit-identical for a fixed library, OpenBLAS core type and thread count.
#pragma once
#include <cstdint>
#include <string>

#include "core/bfloat16.h"
#include "core/dtype.h"
#include "ops/cpu/kernel_table.h"
#include "ops/cpu/steering.h"

namespace mixtape::cpu {

// Row-major C (m, n) = op(A) (m, k) @ op(B) (k, n) + beta C, op = transpose when ta / tb.
// Dimensions and leading dimensions must fit in int (the callers check, naming their op).
// `entry`: the index gemm_pick() chose in the operand type's list (matmul and linear pass it, so a
// forced kernel is checked on their own thread), or -1: the list's own choice.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
          float beta, float* c, int64_t ldc, int entry = -1);
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
          int64_t ldb, double beta, double* c, int64_t ldc, int entry = -1);

// BF16 operands, FP32 C (the contract of a tensor core with FP32 accumulation): the kernel
// bf16_gemm_kernel() names (ops/cpu/cpu_features.h, MIXTAPE_CPU_BF16) — AMX tiles
// (ops/cpu/bgemm_amx.h), vdpbf16ps (ops/cpu/bgemm_avx512bf16.h), or op(A) and op(B) widened
// exactly to FP32, keeping their layouts, and the float gemm above. They agree to within FP32
// summation error; docs/CPU.md, "BF16 GEMM". (matmul and linear call it only on a native kernel:
// on the emulated path they widen whole operands as they always did, so their bits do not change.)
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t lda, const BFloat16* b,
          int64_t ldb, float beta, float* c, int64_t ldc, int entry = -1);

// True when mixtape's own AVX-512 float kernels may run: isa_avx512() (ops/cpu/isa.h) and
// MIXTAPE_GEMM is not "blas". It gates the own SGEMM and every AVX-512 conv kernel (FP32 and the
// BF16 pair kernels alike; each conv entry also asks conv_kernels_enabled()). Reads MIXTAPE_GEMM
// once: a bad value throws here, at every call. An Override(FloatGemm) answers first
// (ops/cpu/steering.h).
bool own_kernels_enabled();

// The kernel gemm() runs for an (m, n) C of `operands` (what the kernel trace names), from its list:
//   f32 (f16 and emulated BF16 widen to it)  sgemm_avx512 (C at least 16 x 16) · blas_sgemm
//   bf16 (native)                            bgemm_amx · bgemm_avx512bf16 · widened (then the f32
//                                            list, whose choice is named)
//   f64                                      blas_dgemm
// with the entries skipped before it when the kernel trace is on. `op_pass` ("matmul.fwd",
// "linear.fwd") is what MIXTAPE_CPU_KERNEL forces it under: a forced entry that declines throws.
// The index is into the operand type's list (for widened BF16: the BF16 list's "widened").
KernelPick gemm_pick(DType operands, int64_t m, int64_t n, const char* op_pass);

// BLAS's own thread count (ops/threads.cpp keeps it equal to OpenMP's).
void blas_set_num_threads(int n);

struct BlasInfo {
  std::string library;    // what dlopen was given
  std::string core;       // OpenBLAS's kernel family ("SkylakeX", "Haswell", ...), or "?" for another BLAS
  std::string threading;  // "openmp", "pthread", "sequential" or "?"
};
// Loads the library if needed and describes it (examples and benchmarks print it).
BlasInfo blas_info();
// e.g. "bf16 GEMM: native (AVX512_BF16 vdpbf16ps); f32 GEMM: mixtape AVX-512; f64 GEMM: OpenBLAS
// (openmp) Haswell, /usr/lib/.../libopenblas.so.0"
std::string blas_info_line();

// While alive and `active`, a threaded BLAS that does not follow OpenMP's nesting (the pthread
// build) runs single-threaded, so that GEMMs called from every thread of an OpenMP loop do not
// each start a full set of BLAS threads (OpenBLAS's pthread build serialises them on a lock).
// Process-wide and reference counted; a no-op for the OpenMP and sequential builds. Construct it
// before the parallel region: it also loads the BLAS and reads MIXTAPE_GEMM on the calling
// thread, so their errors are thrown there (an exception leaving an OpenMP region terminates).
class BlasSingleThreaded {
 public:
  explicit BlasSingleThreaded(bool active);
  ~BlasSingleThreaded();
  BlasSingleThreaded(const BlasSingleThreaded&) = delete;
  BlasSingleThreaded& operator=(const BlasSingleThreaded&) = delete;

 private:
  bool active_;
};

}  // namespace mixtape::cpu
