// ops/cuda/pointwise_kernels.cuh — the definition of fn::CudaKernels<F> (ops/pointwise_functor.h):
// the CUDA kernels every pointwise functor gets, for the dtypes its kDtypes rule allows, over the
// elementwise machinery of ops/cuda/loops.cuh.
// Invariant: the kernels widen storage values to acc_t<T>, call the same functor as the CPU loop
// and round once on store; a wrapped-number operand stays in the compute type (f16 * 0.1 multiplies
// by 0.1f), exactly as ops/cpu/elementwise.h. A dtype outside the rule returns
// cudaErrorInvalidValue (the host side, ops/cuda/pointwise_glue.cpp, checks dtypes first).
// Included by .cu files only (C++17), before the functor headers whose kernels they instantiate.
#pragma once
#define MIXTAPE_INSTANTIATE_CUDA_KERNELS 1
#include "ops/cuda/loops.cuh"
#include "ops/pointwise_functor.h"

namespace mixtape::fn {
namespace detail {

// Calls fn(TypeTag<T>{}) for each dtype rule R admits (integers only for Numeric and Compare).
template <PointwiseDtypes R, typename Fn>
cudaError_t visit_rule(DType dt, Fn&& fn) {
  if constexpr (R == PointwiseDtypes::Numeric || R == PointwiseDtypes::Compare)
    return cuda::visit_numeric_cuda(dt, fn);
  else
    return cuda::visit_floating_cuda(dt, fn);
}

}  // namespace detail

template <typename F>
int CudaKernels<F>::unary(DType dt, const cuda::Operands& ops, const void* functor, void* stream) {
  if constexpr (is_unary_functor_v<F>) {
    const F f = *static_cast<const F*>(functor);
    const auto s = static_cast<cudaStream_t>(stream);
    return detail::visit_rule<F::kDtypes>(dt, [&](auto tag) {
      using T = typename decltype(tag)::type;
      return cuda::launch_map<T, T, 1>(ops, cuda::UnaryMap<T, F>{f}, s);
    });
  } else {
    return cudaErrorInvalidValue;  // a binary functor called as unary: the host glue never does
  }
}

template <typename F>
int CudaKernels<F>::binary(DType dt, bool out_bool, const cuda::Operands& ops, int scalar_side, double scalar,
                           const void* functor, void* stream) {
  if constexpr (is_binary_functor_v<F>) {
    const F f = *static_cast<const F*>(functor);
    const auto s = static_cast<cudaStream_t>(stream);
    constexpr bool kBool = F::kDtypes == PointwiseDtypes::Compare;
    if (out_bool != kBool) return cudaErrorInvalidValue;
    return detail::visit_rule<F::kDtypes>(dt, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using A = acc_t<T>;
      using Out = std::conditional_t<kBool, bool, T>;
      if (scalar_side >= 0)
        return cuda::launch_map<Out, T, 1>(ops, cuda::ScalarMap<Out, T, F>{f, static_cast<A>(scalar), scalar_side == 0},
                                           s);
      if constexpr (kBool)
        return cuda::launch_map<bool, T, 2>(ops, cuda::BinaryBoolMap<T, F>{f}, s);
      else
        return cuda::launch_map<T, T, 2>(ops, cuda::BinaryMap<T, F>{f}, s);
    });
  } else {
    return cudaErrorInvalidValue;
  }
}

}  // namespace mixtape::fn
