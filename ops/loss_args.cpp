// ops/loss_args.cpp — the argument checks, geometry and messages of the losses declared in
// ops/loss_args.h, and reduction_name.
// Invariant: every loss kernel, CPU (ops/nll_loss.cpp, cross_entropy.cpp, mse_loss.cpp,
// bce_loss.cpp) or CUDA (ops/cuda/loss_norm_ops.cpp, softmax_loss_ops.cpp), validates its
// arguments and words its value errors only through these functions, so both backends accept the
// same arguments and fail with the same messages.
#include "ops/loss_args.h"

#include <string>

#include "core/error.h"

namespace mixtape {
namespace {

void check_same_shape(const char* op, const Tensor& input, const Tensor& target, const char* input_name) {
  MT_CHECK(target.sizes() == input.sizes(), op, ": target ", target.describe(), " must have the same shape as ",
           input_name, " ", input.describe(), " (no broadcasting: reshape one of them explicitly)");
}

void check_broadcastable_to(const char* op, const Tensor& w, const Tensor& input, const char* what) {
  if (!w.defined()) return;
  MT_CHECK(is_floating(w.dtype()), op, ": expected a floating ", what, ", got ", w.describe());
  bool ok = w.dim() <= input.dim();
  for (int64_t d = 0; ok && d < w.dim(); ++d) {
    const int64_t ws = w.sizes()[d], xs = input.sizes()[input.dim() - w.dim() + d];
    ok = ws == xs || ws == 1;
  }
  MT_CHECK(ok, op, ": ", what, " ", w.describe(), " must be broadcastable to the input's shape ",
           shape_str(input.sizes()));
}

// A flat position in `shape` as its index, e.g. 5 in [2, 3] -> [1, 2].
std::string index_str(int64_t linear, const IntList& shape) {
  IntList idx(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? linear % shape[d] : 0;
    linear = shape[d] ? linear / shape[d] : 0;
  }
  return shape_str(idx);
}
}  // namespace

Reduction loss_reduction(const Attrs& a, const char* op) {
  const int64_t r = a.get<int64_t>("reduction");
  MT_CHECK(r >= 0 && r <= 2, op, ": invalid reduction ", r, " (expected None = 0, Mean = 1, Sum = 2)");
  return static_cast<Reduction>(r);
}

void check_loss_floating(const char* op, const Tensor& t, const char* what) {
  MT_CHECK(t.defined(), op, ": ", what, " is undefined");
  MT_CHECK(is_floating(t.dtype()), op, ": expected a floating ", what, ", got ", t.describe());
}

void check_elementwise_loss_args(const char* op, const Tensor& input, const Tensor& target, const Tensor& weight,
                                 const Tensor& pos_weight) {
  check_loss_floating(op, input, "input");
  check_loss_floating(op, target, "target");
  check_same_shape(op, input, target, "input");
  check_broadcastable_to(op, weight, input, "weight");
  check_broadcastable_to(op, pos_weight, input, "pos_weight");
}

NllGeom nll_geometry(const IntList& sizes) {
  NllGeom g;
  if (sizes.size() == 1) {
    g.c = sizes[0];
    return g;
  }
  g.n = sizes[0];
  g.c = sizes[1];
  g.target_shape.push_back(sizes[0]);
  for (size_t d = 2; d < sizes.size(); ++d) {
    g.s *= sizes[d];
    g.target_shape.push_back(sizes[d]);
  }
  return g;
}

std::string bad_target_message(int64_t value, int64_t position, const IntList& shape, int64_t classes,
                               int64_t ignore_index) {
  return detail::str_cat("target ", value, " at position ", index_str(position, shape),
                         " is out of bounds: expected a class in [0, ", classes, ") or ignore_index ", ignore_index);
}
std::string bad_probability_message(double value, int64_t position, const IntList& shape) {
  return detail::str_cat("all elements of input should be between 0 and 1 (probabilities; use "
                         "binary_cross_entropy_with_logits for logits), got ", value, " at position ",
                         index_str(position, shape));
}

NllGeom nll_check(const char* op, const Tensor& input, const Tensor& target, const Tensor& weight,
                  const char* input_name) {
  check_loss_floating(op, input, input_name);
  MT_CHECK(target.defined(), op, ": target is undefined");
  MT_CHECK(input.dim() >= 1, op, ": expected ", input_name, " of shape (N, C), (N, C, d1, ...) or (C), got ",
           input.describe());
  MT_CHECK(target.dtype() == DType::Int64, op, ": target must hold Int64 class indices, got ", target.describe(),
           is_floating(target.dtype()) ? " (class-probability targets are not supported)" : "");
  NllGeom g = nll_geometry(input.sizes());
  MT_CHECK(target.sizes() == g.target_shape, op, ": expected target of shape ", shape_str(g.target_shape), " for ",
           input_name, " ", input.describe(), ", got ", target.describe());
  check_class_weight(op, weight, g.c);
  return g;
}

void check_class_weight(const char* op, const Tensor& weight, int64_t classes) {
  if (!weight.defined()) return;
  MT_CHECK(is_floating(weight.dtype()), op, ": expected a floating weight, got ", weight.describe());
  MT_CHECK(weight.dim() == 1 && weight.sizes()[0] == classes, op, ": weight must be 1-D of size C = ", classes,
           " (one weight per class), got ", weight.describe());
}

const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::None: return "none";
    case Reduction::Mean: return "mean";
    case Reduction::Sum: return "sum";
  }
  return "?";
}

}  // namespace mixtape
