// ops/cpu/blas.cpp — choosing, loading and calling the CPU BLAS (see ops/cpu/blas.h).
//
// Why dlopen and not a link: the distribution's default OpenBLAS is its pthread build, whose
// threads spin beside OpenMP's and steal their cores; the OpenMP build runs on the same pool as
// mixtape's loops. Linking picks whatever the system's alternatives point at; loading lets
// mixtape prefer the OpenMP build and still fall back (and report what it runs on); the
// OpenMP build trained SmallCNN 1.24x faster (bench/notes.md, 2026-12-06).
// OpenBLAS's kernel choice (OPENBLAS_CORETYPE, read by the library when it loads) is left to
// the user and the machine: some machines set it on purpose, as older OpenBLAS builds compute
// wrong results with the kernels they would pick.
// Invariant: one library per process, loaded once (a function-local static), never unloaded.
#include "ops/cpu/blas.h"

#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <vector>

#include "core/convert.h"
#include "core/error.h"
#include "ops/cpu/bgemm_amx.h"
#include "ops/cpu/bgemm_avx512bf16.h"
#include "ops/cpu/gemm_args.h"
#include "ops/cpu/cpu_features.h"
#include "ops/cpu/kernel_table.h"
#include "ops/cpu/sgemm_avx512.h"

#ifndef MIXTAPE_OPENBLAS_OPENMP_LIBRARY
#define MIXTAPE_OPENBLAS_OPENMP_LIBRARY ""
#endif
#ifndef MIXTAPE_BLAS_DEFAULT_LIBRARY
#define MIXTAPE_BLAS_DEFAULT_LIBRARY ""
#endif

namespace mixtape::cpu {
namespace {

struct Blas {
  decltype(&cblas_sgemm) sgemm = nullptr;
  decltype(&cblas_dgemm) dgemm = nullptr;
  // OpenBLAS extensions: null for another CBLAS.
  decltype(&openblas_set_num_threads) set_num_threads = nullptr;
  decltype(&openblas_get_num_threads) get_num_threads = nullptr;
  decltype(&openblas_get_parallel) get_parallel = nullptr;
  decltype(&openblas_get_corename) get_corename = nullptr;
  BlasInfo info;
};

template <typename F>
void bind(void* h, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(h, name));
}

Blas load() {
  std::vector<std::string> candidates;
  const char* user = std::getenv("MIXTAPE_BLAS_LIBRARY");
  if (user && *user) {
    candidates.push_back(user);  // explicit: no fallback
  } else {
    for (const char* c : {MIXTAPE_OPENBLAS_OPENMP_LIBRARY, MIXTAPE_BLAS_DEFAULT_LIBRARY, "libopenblas.so.0"})
      if (*c) candidates.push_back(c);
  }
  std::string tried;
  for (const std::string& name : candidates) {
    void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* why = dlerror();
      tried += "\n  " + name + ": " + (why ? why : "dlopen failed");
      continue;
    }
    Blas b;
    bind(h, "cblas_sgemm", b.sgemm);
    bind(h, "cblas_dgemm", b.dgemm);
    if (!b.sgemm || !b.dgemm) {
      tried += "\n  " + name + ": has no cblas_sgemm / cblas_dgemm";
      continue;  // left loaded: harmless, and dlclose of a BLAS that started threads is not
    }
    bind(h, "openblas_set_num_threads", b.set_num_threads);
    bind(h, "openblas_get_num_threads", b.get_num_threads);
    bind(h, "openblas_get_parallel", b.get_parallel);
    bind(h, "openblas_get_corename", b.get_corename);
    b.info.library = name;
    b.info.core = b.get_corename ? b.get_corename() : "?";
    const int par = b.get_parallel ? b.get_parallel() : -1;
    b.info.threading = par == 0 ? "sequential" : par == 1 ? "pthread" : par == 2 ? "openmp" : "?";
    return b;
  }
  MT_ERROR("BLAS: cannot load a CBLAS library (mixtape's CPU GEMM, conv and linear need one); tried:", tried,
           "\ninstall Debian's libopenblas0-openmp (scripts/install-deps.sh does), or set MIXTAPE_BLAS_LIBRARY to "
           "a CBLAS shared library");
}

const Blas& blas() {
  static const Blas b = load();
  return b;
}

CBLAS_TRANSPOSE trans(bool t) { return t ? CblasTrans : CblasNoTrans; }

