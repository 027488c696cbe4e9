// ops/cpu/aligned_buffer.h — a scratch buffer of T aligned to 64 bytes (a cache line, a zmm
// register), grown on demand: the GEMM kernels keep one per thread for their packed panels.
// Invariant: get(n) returns at least n elements, 64-byte aligned, or throws std::bad_alloc.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

namespace mixtape::cpu {

template <typename T>
struct AlignedBuffer {
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data;
  int64_t size = 0;
  T* get(int64_t n) {
    if (n > size) {
      const size_t bytes = (static_cast<size_t>(n) * sizeof(T) + 63) / 64 * 64;
      T* p = static_cast<T*>(std::aligned_alloc(64, bytes));
      if (!p) throw std::bad_alloc();  // the old block stays: a later smaller get() still works
      data.reset(p);
      size = n;
    }
    return data.get();
  }
};

}  // namespace mixtape::cpu
