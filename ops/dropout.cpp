// ops/dropout.cpp — dropout: definition (AMP policy None), backward and CPU kernel.
//   dropout(x) -> out (x's shape and dtype), mask (x's shape, bool)   [mask internal]
// Element i of x (row-major) is kept when uniform(word i of the Philox stream at
// (seed, offset)) < 1 - p; the uniform has 24 bits, so the keep probability is 1 - p to within
// 2^-24. Kept values are x * (1 / (1 - p)) in acc_t<T>, rounded once. The mask is saved as bool
// (1 byte per element) and the backward is g * mask * scale, written with ops (differentiable
// again; the mask is a constant).
#include "ops/dropout.h"

#include <algorithm>

#include "ops/cpu/elementwise.h"
#include "ops/op_def.h"

namespace mixtape {
namespace {

// inputs: x; attrs: p, seed, offset, default_generator (read by the CUDA kernel only)
TensorList dropout_cpu(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const double p = call.attrs.get<double>("p");
  const auto seed = static_cast<uint64_t>(call.attrs.get<int64_t>("seed"));
  const auto offset = static_cast<uint64_t>(call.attrs.get<int64_t>("offset"));
  MT_CHECK(is_floating(x.dtype()), call.name(), ": expected a floating input (f16, bf16, f32, f64), got ",
           x.describe());
  MT_CHECK(p >= 0.0 && p <= 1.0, call.name(), ": probability has to be between 0 and 1, got p=", p);
  const Tensor xc = x.is_contiguous() ? x : clone(x.detach());
  Tensor out = Tensor::empty(x.sizes(), TensorOptions(x.dtype()));
  Tensor mask = Tensor::empty(x.sizes(), TensorOptions(DType::Bool));
  const int64_t n = x.numel();
  const double keep = 1.0 - p;
  bool* pm = mask.data_ptr<bool>();
  visit_floating(x.dtype(), call.name(), [&]<typename T>() {
    using A = acc_t<T>;
    const T* px = static_cast<const T*>(xc.data_ptr());
    T* po = static_cast<T*>(out.data_ptr());
    const A scale = p < 1.0 ? static_cast<A>(1.0 / keep) : A(0);
    const T zero = static_cast<T>(A(0));
    // One Philox block gives the words of 4 consecutive elements (philox_word's layout).
    const int64_t blocks = (n + 3) / 4;
#pragma omp parallel for if (n >= cpu::kParallelGrain) schedule(static)
    for (int64_t bi = 0; bi < blocks; ++bi) {
      const uint64_t block = offset + static_cast<uint64_t>(bi);
      const Philox4x32 r = philox4x32_10(uint32_t(block), uint32_t(block >> 32), 0, 0, uint32_t(seed),
                                         uint32_t(seed >> 32));
      for (int64_t i = bi * 4, e = std::min(n, bi * 4 + 4); i < e; ++i) {
        const bool k = p < 1.0 && static_cast<double>(uniform_from_bits(r.v[i - bi * 4])) < keep;
        pm[i] = k;
        po[i] = k ? static_cast<T>(static_cast<A>(px[i]) * scale) : zero;
      }
    }
  });
  return {out, mask};
}

TensorList dropout_backward(BackwardContext& c) {
  const double p = c.attrs.get<double>("p");
  if (p >= 1.0) return {zeros_like(c.grad())};  // exact zeros, even for a non-finite g
  return {c.grad() * c.output(1) * (1.0 / (1.0 - p))};
}
// Samples. A generator made inside the call with a fixed seed: every evaluation (each step of the
// gradcheck, each device) draws the same Philox words, and the CUDA kernel reads element i from
// word i as the CPU does (ops/cuda/dropout_ops.cpp), so CPU and CUDA drop the same elements.
// Parity: a kept value is one multiply by the same scale, rounded once; the backward g mask scale
// is ops of one rounding each: bit-identical (0). "several-blocks" spans several CUDA blocks and
// ends in a partial Philox block (2145 = 4 * 536 + 1); p = 0.5: the scale 2 is exact in every dtype.
const OpSchema& kDropout =
    define_op("dropout")
        .save({}, {1})
        .grad(dropout_backward)
        .kernel(DeviceType::CPU, dropout_cpu)
        .sample("p0.3", {arg({4, 5})},
                [](const TensorList& x) {
                  Generator g(1234);
                  return TensorList{dropout(x[0], 0.3, true, &g)};
                },
                SampleChecks{.parity_roundings = 0})
        .sample("p1", {arg({3})}, [](const TensorList& x) { return TensorList{dropout(x[0], 1.0, true) + x[0]}; },
                SampleChecks{.parity_roundings = 0})
        .sample("several-blocks", {arg({65, 33})},
                [](const TensorList& x) {
                  Generator g(4321);
                  return TensorList{dropout(x[0], 0.5, true, &g)};
                },
                SampleChecks{.gradcheck = false, .parity_roundings = 0});

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  MT_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability has to be between 0 and 1, got p=", p);
  MT_CHECK(x.defined(), "dropout: input is undefined");
  if (!training || p == 0.0) return x;
  MT_CHECK(is_floating(x.dtype()), "dropout: expected a floating input (f16, bf16, f32, f64), got ", x.describe());
  Generator::Range r{0, 0};
  Generator& g = gen ? *gen : default_generator();
  if (p < 1.0) r = g.reserve(static_cast<uint64_t>(x.numel()));
  // default_generator: whether the draw came from the default generator, the one a CUDA graph's
  // replays advance (core/cuda/graph.h); a capture refuses any other.
  return dispatch(kDropout, {x},
                  {{"p", p},
                   {"seed", static_cast<int64_t>(r.seed)},
                   {"offset", static_cast<int64_t>(r.offset)},
                   {"default_generator", static_cast<int64_t>(&g == &default_generator())}})[0];
}

}  // namespace mixtape