// Float GEMMs run on mixtape's AVX-512 kernel where the CPU has one, unless MIXTAPE_GEMM=blas;
// C with fewer than 16 rows or columns stays with BLAS (ops/cpu/sgemm_avx512.h says why).
bool native_sgemm() {
  if (const intptr_t o = override_slot(Switch::FloatGemm).load(std::memory_order_relaxed))
    return o - 1 == static_cast<intptr_t>(FloatGemm::Auto) && sgemm_avx512_available();
  static const bool use = [] {
    const char* choice = std::getenv("MIXTAPE_GEMM");
    const std::string c = choice ? choice : "";
    MT_CHECK(c.empty() || c == "blas" || c == "auto", "MIXTAPE_GEMM: expected 'blas' or 'auto', got '", c, "'");
    return c != "blas";
  }();
  return use && sgemm_avx512_available();  // asked at each call: an ISA cap (ops/cpu/isa.h) may change it
}

}  // namespace

bool own_kernels_enabled() { return native_sgemm(); }

Override::Override(FloatGemm choice) : which_(Switch::FloatGemm) {
  mine_ = 1 + static_cast<intptr_t>(choice);
  previous_ = override_slot(which_).exchange(mine_);
}

namespace {

// ---- cpu::gemm's kernel lists, one per operand type: the first entry that takes the problem runs ----
struct GemmProblem {
  int64_t m, n;  // C's rows and columns
};
template <typename A, typename T>
struct GemmEntry {
  const char* name;
  const char* (*declines)(const GemmProblem&);  // null: takes every problem (the reference)
  void (*run)(bool, bool, int64_t, int64_t, int64_t, const A*, int64_t, const A*, int64_t, T, T*, int64_t);
};

// mixtape's AVX-512 SGEMM; C with fewer than 16 rows or columns stays with BLAS
// (ops/cpu/sgemm_avx512.h says why).
const char* sgemm_avx512_declines(const GemmProblem& p) {
  if (!native_sgemm()) return "own float GEMM off (MIXTAPE_GEMM=blas or no AVX-512)";
  if (p.m < 16 || p.n < 16) return "C has fewer than 16 rows or columns (OpenBLAS's small-matrix kernels suit it)";
  return nullptr;
}
void blas_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                int64_t ldb, float beta, float* c, int64_t ldc) {
  blas().sgemm(CblasRowMajor, trans(ta), trans(tb), int(m), int(n), int(k), 1.0f, a, int(lda), b, int(ldb), beta, c,
               int(ldc));
}
void blas_dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
                int64_t ldb, double beta, double* c, int64_t ldc) {
  blas().dgemm(CblasRowMajor, trans(ta), trans(tb), int(m), int(n), int(k), 1.0, a, int(lda), b, int(ldb), beta, c,
               int(ldc));
}

// BF16 operands: the kernel MIXTAPE_CPU_BF16 (bf16_gemm_kernel()) names, else widened.
const char* bgemm_amx_declines(const GemmProblem&) {
  return bf16_gemm_kernel() == Bf16Kernel::Amx ? nullptr : "BF16 GEMMs not on AMX (MIXTAPE_CPU_BF16, or no AMX)";
}
const char* bgemm_avx512bf16_declines(const GemmProblem&) {
  return bf16_gemm_kernel() == Bf16Kernel::Avx512Bf16 ? nullptr
                                                      : "BF16 GEMMs not on vdpbf16ps (MIXTAPE_CPU_BF16, or no AVX512_BF16)";
}
// op(X) (rows, cols), stored row-major with leading dimension ld (transposed when tr), widened
// into a dense row-major (stored rows, stored cols) float matrix: the layout flag is kept.
std::vector<float> widen(bool tr, int64_t rows, int64_t cols, const BFloat16* x, int64_t ld) {
  const int64_t sr = tr ? cols : rows, sc = tr ? rows : cols;  // stored shape
  std::vector<float> out(static_cast<size_t>(sr * sc));
  for (int64_t i = 0; i < sr; ++i) convert_bfloat16_to_float(x + i * ld, out.data() + i * sc, static_cast<size_t>(sc));
  return out;
}
// The reference: both operands widened exactly to FP32, then the float list.
void bgemm_widened(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t lda,
                   const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (gemm_args_trivial("gemm (bf16)", ta, tb, m, n, k, lda, ldb, beta, c, ldc)) return;
  const std::vector<float> af = widen(ta, m, k, a, lda), bf = widen(tb, k, n, b, ldb);
  gemm(ta, tb, m, n, k, af.data(), ta ? std::max<int64_t>(m, 1) : std::max<int64_t>(k, 1), bf.data(),
       tb ? std::max<int64_t>(k, 1) : std::max<int64_t>(n, 1), beta, c, ldc);
}

