// ops/cuda/fp8_cast_ops.cpp — see ops/cuda/fp8_cast.h: argument checks and launches of the scaled
// FP8 casts, and their registration with ops/cast.cpp.
#include "ops/cuda/fp8_cast.h"

#include <cmath>

#include "ops/cuda/fp8_kernels.h"
#include "ops/cuda/tensor_iter.h"

namespace mixtape::cuda {
namespace {

void check_scalar_f32(const Tensor& t, const Tensor& x, const char* what) {
  MT_CHECK(t.dtype() == DType::Float32 && t.numel() == 1 && t.is_contiguous(), "to_float8: ", what,
           " must be a contiguous f32 tensor of one element, got ", t.describe());
  MT_CHECK(t.device() == x.device(), "to_float8: ", what, " must be on the input's device ", x.device(), ", got ",
           t.device());
}

Tensor to_float8_hook(const Tensor& x, DType dtype, Float8Cast cast) {
  return cuda::to_float8(x, dtype, cast, Tensor{}, Tensor{});
}
Tensor from_float8_hook(const Tensor& x, float scale) { return cuda::from_float8(x, scale); }

const bool kRegistered = ::mixtape::detail::register_float8_cuda_casts({to_float8_hook, from_float8_hook});

}  // namespace

Tensor to_float8(const Tensor& x, DType dtype, Float8Cast cast, const Tensor& scale_dev, const Tensor& amax) {
  MT_CHECK(x.defined() && x.device().is_cuda(), "to_float8: expected a CUDA tensor");
  MT_CHECK(is_float8(dtype), "to_float8: the target must be Float8_e4m3fn or Float8_e5m2, got ", dtype_name(dtype));
  MT_CHECK(x.dtype() == DType::Float32 || is_reduced_float(x.dtype()),
           "to_float8: expected an f32, f16 or bf16 tensor (exactly representable in f32), got ", x.describe());
  MT_CHECK(!x.requires_grad(), "to_float8: not recorded by autograd, and ", x.describe(),
           " requires grad; pass x.detach()");
  if (scale_dev.defined())
    check_scalar_f32(scale_dev, x, "the device scale");
  else
    MT_CHECK(std::isfinite(cast.scale) && cast.scale > 0.0f, "to_float8: scale must be finite and > 0, got ",
             cast.scale);
  if (amax.defined()) check_scalar_f32(amax, x, "amax");
  (void)kRegistered;
  DeviceGuard guard(x.device().index());
  const Tensor xc = dense(x, "to_float8");
  Tensor out = empty_on(x.sizes(), dtype, x.device());
  MT_CUDA_CHECK(launch_to_float8(dtype, x.dtype(), xc.data_ptr(), out.data_ptr(), x.numel(), cast.scale,
                                 scale_dev.defined() ? scale_dev.data_ptr<float>() : nullptr, cast.saturation,
                                 amax.defined() ? amax.data_ptr<float>() : nullptr, current_stream()),
                "to_float8");
  return out;
}

void fold_amax(const Tensor& x, const Tensor& amax) {
  MT_CHECK(x.defined() && x.device().is_cuda() && (x.dtype() == DType::Float32 || is_reduced_float(x.dtype())),
           "fold_amax: expected an f32, f16 or bf16 CUDA tensor, got ", x.defined() ? x.describe() : "undefined");
  check_scalar_f32(amax, x, "amax");
  DeviceGuard guard(x.device().index());
  const Tensor xc = dense(x, "fold_amax");
  // The cast kernel with no output: the same amax reduction.
  MT_CUDA_CHECK(launch_to_float8(DType::Float8_e4m3fn, x.dtype(), xc.data_ptr(), nullptr, x.numel(), 1.0f, nullptr,
                                 Fp8Saturation::Finite, amax.data_ptr<float>(), current_stream()),
                "fold_amax");
}

Tensor from_float8(const Tensor& x, float scale) {
  MT_CHECK(x.defined() && x.device().is_cuda() && is_float8(x.dtype()),
           "from_float8: expected a Float8_e4m3fn or Float8_e5m2 CUDA tensor, got ", x.describe());
  DeviceGuard guard(x.device().index());
  const Tensor xc = dense(x, "from_float8");
  Tensor out = empty_on(x.sizes(), DType::Float32, x.device());
  MT_CUDA_CHECK(launch_from_float8(x.dtype(), xc.data_ptr(), out.data_ptr<float>(), x.numel(), scale, current_stream()),
                "from_float8");
  return out;
}

}  // namespace mixtape::cuda
