// core/cuda/cublas_lazy.cpp — cuBLAS and cuBLASLt loaded on first use, not at process start.
// Why: libcublasLt (540 MB) costs ~0.4 CPU-seconds of page faults and static initialisation in
// every process that links it — measured here: an empty program 0.01 s, linked to cuBLAS 0.45 s.
// With ~1000 ctest processes that is minutes of CI for tests that never touch a GPU. So no layer
// links cuBLAS; the functions mixtape calls are defined here, and each resolves its real
// counterpart with dlopen/dlsym at its first call (cudart and cuDNN load cheaply and stay linked).
// Adding a cuBLAS/cuBLASLt function to mixtape: one MT_LAZY_CUBLAS line below (the link fails
// with "undefined reference" until it is there; the compiler checks the signature against the
// header, because a definition that differs from the extern "C" declaration does not compile).
// Invariant: the real functions are taken from the libraries' own handles (dlsym on the handle),
// so a program that also links cuBLAS itself never loops back into these stubs.
#include <dlfcn.h>

#include <string>

#include <cublasLt.h>
#include <cublas_v2.h>

#include "core/error.h"

#ifndef MIXTAPE_CUDA_LIBRARY_DIR
#define MIXTAPE_CUDA_LIBRARY_DIR ""
#endif
#ifndef MIXTAPE_CUBLAS_SOVERSION
#define MIXTAPE_CUBLAS_SOVERSION "13"
#endif

namespace mixtape::cuda::detail {
namespace {

// dlopen by soname (the loader searches this library's RUNPATH, which names the toolkit), then
// by the toolkit's directory as configured.
void* open_library(const char* base) {
  std::string soname = std::string(base) + ".so." + MIXTAPE_CUBLAS_SOVERSION;
  void* h = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h && MIXTAPE_CUDA_LIBRARY_DIR[0] != '\0') {
    std::string path = std::string(MIXTAPE_CUDA_LIBRARY_DIR) + "/" + soname;
    h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  if (!h) {
    const char* why = dlerror();
    MT_ERROR("cuBLAS: cannot load ", soname, ": ", why ? why : "unknown dlopen error");
  }
  return h;
}

void* cublas_library() {
  static void* h = open_library("libcublas");
  return h;
}
void* cublaslt_library() {
  static void* h = open_library("libcublasLt");
  return h;
}

void* resolve(void* library, const char* name) {
  void* f = dlsym(library, name);
  MT_CHECK(f != nullptr, "cuBLAS: symbol ", name, " not found: ", dlerror());
  return f;
}

}  // namespace
}  // namespace mixtape::cuda::detail

#define MT_LAZY_STR2(x) #x
#define MT_LAZY_STR(x) MT_LAZY_STR2(x)

// MT_LAZY_CUBLAS(library, return type, name, (parameters), (arguments)). `name` is macro-expanded
// first, so cublas_v2.h's renames (cublasCreate -> cublasCreate_v2) apply to both the stub and
// the symbol looked up.
#define MT_LAZY_CUBLAS(library, ret, name, params, args)                                             \
  extern "C" ret name params {                                                                       \
    using Fn = ret(*) params;                                                                        \
    static Fn fn = reinterpret_cast<Fn>(                                                             \
        ::mixtape::cuda::detail::resolve(::mixtape::cuda::detail::library(), MT_LAZY_STR(name)));    \
    return fn args;                                                                                  \
  }

MT_LAZY_CUBLAS(cublas_library, cublasStatus_t, cublasCreate, (cublasHandle_t * handle), (handle))
MT_LAZY_CUBLAS(cublas_library, cublasStatus_t, cublasSetStream, (cublasHandle_t handle, cudaStream_t stream),
               (handle, stream))
MT_LAZY_CUBLAS(cublas_library, cublasStatus_t, cublasGetStream, (cublasHandle_t handle, cudaStream_t* stream),
               (handle, stream))
MT_LAZY_CUBLAS(cublas_library, cublasStatus_t, cublasSetWorkspace,
               (cublasHandle_t handle, void* workspace, size_t workspaceSizeInBytes),
               (handle, workspace, workspaceSizeInBytes))
MT_LAZY_CUBLAS(cublas_library, cublasStatus_t, cublasSetMathMode, (cublasHandle_t handle, cublasMath_t mode),
               (handle, mode))
MT_LAZY_CUBLAS(cublas_library, const char*, cublasGetStatusString, (cublasStatus_t status), (status))
MT_LAZY_CUBLAS(cublas_library, cublasStatus_t, cublasGemmEx,
               (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B, cudaDataType Btype,
                int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                cublasGemmAlgo_t algo),
               (handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,
                computeType, algo))
MT_LAZY_CUBLAS(cublas_library, cublasStatus_t, cublasGemmStridedBatchedEx,
               (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                const void* alpha, const void* A, cudaDataType Atype, int lda, long long int strideA, const void* B,
                cudaDataType Btype, int ldb, long long int strideB, const void* beta, void* C, cudaDataType Ctype,
                int ldc, long long int strideC, int batchCount, cublasComputeType_t computeType,
                cublasGemmAlgo_t algo),
               (handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C,
                Ctype, ldc, strideC, batchCount, computeType, algo))
MT_LAZY_CUBLAS(cublaslt_library, cublasStatus_t, cublasLtCreate, (cublasLtHandle_t * handle), (handle))
