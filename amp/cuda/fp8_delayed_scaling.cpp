// amp/cuda/fp8_delayed_scaling.cpp — see amp/cuda/fp8_delayed_scaling.h: checks, the per-role
// scaled maximum (formed on the host exactly as amp::scale_from_amax forms it), and the launch.
#include "amp/cuda/fp8_delayed_scaling.h"

#include <cmath>

#include "amp/cuda/fp8_delayed_scaling_kernels.h"
#include "core/cuda/check.h"
#include "core/cuda/stream.h"

namespace mixtape::amp::cuda {

void update_delayed_scaling(Fp8Meta& m, const DelayedScaling& recipe) {
  constexpr const char* kOp = "update_delayed_scaling";
  check_recipe(recipe, kOp);
  const Device dev = m.amax_history.device();
  MT_CHECK(dev.is_cuda(), kOp, ": the meta '", m.name, "' is on ", dev, ", expected a CUDA device");
  MT_CHECK(m.amax_history.dtype() == DType::Float32 && m.amax_history.is_contiguous() &&
               m.amax_history.sizes() == (IntList{recipe.amax_history_len, kFp8Roles}),
           kOp, ": '", m.name, "'.amax_history must be a contiguous f32 (", recipe.amax_history_len, ", ", kFp8Roles,
           ") tensor, got ", m.amax_history.describe());
  for (const Tensor* t : {&m.scale, &m.scale_inv})
    MT_CHECK(t->dtype() == DType::Float32 && t->is_contiguous() && t->sizes() == (IntList{kFp8Roles}) &&
                 t->device() == dev,
             kOp, ": '", m.name, "'.scale and .scale_inv must be contiguous f32 (", kFp8Roles, ") tensors on ", dev,
             ", got ", t->describe(), " on ", t->device());
  ScaledMax sm{};
  for (int role = 0; role < kFp8Roles; ++role)
    sm.v[role] = fp8_max(fp8_dtype_for(recipe.fp8_format, static_cast<Fp8Role>(role))) * std::exp2(-recipe.margin);
  mixtape::cuda::DeviceGuard guard(dev.index());
  MT_CUDA_CHECK(launch_fp8_delayed_update(m.amax_history.data_ptr<float>(), m.scale.data_ptr<float>(),
                                          m.scale_inv.data_ptr<float>(), recipe.amax_history_len,
                                          recipe.amax_compute_algo == AmaxComputeAlgo::Max, sm,
                                          recipe.power_of_2_scales, mixtape::cuda::current_stream()),
                kOp);
}

}  // namespace mixtape::amp::cuda
