// models/layers/flatten.cpp — nn::Flatten.
#include "models/layers/flatten.h"

#include "models/layers/detail.h"
#include "ops/views.h"

namespace mixtape::nn {

Tensor Flatten::forward(const Tensor& x) { return flatten(x, start_dim, end_dim); }

std::string Flatten::extra_repr() const { return detail::str_cat("start_dim=", start_dim, ", end_dim=", end_dim); }

}  // namespace mixtape::nn
