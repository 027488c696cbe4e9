// core/state_dict.h — the saved state of anything (a module, an optimizer, a GradScaler): named
// tensors in name order. Scalars (step counts, hyperparameters, the loss scale) are 0-d
// tensors, so one format (safetensors) stores everything and resumes exactly.
#pragma once
#include <map>
#include <string>

#include "core/tensor.h"

namespace mixtape {

using StateDict = std::map<std::string, Tensor>;

}  // namespace mixtape
