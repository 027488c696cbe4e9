// ops/pointwise_functor.h — what makes a functor a pointwise op's kernel on every device.
// A pointwise functor (ops/functors.h, ops/activation_functors.h) is a trivially copyable struct
// with an arity-1 or arity-2 MIXTAPE_HD operator() on the compute type, a `kDtypes` rule, and
// MT_CUDA_KERNELS(Functor) right after it. The op definition (define_unary / define_binary,
// ops/pointwise_op.h) then takes the CPU loop and the CUDA kernel from that one declaration.
//
// Invariant: in a CUDA build, an op defined with a functor links only if the functor's CUDA
// kernels were instantiated (MT_CUDA_KERNELS in a header that ops/cuda/pointwise.cu includes):
// forgetting one is a link error of libmixtape_ops, never a run-time surprise on a GPU.
// C++17-clean and free of CUDA types: both compilers include this header. docs/adding-an-op.md.
#pragma once
#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/macros.h"

namespace mixtape {
namespace cuda {
struct Operands;  // ops/cuda/kernel_api.h
}

// Which dtypes a pointwise op computes in (one rule for the CPU and CUDA kernels).
enum class PointwiseDtypes : uint8_t {
  Numeric,    // any dtype but bool; integers compute in their own type (neg, abs, add, clamp)
  ToFloat,    // integral inputs compute (and return) f32: exp(int) -> f32 (exp, div, sigmoid)
  FloatOnly,  // non-floating inputs are an error naming the op (gelu, leaky_relu, their grads)
  Compare,    // compute in the promoted dtype, return bool (eq)
};

namespace fn {

// The CUDA kernels of functor F, defined in ops/cuda/pointwise_kernels.cuh and instantiated by
// MT_CUDA_KERNELS(F). `functor` points to an F; `stream` is a cudaStream_t; the result is a
// cudaError_t. unary: out = F(in) (ops = out, in). binary: out = F(a, b) stored as the input dtype
// or as bool (out_bool); scalar_side 0/1 names a wrapped-number operand `scalar` kept in the
// compute type (ops = out, the tensor operand), -1: none (ops = out, a, b).
template <typename F>
struct CudaKernels {
  static int unary(DType dt, const cuda::Operands& ops, const void* functor, void* stream);
  static int binary(DType dt, bool out_bool, const cuda::Operands& ops, int scalar_side, double scalar,
                    const void* functor, void* stream);
};

template <typename F>
inline constexpr bool is_unary_functor_v = std::is_invocable_v<const F&, float>;
template <typename F>
inline constexpr bool is_binary_functor_v = std::is_invocable_v<const F&, float, float>;

}  // namespace fn
}  // namespace mixtape

// MT_CUDA_KERNELS(F): written once after each pointwise functor, inside namespace mixtape::fn
// (a functor of another namespace writes `template struct mixtape::fn::CudaKernels<my::F>;` at
// global scope in a .cu of its own). In ops/cuda/pointwise.cu it instantiates F's kernels; in
// every other translation unit it checks what the kernels need of F.
#ifdef MIXTAPE_INSTANTIATE_CUDA_KERNELS
#define MT_CUDA_KERNELS(F) template struct CudaKernels<F>
#else
#define MT_CUDA_KERNELS(F)                                                                                      \
  static_assert(std::is_trivially_copyable_v<F> && (is_unary_functor_v<F> || is_binary_functor_v<F>),         \
                #F ": a pointwise functor is trivially copyable (it is copied to the device) and callable "  \
                   "with one or two floats");                                                                 \
  static_assert(std::is_same_v<std::remove_cv_t<decltype(F::kDtypes)>, ::mixtape::PointwiseDtypes>,           \
                #F ": a pointwise functor declares its dtype rule, static constexpr PointwiseDtypes kDtypes")
#endif
