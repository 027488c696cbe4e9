// models/layers/dropout.cpp — nn::Dropout.
#include "models/layers/dropout.h"

#include "models/layers/detail.h"
#include "ops/dropout.h"

namespace mixtape::nn {

Dropout::Dropout(double p_, Generator* gen) : p(p_), generator(gen) {
  MT_CHECK(p >= 0.0 && p <= 1.0, "Dropout: probability has to be between 0 and 1, but got ", p);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training(), generator); }

std::string Dropout::extra_repr() const { return detail::str_cat("p=", p, ", inplace=False"); }

}  // namespace mixtape::nn
