// amp/cuda/fp8_delayed_scaling.h — the delayed-scaling recipe's per-step update for an Fp8Meta
// whose tensors live on a CUDA device: one kernel, nothing read back to the host, the CPU's bits
// (Fp8Metas::update_scales without the DDP reducer). CUDA builds only; no CUDA headers.
#pragma once
#include "amp/fp8_meta.h"

namespace mixtape::amp::cuda {

// Rolls m's history and computes its next scales on m's device, as Fp8Metas::update_scales does
// for one meta under `recipe`. m.amax_history must be a contiguous f32 (recipe.amax_history_len,
// 3) CUDA tensor, m.scale and m.scale_inv contiguous f32 (3) on the same device.
void update_delayed_scaling(Fp8Meta& m, const DelayedScaling& recipe);

}  // namespace mixtape::amp::cuda
