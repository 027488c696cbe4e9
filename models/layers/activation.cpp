// models/layers/activation.cpp — ReLU, GELU, LeakyReLU modules.
#include "models/layers/activation.h"

#include "models/layers/detail.h"
#include "ops/activation.h"
#include "ops/pointwise.h"

namespace mixtape::nn {

Tensor ReLU::forward(const Tensor& x) { return relu(x); }

GELU::GELU(std::string approx) : approximate(std::move(approx)) {
  MT_CHECK(approximate == "none" || approximate == "tanh", "GELU: approximate must be \"none\" or \"tanh\", got \"",
           approximate, "\"");
}
Tensor GELU::forward(const Tensor& x) { return gelu(x, approximate); }
std::string GELU::extra_repr() const { return approximate == "none" ? "" : "approximate='" + approximate + "'"; }

Tensor LeakyReLU::forward(const Tensor& x) { return leaky_relu(x, negative_slope); }
std::string LeakyReLU::extra_repr() const { return detail::str_cat("negative_slope=", negative_slope); }

}  // namespace mixtape::nn
