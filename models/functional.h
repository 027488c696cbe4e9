// models/functional.h — nn::functional: the stateless ops under the names PyTorch users reach
// for (torch::nn::functional / torch.nn.functional). Every name is mixtape's own op, re-exported:
//   nn::functional::cross_entropy(model(x), y);  nn::functional::relu(x);
#pragma once
#include "ops/activation.h"
#include "ops/conv.h"
#include "ops/dropout.h"
#include "ops/linear.h"
#include "ops/loss.h"
#include "ops/normalization.h"
#include "ops/pointwise.h"
#include "ops/pooling.h"
#include "ops/softmax.h"
#include "ops/views.h"

namespace mixtape::nn::functional {

// layers
using mixtape::conv2d;
using mixtape::linear;
// activations
using mixtape::gelu;
using mixtape::leaky_relu;
using mixtape::relu;
using mixtape::sigmoid;
using mixtape::tanh;
using mixtape::log_softmax;
using mixtape::softmax;
// pooling
using mixtape::adaptive_avg_pool2d;
using mixtape::avg_pool2d;
using mixtape::max_pool2d;
// normalisation and regularisation
using mixtape::batch_norm;
using mixtape::dropout;
using mixtape::layer_norm;
// shape
using mixtape::flatten;
// losses
using mixtape::Reduction;
using mixtape::binary_cross_entropy;
using mixtape::binary_cross_entropy_with_logits;
using mixtape::cross_entropy;
using mixtape::mse_loss;
using mixtape::nll_loss;

}  // namespace mixtape::nn::functional
