// models/layers/layernorm.cpp — nn::LayerNorm.
#include "models/layers/layernorm.h"

#include "models/init.h"
#include "models/layers/detail.h"
#include "ops/creation.h"
#include "ops/normalization.h"

namespace mixtape::nn {

LayerNorm::LayerNorm(IntList shape, double eps_, bool affine) : normalized_shape(std::move(shape)), eps(eps_) {
  MT_CHECK(!normalized_shape.empty(), "LayerNorm: normalized_shape must not be empty");
  for (int64_t s : normalized_shape)
    MT_CHECK(s > 0, "LayerNorm: normalized_shape must be positive, got ", shape_str(normalized_shape));
  if (affine) {
    weight = register_parameter("weight", empty(normalized_shape));
    bias = register_parameter("bias", empty(normalized_shape));
  }
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  if (!weight.defined()) return;
  init::ones_(weight);
  init::zeros_(bias);
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, normalized_shape, weight, bias, eps); }

std::string LayerNorm::extra_repr() const {
  return detail::str_cat(detail::tuple_str(normalized_shape), ", eps=", eps,
                         ", elementwise_affine=", weight.defined() ? "True" : "False");
}

}  // namespace mixtape::nn
