// models/backward_into_grads.h — a backward that accumulates into the existing .grad buffers in
// place, for gradient accumulation under CUDA graphs (core/cuda/graphed_step.h): autograd sums a
// new gradient into .grad out of place (a new tensor), so a captured micro-step would read the
// capture-time buffer on every replay; here the buffer keeps its address.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace mixtape::nn {

// loss.backward(), then each parameter's new gradient is added in place into the .grad it had
// (the same bits as autograd's sum); a parameter that had none keeps autograd's new one.
// `params`: leaves of loss's graph (e.g. model.parameters()).
void backward_into_grads(const Tensor& loss, const std::vector<Tensor>& params);

}  // namespace mixtape::nn
