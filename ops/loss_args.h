// ops/loss_args.h — argument checks and geometry of the losses, shared by the CPU kernels
// (ops/nll_loss.cpp, cross_entropy.cpp, mse_loss.cpp, bce_loss.cpp; defined in ops/loss_args.cpp)
// and the CUDA glue (ops/cuda/loss_norm_ops.cpp, softmax_loss_ops.cpp), so both backends read the
// same attributes and fail with the same messages. Internal: not part of the public API.
#pragma once
#include <cstdint>

#include "core/dispatcher.h"
#include "core/tensor.h"
#include "ops/loss.h"

namespace mixtape {

// The "reduction" attribute (None = 0, Mean = 1, Sum = 2); anything else is an error of `op`.
Reduction loss_reduction(const Attrs& a, const char* op);

// t (named `what` in the message) is defined and floating.
void check_loss_floating(const char* op, const Tensor& t, const char* what);

// The elementwise losses (mse_loss, binary_cross_entropy and its backward, _with_logits): input
// and target floating, of one shape (no broadcasting); weight and pos_weight, when defined,
// floating and broadcastable to the input's shape.
void check_elementwise_loss_args(const char* op, const Tensor& input, const Tensor& target,
                                 const Tensor& weight = Tensor(), const Tensor& pos_weight = Tensor());

// nll_loss: logp (N, C, d1..dk) is read as (N, C, S), S = d1 * ... * dk; target (N, d1..dk) as
// (N, S). A 1-D logp (C) has n = s = 1 and a 0-d target.
struct NllGeom {
  int64_t n = 1, c = 0, s = 1;
  IntList target_shape;
};
NllGeom nll_geometry(const IntList& sizes);

// The class-index arguments of nll_loss and cross_entropy (`input_name` is how the message calls
// input): input floating with at least one dim, target Int64 of nll_geometry's target_shape,
// weight (when defined) floating and 1-D of size C. Returns the geometry.
NllGeom nll_check(const char* op, const Tensor& input, const Tensor& target, const Tensor& weight,
                  const char* input_name);

// A class weight, when defined: floating and 1-D of size `classes` (nll_loss, both cross_entropy forms).
void check_class_weight(const char* op, const Tensor& weight, int64_t classes);

// The messages of the two value checks (after "<op>: "), for a flat position in `shape`: the
// CPU kernels raise them at once, the CUDA ones at the next synchronisation (deferred checks).
std::string bad_target_message(int64_t value, int64_t position, const IntList& shape, int64_t classes,
                               int64_t ignore_index);
std::string bad_probability_message(double value, int64_t position, const IntList& shape);

}  // namespace mixtape
