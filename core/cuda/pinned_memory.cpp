// core/cuda/pinned_memory.cpp — pinned CPU tensors over cudaHostAlloc (rules in pinned_memory.h).
#include "core/cuda/pinned_memory.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/graph.h"
#include "core/cuda_api.h"

namespace mixtape::cuda {

Tensor empty_pinned(const IntList& sizes, DType dtype) {
  check_available("cuda::empty_pinned");
  check_not_capturing("cuda::empty_pinned", "allocates page-locked host memory (cudaHostAlloc)");
  int64_t n = 1;
  for (int64_t s : sizes) {
    MT_CHECK(s >= 0, "cuda::empty_pinned: negative size in the shape");
    n *= s;
  }
  const size_t nbytes = static_cast<size_t>(n) * element_size(dtype);
  void* p = nullptr;
  if (nbytes > 0) MT_CUDA_CHECK(cudaHostAlloc(&p, nbytes, cudaHostAllocPortable), "cuda::empty_pinned");
  // A free that fails (the driver unloading at exit) cannot be reported from a deleter.
  return from_blob(p, sizes, dtype, [](void* q) { if (q) (void)cudaFreeHost(q); }, Device::CPU());
}

namespace {
// Copies the elements of CPU tensor `t` (any strides) in row-major order to `dst`, as bytes: the
// core layer has no copy op, and bytes keep every dtype's bits (NaN payloads included).
void gather_bytes(const Tensor& t, unsigned char* dst) {
  const size_t es = t.element_size();
  const auto* base = static_cast<const unsigned char*>(t.data_ptr());
  if (t.is_contiguous()) {
    std::memcpy(dst, base, t.nbytes());
    return;
  }
  const int64_t d = t.dim();
  std::vector<int64_t> index(static_cast<size_t>(d), 0);
  for (int64_t n = t.numel(); n > 0; --n) {
    int64_t at = 0;
    for (int64_t k = 0; k < d; ++k) at += index[k] * t.strides()[k];
    std::memcpy(dst, base + at * static_cast<int64_t>(es), es);
    dst += es;
    for (int64_t k = d - 1; k >= 0 && ++index[k] == t.sizes()[k]; --k) index[k] = 0;
  }
}
}  // namespace

Tensor pin_memory(const Tensor& t) {
  MT_CHECK(t.defined(), "cuda::pin_memory: undefined tensor");
  MT_CHECK(t.device().is_cpu(), "cuda::pin_memory: only CPU tensors can be pinned, got a tensor on ", t.device());
  if (is_pinned(t)) return t;
  Tensor out = empty_pinned(t.sizes(), t.dtype());
  if (t.numel() > 0) gather_bytes(t, static_cast<unsigned char*>(out.data_ptr()));
  return out;
}

bool is_pinned(const Tensor& t) {
  if (!t.defined() || !t.device().is_cpu() || t.nbytes() == 0 || !is_available()) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, t.data_ptr()) != cudaSuccess) {
    (void)cudaGetLastError();  // an unknown pointer on an old runtime: not pinned
    return false;
  }
  return a.type == cudaMemoryTypeHost;
}

}  // namespace mixtape::cuda
