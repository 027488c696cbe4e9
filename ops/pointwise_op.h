// ops/pointwise_op.h — define_unary / define_binary: a pointwise op from its functor. The CPU
// loop (ops/cpu/elementwise.h) and, in a CUDA build, the CUDA kernel (fn::CudaKernels<F>) are
// both instantiated from the one functor, with one dtype rule (F::kDtypes) and one way of reading
// its parameters (Params), so the two devices cannot disagree on what the op accepts.
//
//   const OpSchema& kExp = define_unary<fn::Exp>("exp").policy(AmpPolicy::FP32).grad(exp_backward);
//   const OpSchema& kGelu = define_unary<fn::Gelu, gelu_params>("gelu").grad(gelu_backward);
//
// Params, when the functor has fields: F params(const Attrs& attrs, DType compute_dtype), a
// function of the op's file that reads the call's attributes (and may check them against the
// dtype, as clamp's integer bounds). Without it the functor is default-constructed.
// Invariant: an op defined here has a kernel on every device mixtape was built for.
#pragma once
#include "core/dispatcher.h"
#include "ops/cpu/elementwise.h"
#include "ops/pointwise_functor.h"

namespace mixtape {

// The dtype a pointwise op computes in, from its inputs and rule; throws, naming the op, for
// inputs the rule refuses (bool; non-floating under FloatOnly; FP8 unless float8_ok, and FP8
// mixed with another dtype, which PyTorch does not promote). Shared by the CPU and CUDA sides.
DType unary_compute_dtype(const OpCall& call, PointwiseDtypes rule, bool float8_ok = false);
DType binary_compute_dtype(const OpCall& call, PointwiseDtypes rule, bool float8_ok = false);

// A functor with `static constexpr bool kFloat8 = true` (fn::Add, fn::Mul) runs on FP8 tensors
// on the CPU: the inputs widen to f32 exactly, the f32 loop computes, and the result rounds once
// to FP8 — the bits a fused loop would give. CUDA has no FP8 kernels yet and refuses them.
template <typename F>
inline constexpr bool has_float8_cpu_v = [] {
  if constexpr (requires { F::kFloat8; })
    return F::kFloat8;
  else
    return false;
}();

template <typename F>
using FunctorParams = F (*)(const Attrs& attrs, DType compute_dtype);

#if MIXTAPE_WITH_CUDA
namespace cuda {
using UnaryLaunch = int (*)(DType, const Operands&, const void* functor, void* stream);
using BinaryLaunch = int (*)(DType, bool out_bool, const Operands&, int scalar_side, double scalar,
                             const void* functor, void* stream);
// The host side of every pointwise CUDA kernel (ops/cuda/pointwise_glue.cpp): device, output,
// broadcast operands, then `launch` on the current stream, its error checked naming the op.
TensorList run_unary(const OpCall& call, DType dt, const void* functor, UnaryLaunch launch);
TensorList run_binary(const OpCall& call, DType dt, bool out_bool, const void* functor, BinaryLaunch launch);
// The same into a given `out` of the broadcast shape and dtype dt (out_bool: Bool), which may be
// `a` itself (an in-place op: each element is read before it is written, at the same index).
void run_binary_into(const char* op, const Tensor& out, const Tensor& a, const Tensor& b, DType dt, bool out_bool,
                     const void* functor, BinaryLaunch launch);
}  // namespace cuda
#endif

namespace pointwise_detail {

template <typename F, auto Params>
F make(const Attrs& attrs, DType dt) {
  if constexpr (Params == nullptr)
    return F{};
  else
    return Params(attrs, dt);
}

template <typename F, auto Params>
TensorList unary_cpu(const OpCall& call) {
  const DType dt = unary_compute_dtype(call, F::kDtypes);
  return cpu::unary_loop(call, dt, make<F, Params>(call.attrs, dt));
}
template <typename F, auto Params>
TensorList binary_cpu(const OpCall& call) {
  const DType dt = binary_compute_dtype(call, F::kDtypes, has_float8_cpu_v<F>);
  if constexpr (has_float8_cpu_v<F>) {
    if (is_float8(dt)) {
      OpCall wide = call;  // a wrapped number stays as it is: the f32 loop reads it as a float
      for (Tensor& t : wide.inputs)
        if (!t.is_wrapped_number()) t = cpu::cast_to(t, DType::Float32);
      const F f = make<F, Params>(call.attrs, DType::Float32);
      return {cpu::cast_to(cpu::binary_loop<false>(wide, DType::Float32, f)[0], dt)};
    }
  }
  return cpu::binary_loop<F::kDtypes == PointwiseDtypes::Compare>(call, dt, make<F, Params>(call.attrs, dt));
}

#if MIXTAPE_WITH_CUDA
template <typename F, auto Params>
TensorList unary_cuda(const OpCall& call) {
  const DType dt = unary_compute_dtype(call, F::kDtypes);
  const F f = make<F, Params>(call.attrs, dt);
  return cuda::run_unary(call, dt, &f, &fn::CudaKernels<F>::unary);
}
template <typename F, auto Params>
TensorList binary_cuda(const OpCall& call) {
  const DType dt = binary_compute_dtype(call, F::kDtypes);
  const F f = make<F, Params>(call.attrs, dt);
  return cuda::run_binary(call, dt, F::kDtypes == PointwiseDtypes::Compare, &f, &fn::CudaKernels<F>::binary);
}
#endif

}  // namespace pointwise_detail

template <typename F, FunctorParams<F> Params = nullptr>
OpSchema& define_unary(const char* name) {
  static_assert(fn::is_unary_functor_v<F>, "define_unary: the functor takes one value");
  OpSchema& op = define_op(name).kernel(DeviceType::CPU, pointwise_detail::unary_cpu<F, Params>);
  op.pointwise = true;
#if MIXTAPE_WITH_CUDA
  op.kernel(DeviceType::CUDA, pointwise_detail::unary_cuda<F, Params>);
#endif
  return op;
}

template <typename F, FunctorParams<F> Params = nullptr>
OpSchema& define_binary(const char* name) {
  static_assert(fn::is_binary_functor_v<F>, "define_binary: the functor takes two values");
  OpSchema& op = define_op(name).kernel(DeviceType::CPU, pointwise_detail::binary_cpu<F, Params>);
  op.pointwise = true;
#if MIXTAPE_WITH_CUDA
  op.kernel(DeviceType::CUDA, pointwise_detail::binary_cuda<F, Params>);
#endif
  return op;
}

}  // namespace mixtape
