// core/op_sample.h — sample calls an op declares with its definition (OpSchema::sample). The
// derived tests run every sample: a float64 gradcheck and the 16-bit round-once contract on the
// CPU (tests/ops/test_op_samples.cpp), CPU against CUDA in every floating dtype, forward and
// backward (tests/cuda_ops/test_sample_parity.cpp), and the coverage checks that every kernel ran.
// So an op's tests are its samples: no list elsewhere names it. docs/adding-an-op.md.
// Invariant: a sample is plain data plus an optional call; the tests make its tensors (seeded
// from the op and sample names, so every run and every device sees the same values).
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/attrs.h"
#include "core/tensor.h"

namespace mixtape {

// One input of a sample.
struct SampleArg {
  enum class Kind : uint8_t {
    Float,   // uniform in (lo, hi); converted to the dtype under test; differentiable by default
    Index,   // int64, uniform integers in [lo, hi)
    Bool,    // random true/false
    Scalar,  // a wrapped number (a Python scalar in PyTorch): the value lo
    Values,  // exactly `values` (shape `sizes`), a floating input
  };
  Kind kind = Kind::Float;
  IntList sizes;
  double lo = -1, hi = 1;
  std::vector<double> values;
  bool differentiable = true;  // Float / Values: gradcheck differentiates with respect to it
  // Not differentiated by the gradcheck (a saved output, a mask): a copy of this argument.
  SampleArg constant() const {
    SampleArg a = *this;
    a.differentiable = false;
    return a;
  }
};
inline SampleArg arg(IntList sizes, double lo = -1, double hi = 1) {
  return {SampleArg::Kind::Float, std::move(sizes), lo, hi, {}, true};
}
inline SampleArg index_arg(IntList sizes, int64_t lo, int64_t hi) {
  return {SampleArg::Kind::Index, std::move(sizes), double(lo), double(hi), {}, false};
}
inline SampleArg bool_arg(IntList sizes) { return {SampleArg::Kind::Bool, std::move(sizes), 0, 1, {}, false}; }
inline SampleArg scalar_arg(double v) { return {SampleArg::Kind::Scalar, {}, v, v, {}, false}; }
inline SampleArg values_arg(IntList sizes, std::vector<double> values) {
  return {SampleArg::Kind::Values, std::move(sizes), 0, 0, std::move(values), true};
}

// What the derived tests check of a sample.
struct SampleChecks {
  bool gradcheck = true;    // float64 gradcheck (ops with a backward)
  bool cuda_parity = true;  // CPU vs CUDA in f32, f64, f16, bf16
  // op16(x) == round16(op32(x)) bit for bit; default: yes for pointwise ops (define_unary /
  // define_binary), no for the others.
  std::optional<bool> rounds_once_16;
  // The float64 gradcheck's step and tolerances (autograd/gradcheck.h; its defaults).
  double gradcheck_eps = 1e-6, gradcheck_atol = 1e-5, gradcheck_rtol = 1e-3;
  // CUDA vs CPU: the number of roundings (or transcendental calls, 4 each) by which the two may
  // differ beyond the final store; tests/cuda_ops/test_sample_parity.cpp turns it into a bound.
  double parity_roundings = 4;
  // CUDA vs CPU: intermediate values the CUDA kernel rounds to the storage dtype where the CPU
  // kernel keeps them in the accumulation type (cuDNN's 16-bit conv + bias rounds the convolution
  // before adding the bias); each may differ by one storage rounding of a value ~ the output's.
  double storage_roundings = 0;
};

// The checks of a sample whose outputs are sums of up to `terms` products (GEMM, convolution,
// pooling windows): the CPU and CUDA kernels add them in other orders, so they may differ by up
// to `terms` roundings.
inline SampleChecks sums_of(double terms) {
  SampleChecks c;
  c.parity_roundings = terms;
  return c;
}
// The checks of a sample that has no gradient to check (a non-differentiable or in-place op, or
// a call whose outputs are an invariant of a random op).
inline SampleChecks no_gradcheck() {
  SampleChecks c;
  c.gradcheck = false;
  return c;
}

using SampleFn = std::function<TensorList(const TensorList& inputs)>;
struct OpSample {
  std::string name;            // "<op>/<case>"
  std::vector<SampleArg> args;
  Attrs attrs;                 // passed to the op when `fn` is empty
  SampleFn fn;                 // the call under test; empty: dispatch(op, inputs, attrs)
  SampleChecks checks;
};

}  // namespace mixtape
