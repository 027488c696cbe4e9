// models/layers/linear.cpp — nn::Linear.
#include "models/layers/linear.h"

#include <cmath>

#include "models/init.h"
#include "models/layers/detail.h"
#include "ops/creation.h"
#include "ops/linear.h"

namespace mixtape::nn {

Linear::Linear(int64_t in, int64_t out, bool with_bias, Generator* gen) : in_features(in), out_features(out) {
  MT_CHECK(in >= 0 && out >= 0, "Linear: in_features and out_features must be >= 0, got ", in, " and ", out);
  weight = register_parameter("weight", empty({out, in}));
  if (with_bias) bias = register_parameter("bias", empty({out}));
  reset_parameters(gen);
}

void Linear::reset_parameters(Generator* gen) {
  if (in_features > 0 && out_features > 0) init::kaiming_uniform_(weight, std::sqrt(5.0), "fan_in", "leaky_relu", gen);
  if (bias.defined()) {
    double bound = in_features > 0 ? 1.0 / std::sqrt(static_cast<double>(in_features)) : 0.0;
    init::uniform_(bias, -bound, bound, gen);
  }
}

Tensor Linear::forward(const Tensor& x) {
  // Checked here, not only in the op, so the error names this layer (and, in a model, its path):
  // a Flatten -> Linear mismatch shows up as the Linear's in_features.
  if (!x.defined() || x.dim() < 1 || x.size(-1) != in_features)
    input_error(detail::str_cat("in_features=", in_features, ", out_features=", out_features),
                detail::str_cat("expected input [..., ", in_features, "], got ",
                                x.defined() ? x.describe() : std::string("an undefined tensor")));
  return linear(x, weight, bias);
}

std::string Linear::extra_repr() const {
  return detail::str_cat("in_features=", in_features, ", out_features=", out_features,
                         ", bias=", bias.defined() ? "True" : "False");
}

}  // namespace mixtape::nn
