// ops/cast.cpp — to_dtype, to_device, clone.
//   to_dtype(x: T[*], dtype) -> dtype[*]; backward: cast g back to T.
//   clone(x) -> contiguous copy; backward: identity.
//   to_device(x, device) -> copy on device; backward: copy g back. (CUDA kernels in ops/cuda/.)
//   to_float8 / from_float8: the scaled FP8 casts (ops/cast.h), plain functions, not ops.
// Float -> 16-bit and FP8 conversions round to nearest even (core/half.h, core/bfloat16.h,
// core/float8.h); whole contiguous f32 <-> f16/bf16/fp8 buffers use the bulk converters
// (core/convert.h), bit-identical to the scalar ones.
#include "ops/cast.h"

#include <cmath>

#include "core/convert.h"
#include "core/cuda_api.h"
#include "ops/cpu/elementwise.h"
#include "ops/op_def.h"

namespace mixtape {
namespace {

template <typename To, typename From>
To convert_value(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;  // a copy, not a conversion: every bit pattern survives, signalling NaNs included
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<acc_t<From>>(v) != acc_t<From>(0);
  } else if constexpr (is_narrow_float_v<To>) {
    return To(static_cast<float>(v));  // double -> float -> 16/8-bit, as PyTorch does
  } else {
    return static_cast<To>(static_cast<acc_t<From>>(v));
  }
}

// Copies src into dst (same shape; any dtypes, any strides) on the CPU.
void copy_convert(const Tensor& dst, const Tensor& src) {
  if (dst.is_contiguous() && src.is_contiguous() && dst.sizes() == src.sizes()) {
    size_t n = static_cast<size_t>(dst.numel());
    if (src.dtype() == dst.dtype()) {
      if (n) std::memcpy(dst.data_ptr(), src.data_ptr(), n * dst.element_size());
      return;
    }
    if (src.dtype() == DType::Float32 && dst.dtype() == DType::Float16)
      return convert_float_to_half(src.data_ptr<float>(), dst.data_ptr<Half>(), n);
    if (src.dtype() == DType::Float16 && dst.dtype() == DType::Float32)
      return convert_half_to_float(src.data_ptr<Half>(), dst.data_ptr<float>(), n);
    if (src.dtype() == DType::Float32 && dst.dtype() == DType::BFloat16)
      return convert_float_to_bfloat16(src.data_ptr<float>(), dst.data_ptr<BFloat16>(), n);
    if (src.dtype() == DType::BFloat16 && dst.dtype() == DType::Float32)
      return convert_bfloat16_to_float(src.data_ptr<BFloat16>(), dst.data_ptr<float>(), n);
    if (src.dtype() == DType::Float32 && dst.dtype() == DType::Float8_e4m3fn)
      return convert_float_to_e4m3fn(src.data_ptr<float>(), dst.data_ptr<Float8_e4m3fn>(), n);
    if (src.dtype() == DType::Float32 && dst.dtype() == DType::Float8_e5m2)
      return convert_float_to_e5m2(src.data_ptr<float>(), dst.data_ptr<Float8_e5m2>(), n);
    if (src.dtype() == DType::Float8_e4m3fn && dst.dtype() == DType::Float32)
      return convert_e4m3fn_to_float(src.data_ptr<Float8_e4m3fn>(), dst.data_ptr<float>(), n);
    if (src.dtype() == DType::Float8_e5m2 && dst.dtype() == DType::Float32)
      return convert_e5m2_to_float(src.data_ptr<Float8_e5m2>(), dst.data_ptr<float>(), n);
  }
  visit_dtype_with_float8(dst.dtype(), "copy", [&]<typename To>() {
    visit_dtype_with_float8(src.dtype(), "copy", [&]<typename From>() {
      cpu::strided_loop<2>(dst.sizes(),
                           {{static_cast<char*>(dst.data_ptr()), static_cast<char*>(src.data_ptr())},
                            {cpu::broadcast_byte_strides(dst, dst.sizes()), cpu::broadcast_byte_strides(src, dst.sizes())}},
                           [&](std::array<char*, 2> p, std::array<int64_t, 2> s, int64_t n) {
                             for (int64_t i = 0; i < n; ++i) {
                               From v;
                               std::memcpy(&v, p[1] + i * s[1], sizeof(From));
                               To t = convert_value<To>(v);
                               std::memcpy(p[0] + i * s[0], &t, sizeof(To));
                             }
                           });
    });
  });
}

TensorList to_dtype_cpu(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  Tensor out = Tensor::empty(x.sizes(), TensorOptions(call.attrs.get<DType>("dtype")));
  copy_convert(out, x);
  return {out};
}

TensorList to_dtype_backward(BackwardContext& ctx) { return {to_dtype(ctx.grad(), ctx.input_dtype(0))}; }

// f32 keeps 24 bits: with a step of 1e-3 a central difference of the round trip errs by about
// 2^-24 / 1e-3 ~ 6e-5, inside rtol 1e-3.
SampleChecks coarse_gradcheck() {
  SampleChecks c;
  c.gradcheck_eps = 1e-3;
  c.gradcheck_atol = 1e-4;
  return c;
}
const OpSchema& kToDtype =
    define_op("to_dtype")
        .save({})
        .grad(to_dtype_backward)
        .kernel(DeviceType::CPU, to_dtype_cpu)
        .sample("f32-roundtrip", {arg({4})},
                [](const TensorList& x) { return TensorList{to_dtype(to_dtype(x[0], DType::Float32), x[0].dtype())}; },
                coarse_gradcheck())
        .sample("to-bf16-and-int", {arg({9, 21}, -300, 300)},
                [](const TensorList& x) {
                  return TensorList{to_dtype(x[0], DType::BFloat16), to_dtype(x[0], DType::Int32)};
                },
                no_gradcheck());

TensorList clone_cpu(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  Tensor out = Tensor::empty(x.sizes(), TensorOptions(x.dtype()));
  copy_convert(out, x);
  return {out};
}
TensorList clone_backward(BackwardContext& ctx) { return {ctx.grad()}; }
const OpSchema& kClone = define_op("clone").save({}).grad(clone_backward).kernel(DeviceType::CPU, clone_cpu).sample(
    "strided", {arg({2, 3})}, [](const TensorList& x) { return TensorList{clone(x[0].t())}; });

// CPU -> CPU is a copy. CPU -> CUDA lands here too (the call's device is the input's), and is
// handed to the CUDA backend's kernel (ops/cuda/copy.cpp), which does every GPU transfer.
// attr device: the target device index, -1 for the CPU.
TensorList to_device_cpu(const OpCall& call) {
  int64_t target = call.attrs.get<int64_t>("device");
  if (target >= 0) {
    MT_CHECK(cuda::is_available(), "to_device: cannot copy to cuda:", target, ": ", cuda::unavailable_reason());
    KernelFn cuda_copy = call.op ? call.op->kernels[static_cast<int>(DeviceType::CUDA)] : nullptr;
    MT_CHECK(cuda_copy != nullptr, "to_device: cannot copy to cuda:", target, ": no CUDA kernel registered");
    return cuda_copy(call);
  }
  return clone_cpu(call);
}
TensorList to_device_backward(BackwardContext& ctx) { return {to_device(ctx.grad(), ctx.input_meta[0].device)}; }
// The sample copies to the CPU through the op (to() would return a CPU tensor itself): a copy on
// the CPU, a device-to-host copy on CUDA, whose backward copies the gradient back.
const OpSchema& kToDevice = define_op("to_device")
                                .allow_mixed_devices()
                                .save({})
                                .grad(to_device_backward)
                                .kernel(DeviceType::CPU, to_device_cpu)
                                .sample("to-cpu", {arg({2, 3})}, {{"device", int64_t(-1)}});

}  // namespace

