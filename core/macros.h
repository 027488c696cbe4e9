// core/macros.h — portability macros shared by host (g++) and device (nvcc) code.
// MIXTAPE_HD marks functions that must compile for both the CPU loops and CUDA kernels, so
// the arithmetic of an op is written once: an elementwise op's CPU loop and its CUDA kernel
// call the same functor.
#pragma once

#if defined(__CUDACC__)
#define MIXTAPE_HD __host__ __device__
#define MIXTAPE_INLINE __host__ __device__ __forceinline__
#else
#define MIXTAPE_HD
#define MIXTAPE_INLINE inline __attribute__((always_inline))
#endif
