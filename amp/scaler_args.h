// amp/scaler_args.h — the operand checks of the GradScaler ops
// _amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_, shared by the CPU kernels
// (amp/scaler_kernels.cpp, where they are defined) and the CUDA glue (amp/cuda/scaler_ops.cpp), so
// both backends fail with the same messages. Internal: not part of the public API.
#pragma once
#include <cstddef>

#include "core/dispatcher.h"
#include "core/tensor.h"

namespace mixtape::amp {

// inputs (found_inf, inv_scale, grads...): at least two, found_inf a contiguous 1-element f32
// tensor, inv_scale a 1-element f32 tensor.
void check_unscale_operands(const OpCall& c);
// Input i (>= 2), a gradient, when defined: floating and contiguous.
void check_unscale_grad(const OpCall& c, size_t i);

// inputs (scale, growth_tracker, found_inf): 1-element f32, 1-element i32, 1-element f32; the
// attribute growth_interval in [1, 2^31 - 1].
void check_update_scale_operands(const OpCall& c);

}  // namespace mixtape::amp