namespace cpu {
Tensor cast_to(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = Tensor::empty(t.sizes(), TensorOptions(dtype));
  copy_convert(out, t);
  return out;
}
void copy_into(const Tensor& dst, const Tensor& src) { copy_convert(dst, src); }
}  // namespace cpu

Tensor to_dtype(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  return dispatch1(kToDtype, {x}, {{"dtype", dtype}});
}

Tensor to_device(const Tensor& x, Device device) {
  if (x.device() == device) return x;
  return dispatch1(kToDevice, {x}, {{"device", int64_t(device.is_cpu() ? -1 : device.index())}});
}

Tensor clone(const Tensor& x) { return dispatch1(kClone, {x}); }

namespace {
detail::Float8CudaCasts& float8_cuda_casts() {
  static detail::Float8CudaCasts casts;
  return casts;
}
}  // namespace
bool detail::register_float8_cuda_casts(Float8CudaCasts casts) {
  float8_cuda_casts() = casts;
  return true;
}

Tensor to_float8(const Tensor& x, DType dtype, Float8Cast cast) {
  MT_CHECK(x.defined(), "to_float8: input is an undefined tensor");
  MT_CHECK(is_float8(dtype), "to_float8: the target must be Float8_e4m3fn or Float8_e5m2, got ", dtype_name(dtype));
  MT_CHECK(x.dtype() == DType::Float32 || is_reduced_float(x.dtype()),
           "to_float8: expected an f32, f16 or bf16 tensor (exactly representable in f32), got ", x.describe());
  MT_CHECK(std::isfinite(cast.scale) && cast.scale > 0.0f, "to_float8: scale must be finite and > 0, got ", cast.scale);
  MT_CHECK(!x.requires_grad(), "to_float8: not recorded by autograd, and ", x.describe(),
           " requires grad; pass x.detach()");
  if (x.device().is_cuda()) {
    MT_CHECK(float8_cuda_casts().to != nullptr, "to_float8: no CUDA kernel registered for ", x.describe());
    return float8_cuda_casts().to(x, dtype, cast);
  }
  const Tensor x32 = contiguous(cpu::cast_to(x, DType::Float32));
  Tensor out = Tensor::empty(x.sizes(), TensorOptions(dtype));
  const size_t n = static_cast<size_t>(x.numel());
  if (dtype == DType::Float8_e4m3fn)
    convert_float_to_e4m3fn(x32.data_ptr<float>(), out.data_ptr<Float8_e4m3fn>(), n, cast);
  else
    convert_float_to_e5m2(x32.data_ptr<float>(), out.data_ptr<Float8_e5m2>(), n, cast);
  return out;
}