const GemmEntry<float, float> kGemmF32[] = {{"sgemm_avx512", sgemm_avx512_declines, sgemm_avx512},
                                            {"blas_sgemm", nullptr, blas_sgemm}};
const GemmEntry<double, double> kGemmF64[] = {{"blas_dgemm", nullptr, blas_dgemm}};
const GemmEntry<BFloat16, float> kGemmBf16[] = {{"bgemm_amx", bgemm_amx_declines, bgemm_amx},
                                                {"bgemm_avx512bf16", bgemm_avx512bf16_declines, bgemm_avx512bf16},
                                                {"widened", nullptr, bgemm_widened}};

// matmul and linear force these lists under their own op.pass (MIXTAPE_CPU_KERNEL=matmul.fwd:...).
const bool kGemmRegistered = register_kernel_list("matmul.fwd", kGemmF32) &&
                             register_kernel_list("matmul.fwd", kGemmBf16) &&
                             register_kernel_list("matmul.fwd", kGemmF64) &&
                             register_kernel_list("linear.fwd", kGemmF32) &&
                             register_kernel_list("linear.fwd", kGemmBf16) && register_kernel_list("linear.fwd", kGemmF64);

}  // namespace

KernelPick gemm_pick(DType operands, int64_t m, int64_t n, const char* op_pass) {
  const GemmProblem p{m, n};
  if (operands == DType::Float64) return choose_kernel(op_pass, kGemmF64, p);
  if (operands == DType::BFloat16) {
    KernelPick k = choose_kernel(op_pass, kGemmBf16, p);
    if (std::string_view(k.name) != "widened") return k;
    // Widened operands run the float list: name its choice (what matmul and linear trace); the
    // index stays the BF16 list's.
    const KernelPick f = choose_kernel(kGemmF32, p);
    k.name = f.name;
    if (!f.skipped.empty()) k.skipped += (k.skipped.empty() ? "" : "; ") + f.skipped;
    return k;
  }
  return choose_kernel(op_pass, kGemmF32, p);
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
          float beta, float* c, int64_t ldc, int entry) {
  if (entry < 0) entry = choose_kernel(kGemmF32, GemmProblem{m, n}).index;
  kGemmF32[entry].run(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
          int64_t ldb, double beta, double* c, int64_t ldc, int /*entry: the list has one*/) {
  blas_dgemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t lda, const BFloat16* b,
          int64_t ldb, float beta, float* c, int64_t ldc, int entry) {
  if (entry < 0) entry = choose_kernel(kGemmBf16, GemmProblem{m, n}).index;
  kGemmBf16[entry].run(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

void blas_set_num_threads(int n) {
  if (blas().set_num_threads) blas().set_num_threads(n);
}

BlasInfo blas_info() { return blas().info; }

std::string blas_info_line() {
  const BlasInfo i = blas_info();
  return "bf16 GEMM: " + bf16_gemm_description() + "; " +
         (native_sgemm() ? std::string("f32 GEMM: mixtape AVX-512; f64 GEMM: ") : std::string()) +
         (i.core == "?" ? std::string("CBLAS") : "OpenBLAS (" + i.threading + ") " + i.core) + ", " + i.library;
}

namespace {
std::mutex single_mu;
int single_depth = 0;
int single_saved = 1;
}  // namespace

BlasSingleThreaded::BlasSingleThreaded(bool active) : active_(false) {
  // Resolve the configuration here, on the calling thread: a bad MIXTAPE_GEMM or a BLAS that
  // cannot be loaded throws now, not inside the caller's parallel region (where an exception
  // would terminate the process). MIXTAPE_CPU_BF16 likewise.
  native_sgemm();
  bf16_native_gemm();
  const Blas& b = blas();
  active_ = active && b.info.threading == "pthread" && b.set_num_threads && b.get_num_threads;
  if (!active_) return;
  std::lock_guard<std::mutex> lock(single_mu);
  if (single_depth++ == 0) {
    single_saved = blas().get_num_threads();
    if (single_saved != 1) blas().set_num_threads(1);
  }
}

BlasSingleThreaded::~BlasSingleThreaded() {
  if (!active_) return;
  std::lock_guard<std::mutex> lock(single_mu);
  if (--single_depth == 0 && single_saved != 1) blas().set_num_threads(single_saved);
}

}  // namespace mixtape::cpu
