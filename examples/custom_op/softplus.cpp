// examples/custom_op/softplus.cpp — a complete op defined outside mixtape's tree: its functor, its
// definition (name, AMP policy, what backward saves, backward, CPU kernel, samples), and the public
// function. The three pieces docs/adding-an-op.md lists; nothing in mixtape changes.
//
// This op is declared CPU-only: a CUDA build of mixtape would otherwise refuse to start without
// its CUDA kernel (see docs/adding-an-op.md, "CUDA kernels", for writing one in a .cu of your own).
#include "softplus.h"

#include <cmath>

#include "ops/cpu/elementwise.h"  // cpu::unary_loop: strides, broadcasting, 16-bit rounding
#include "ops/op_def.h"           // define_op, BackwardContext and the ops a backward uses
#include "ops/pointwise_op.h"     // unary_compute_dtype: the dtype rules mixtape's own ops use

namespace example {
namespace {
using namespace mixtape;

// The arithmetic, on the compute type A (float for 16-bit tensors: one rounding, on store).
struct Softplus {
  template <typename A>
  A operator()(A x) const {
    return x > A(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
  }
};

TensorList softplus_cpu(const OpCall& call) {
  const DType dt = unary_compute_dtype(call, PointwiseDtypes::ToFloat);
  return cpu::unary_loop(call, dt, Softplus{});
}

// d softplus / dx = sigmoid(x); written with ops, so it is itself differentiable.
TensorList softplus_backward(BackwardContext& c) { return {c.grad() * sigmoid(c.input(0))}; }

const OpSchema& kSoftplus = define_op("example_softplus")
                                .args({"input"})
                                .policy(AmpPolicy::FP32)  // exp and log1p: kept out of 16 bits
                                .save({0})                // backward reads the input
                                .grad(softplus_backward)
                                .kernel(DeviceType::CPU, softplus_cpu)
                                .cpu_only("an example op; a CUDA kernel would be a .cu of its own")
                                .sample("wide-range", {arg({3, 4}, -30, 30)})
                                .sample("near-zero", {arg({7}, -0.5, 0.5)});

}  // namespace

mixtape::Tensor softplus(const mixtape::Tensor& x) { return mixtape::dispatch1(kSoftplus, {x}); }

}  // namespace example