Tensor from_float8(const Tensor& x, float scale) {
  MT_CHECK(x.defined(), "from_float8: input is an undefined tensor");
  MT_CHECK(is_float8(x.dtype()), "from_float8: expected a Float8_e4m3fn or Float8_e5m2 tensor, got ", x.describe());
  MT_CHECK(std::isfinite(scale) && scale > 0.0f, "from_float8: scale must be finite and > 0, got ", scale);
  if (x.device().is_cuda()) {
    MT_CHECK(float8_cuda_casts().from != nullptr, "from_float8: no CUDA kernel registered for ", x.describe());
    return float8_cuda_casts().from(x, scale);
  }
  const Tensor xc = contiguous(x);
  Tensor out = Tensor::empty(x.sizes(), TensorOptions(DType::Float32));
  const size_t n = static_cast<size_t>(x.numel());
  if (x.dtype() == DType::Float8_e4m3fn)
    convert_e4m3fn_to_float(xc.data_ptr<Float8_e4m3fn>(), out.data_ptr<float>(), n, scale);
  else
    convert_e5m2_to_float(xc.data_ptr<Float8_e5m2>(), out.data_ptr<float>(), n, scale);
  return out;
}
Tensor contiguous(const Tensor& x) { return x.is_contiguous() ? x : clone(x); }

}  // namespace mixtape
