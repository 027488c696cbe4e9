// optim/unscale_to_master_args.h — the operand checks of unscale_to_master_grad_, shared by the
// CPU kernel (optim/optimizer.cpp, where they are defined) and the CUDA glue
// (optim/cuda/step_ops.cpp), so both backends fail with the same messages. Internal: not part of
// the public API.
#pragma once
#include "core/dispatcher.h"

namespace mixtape::optim::detail {

// inputs (dst, src, found_inf): dst a contiguous f32 tensor, src a contiguous f16/bf16 tensor of
// dst's shape, found_inf a 1-element f32 tensor.
void check_unscale_to_master(const OpCall& c);

}  // namespace mixtape::optim::detail
